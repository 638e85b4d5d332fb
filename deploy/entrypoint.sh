#!/bin/sh
# The image's entry point: the first argument names a role, the rest are passed to its command.
# Anything else runs as given (`gpupool demo ...`, `dagster api execute_run ...` from a run launcher).
# Ports are fixed inside the container; publish or map them outside (deploy/compose.yaml, deploy/k8s/).
set -eu
role=${1:-help}
[ $# -gt 0 ] && shift
workspace=${DAGSTER_WORKSPACE:-$DAGSTER_HOME/workspace.yaml}
case "$role" in
  webserver) exec dagster-webserver --host 0.0.0.0 --port 3000 --workspace "$workspace" "$@" ;;
  daemon) exec dagster-daemon run --workspace "$workspace" "$@" ;;
  # the code location; with Dagster's default run launcher the runs execute here too (the run worker)
  code-server) exec dagster api grpc --module-name pipelines.definitions --host 0.0.0.0 --port 4000 "$@" ;;
  allocator)
    db=${GPUPOOL_ALLOCATOR_DB:-/data/allocator/allocator.sqlite3}
    mkdir -p "$(dirname "$db")"
    exec gpupool allocator serve --db "$db" --host 0.0.0.0 --port 8080 "$@" ;;
  webhook) exec gpupool k8s-audit-webhook --host 0.0.0.0 --port 8765 "$@" ;;
  dashboards) exec gpupool dashboard --host 0.0.0.0 --port 8501 "$@" ;;
  metrics) exec gpupool metrics serve --host 0.0.0.0 --port 9464 "$@" ;;
  help)
    echo "roles: webserver daemon code-server allocator webhook dashboards metrics; or any command (gpupool ...)"
    exec gpupool --help ;;
  *) exec "$role" "$@" ;;
esac
