#!/usr/bin/env bash
# Stop the Prometheus started by scripts/prometheus-up.sh, by the PID it recorded.
#
#   scripts/prometheus-down.sh PIDFILE
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PIDFILE" >&2
  exit 2
fi
pidfile=$1
[ -s "$pidfile" ] || { echo "$pidfile: no PID recorded; nothing to stop" >&2; exit 0; }
pid=$(cat "$pidfile")
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "prometheus PID $pid still running after 10 s: SIGKILL" >&2
    kill -KILL "$pid"
  fi
fi
rm -f "$pidfile"
