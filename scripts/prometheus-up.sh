#!/usr/bin/env bash
# Start a Prometheus on loopback with the given config; install Debian's package if it is missing.
#
#   scripts/prometheus-up.sh CONFIG DATA_DIR PORT PIDFILE [LOGFILE]
#
# The server listens on 127.0.0.1:PORT, keeps its TSDB in DATA_DIR and runs in the background;
# its PID goes to PIDFILE (stop it with scripts/prometheus-down.sh PIDFILE). Returns once
# /-/ready answers. Ready is not data: with a 1 s scrape interval the first sample is queryable
# about 6 s after the start, so callers wait for the series they need.
set -euo pipefail

if [ $# -lt 4 ]; then
  echo "usage: $0 CONFIG DATA_DIR PORT PIDFILE [LOGFILE]" >&2
  exit 2
fi
config=$1 data=$2 port=$3 pidfile=$4 log=${5:-$2/prometheus.log}

if ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "prometheus is not installed and installing it needs root: apt-get install prometheus" >&2
    exit 1
  fi
  echo "▸ installing Debian's prometheus" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
[ -r "$config" ] || { echo "$config: Prometheus config not readable" >&2; exit 1; }
if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "$pidfile: Prometheus already running as PID $(cat "$pidfile")" >&2
  exit 1
fi
mkdir -p "$data" "$(dirname "$pidfile")" "$(dirname "$log")"

# setsid: its own session, so it outlives this script; stdout to the log, never to a pipe
setsid prometheus \
  --config.file="$config" \
  --storage.tsdb.path="$data" \
  --web.listen-address="127.0.0.1:$port" \
  --log.level=warn \
  </dev/null >"$log" 2>&1 &
echo $! >"$pidfile"

for _ in $(seq 1 150); do
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "prometheus exited at start; its log ($log):" >&2
    tail -n 20 "$log" >&2
    rm -f "$pidfile"
    exit 1
  fi
  if curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 \
     || python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/-/ready', timeout=1)" 2>/dev/null; then
    echo "prometheus PID $(cat "$pidfile") on 127.0.0.1:$port" >&2
    exit 0
  fi
  sleep 0.1
done
echo "prometheus did not become ready on 127.0.0.1:$port within 15 s; log ($log):" >&2
tail -n 20 "$log" >&2
exit 1
