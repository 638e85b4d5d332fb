#!/usr/bin/env bash
# Run gpupool's image (scripts/image-build.sh) with buildah, where no container runtime starts:
# `gpupool --version` (or --help), `gpupool demo --days 1 --gpus 16` in a fresh home, and each role of
# deploy/entrypoint.sh started as the image's user until it answers (the allocator's and the webhook's
# /healthz, the dashboards' health route, the code server's gRPC health, the webserver's
# /server_info), then stopped. Roles take free ports here: chroot isolation shares the host's network.
#
#   scripts/image-check.sh            # IMAGE=localhost/gpupool:dev
set -euo pipefail
IMAGE=${IMAGE:-localhost/gpupool:dev}

container=$(buildah from --pull-never "$IMAGE")
trap 'buildah rm "$container" >/dev/null' EXIT
in_image() { buildah run --isolation chroot "$container" -- "$@"; }

echo "▸ version"
in_image sh -c 'gpupool --version 2>/dev/null || { echo "(no --version yet: gpupool --help)"; gpupool --help | head -3; }'

echo "▸ gpupool demo --days 1 --gpus 16"
SECONDS=0
# shellcheck disable=SC2016  # expanded in the image
in_image sh -c 'home=$(mktemp -d) && cd "$home" && GPUPOOL_HOME="$home" gpupool demo --days 1 --gpus 16'
echo "  demo: ${SECONDS} s"

echo "▸ roles"
# shellcheck disable=SC2016  # expanded in the image
in_image sh -c '
set -u
export GPUPOOL_HOME=$(mktemp -d) DAGSTER_HOME=$(mktemp -d)
cd "$GPUPOOL_HOME"
cat > probe.py <<PY
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=3).read()[:160].decode())
PY
port() { python -c "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])"; }
code=$(port)
printf "load_from:\n  - grpc_server: {host: 127.0.0.1, port: %s, location_name: gpupool}\n" "$code" > "$DAGSTER_HOME/workspace.yaml"
export GPUPOOL_ALLOCATOR_DB=$GPUPOOL_HOME/allocator/allocator.sqlite3
export GPUPOOL_ALLOCATOR_TOKENS="{\"image-check-admin-token\": {\"role\": \"admin\", \"name\": \"check\"}}"
export GPUPOOL_AUDIT_TOKEN=image-check-audit-token GPUPOOL_DASHBOARD_USERS="[]"
failed=0
# check ROLE SECONDS PROBE: start the role on a free port ($p in PROBE) and wait until PROBE succeeds
check() {
  role=$1 limit=$2 probe=$3 p=$(port)
  [ "$role" = code-server ] && p=$code
  gpupool-entrypoint "$role" --port "$p" > "$role.log" 2>&1 &
  pid=$! start=$(date +%s)
  until out=$(eval "$probe" 2>/dev/null); do
    if ! kill -0 $pid 2>/dev/null || [ $(( $(date +%s) - start )) -ge "$limit" ]; then
      echo "  $role: FAILED; its last lines:"; tail -4 "$role.log" | sed "s/^/    /"
      failed=1; kill $pid 2>/dev/null; return
    fi
    sleep 1
  done
  echo "  $role: answers after $(( $(date +%s) - start )) s: $(echo "$out" | head -c 160)"
  [ "$role" = code-server ] || { kill $pid; wait $pid 2>/dev/null; }
}
check allocator 60 "python probe.py http://127.0.0.1:\$p/healthz"
check webhook 60 "python probe.py http://127.0.0.1:\$p/healthz"
check dashboards 90 "python probe.py http://127.0.0.1:\$p/_stcore/health"
check metrics 60 "python probe.py http://127.0.0.1:\$p/metrics"
# the webserver and the daemon load the code location from this code server
check code-server 300 "dagster api grpc-health-check --port \$p"
check webserver 120 "python probe.py http://127.0.0.1:\$p/server_info"
# the daemon serves nothing: it must still run after 20 s
gpupool-entrypoint daemon > daemon.log 2>&1 & pid=$!
sleep 20
if kill -0 $pid 2>/dev/null; then echo "  daemon: running after 20 s"; else
  echo "  daemon: FAILED; its last lines:"; tail -4 daemon.log | sed "s/^/    /"; failed=1; fi
kill $(jobs -p) 2>/dev/null
exit $failed
'
