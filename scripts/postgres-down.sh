#!/usr/bin/env bash
# Stop the PostgreSQL server scripts/postgres-up.sh started: `pg_ctl stop -m fast` (rolls back open
# transactions, disconnects clients), then by the recorded PID (SIGTERM, SIGKILL after a grace
# period) if pg_ctl could not. A server it did not start is left alone. The cluster's data (the
# databases) is kept for the next postgres-up.sh; delete $GPUPOOL_PG_STATE to start from nothing.
set -euo pipefail

STATE=${GPUPOOL_PG_STATE:-/var/tmp/gpupool-postgres}
DATA=$STATE/data
started_at=$(date +%s.%N)
if [ ! -s "$STATE/pid" ]; then
  echo "postgres-down: no PID recorded in $STATE/pid: nothing to stop"
  exit 0
fi
pid=$(cat "$STATE/pid")

running() {  # a live postgres (not a reused PID), not a zombie waiting for a parent that does not reap
  kill -0 "$pid" 2>/dev/null && grep -qx postgres "/proc/$pid/comm" 2>/dev/null \
    && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

echo "▸ stopping postgres (pid $pid, $STATE)"
if running; then
  BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -x "$BIN/pg_ctl" ]; then
    (cd "$STATE" && setpriv --reuid=postgres --regid=postgres --init-groups -- \
      "$BIN/pg_ctl" stop -D "$DATA" -m fast -w -t 30 > /dev/null 2>&1) || true
  fi
  if running; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 75); do
      running || break
      sleep 0.2
    done
  fi
  if running; then
    echo "  postgres (pid $pid) ignored SIGTERM for 15 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  echo "  stopped postgres (pid $pid)"
fi
rm -f "$STATE/pid"
echo "▸ postgres down in $(echo "$(date +%s.%N) $started_at" | awk '{printf "%.1f", $1 - $2}') s"
