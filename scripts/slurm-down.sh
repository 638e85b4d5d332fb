#!/usr/bin/env bash
# Stop the test cluster scripts/slurm-up.sh started: cancel its jobs (so no job step outlives
# slurmd), then stop the recorded PIDs in reverse start order (SIGTERM, then SIGKILL after a
# grace period: slurmd once needed it). Processes it did not start are left alone.
# State (accounting database, job ids, logs) is kept for the next slurm-up.sh.
set -euo pipefail

STATE=${GPUPOOL_SLURM_STATE:-/var/tmp/gpupool-slurm}
started_at=$(date +%s.%N)
if [ ! -d "$STATE/pids" ] || [ -z "$(ls -A "$STATE/pids")" ]; then
  echo "slurm-down: nothing recorded in $STATE/pids: nothing to stop"
  exit 0
fi

if [ -s "$STATE/pids/4-slurmctld" ] && kill -0 "$(cat "$STATE/pids/4-slurmctld")" 2>/dev/null \
   && timeout 5 scontrol ping 2>/dev/null | grep -q UP; then
  jobs=$(timeout 5 squeue -h -o %A 2>/dev/null || true)
  if [ -n "$jobs" ]; then
    echo "▸ cancelling $(echo "$jobs" | wc -l) jobs"
    # shellcheck disable=SC2086
    timeout 10 scancel $jobs || true
    for _ in $(seq 1 50); do
      [ -z "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
fi

running() {  # pid: alive and not a zombie waiting for a parent that does not reap
  kill -0 "$1" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

stop() {  # pid file
  local pidfile=$1 name pid
  name=$(basename "$pidfile")
  pid=$(cat "$pidfile")
  if ! running "$pid"; then
    rm -f "$pidfile"
    return
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 75); do
    running "$pid" || break
    sleep 0.2
  done
  if running "$pid"; then
    echo "  ${name#*-} (pid $pid) ignored SIGTERM for 15 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  echo "  stopped ${name#*-} (pid $pid)"
  rm -f "$pidfile"
}

echo "▸ stopping the Slurm cluster ($STATE)"
for pidfile in $(ls -1 "$STATE/pids"/* | sort -r); do
  stop "$pidfile"
done
echo "▸ slurm down in $(echo "$(date +%s.%N) $started_at" | awk '{printf "%.1f", $1 - $2}') s"
