#!/usr/bin/env bash
# Install the real components the tests run against: MLflow (pip, its own venv), and the Debian
# packages of Prometheus, node_exporter, Chromium, docker-compose, buildah and mmdebstrap here,
# Slurm and its accounting database through scripts/slurm-up.sh, PostgreSQL (the release catalog's
# many-machine mode) through scripts/postgres-up.sh: the tests call those two to start their servers,
# and they install their packages when missing.
# Idempotent; needs root and apt-get. Without them it says which tests will skip.
set -euo pipefail
cd "$(dirname "$0")/.."

# MLflow (tests/mlflow_server.py runs a real `mlflow server` for the MLflow connector's tests): in its
# own virtual environment, .venv-mlflow/, since its dependencies (pandas, pyarrow, numpy, ...) would
# fight the project's pins in requirements.lock. Pinned; needs neither root nor apt.
MLFLOW_VERSION=3.17.2
if [ "$(.venv-mlflow/bin/mlflow --version 2>/dev/null | awk '{print $NF}')" != "$MLFLOW_VERSION" ]; then
  echo "▸ installing mlflow $MLFLOW_VERSION into .venv-mlflow/"
  "${PYTHON:-python3.11}" -m venv .venv-mlflow
  if [ -x .venv/bin/uv ]; then  # scripts/setup.sh's installer: seconds, not minutes
    # no --compile-bytecode: the tests' mlflow server compiles what it imports once, at its first start
    # (make test writes bytecode caches), where compiling all of mlflow's packages took 20 s against 7
    UV_LINK_MODE=copy .venv/bin/uv pip install --quiet --python .venv-mlflow/bin/python "mlflow==$MLFLOW_VERSION" || true
  else
    .venv-mlflow/bin/python -m pip install --quiet --disable-pip-version-check "mlflow==$MLFLOW_VERSION" || true
  fi
  .venv-mlflow/bin/mlflow --version >/dev/null \
    || { echo "mlflow failed to install into .venv-mlflow/; see the installer's output above." >&2; exit 1; }
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "▸ not root or no apt-get: Prometheus, node_exporter, Slurm and browser tests skip unless those are installed" >&2
  exit 0
fi
if ! command -v prometheus >/dev/null 2>&1; then
  echo "▸ installing prometheus (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! command -v prometheus-node-exporter >/dev/null 2>&1; then
  # the host metrics' parser and scrape tests run the real node_exporter (tests/node_exporter_daemon.py);
  # policy-rc.d or no init system keeps the package's own service from starting
  echo "▸ installing prometheus-node-exporter (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-node-exporter >/dev/null
fi
if ! command -v chromium >/dev/null 2>&1; then
  # the browser test (tests/dashboards/test_browser.py) drives Debian's Chromium with Playwright;
  # the emoji font draws the dashboards' page icons in its screenshots
  echo "▸ installing chromium (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-noto-color-emoji >/dev/null
fi
# the monthly review pack (pipelines/pack/): WeasyPrint draws text with Pango; Noto CJK gives the
# Chinese pack its glyphs (without it they are empty boxes); poppler-utils' pdftoppm renders the
# pack's PDF pages to PNG in tests/pack/
pack_packages=()
for lib in libpango-1.0-0 libpangoft2-1.0-0 fonts-noto-cjk poppler-utils; do
  dpkg -s "$lib" >/dev/null 2>&1 || pack_packages+=("$lib")
done
if [ "${#pack_packages[@]}" -gt 0 ]; then
  echo "▸ installing ${pack_packages[*]} (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pack_packages[@]}" >/dev/null
fi
# the deployment: docker-compose validates deploy/compose.yaml (tests/deploy/); buildah and mmdebstrap
# build the image from Debian's packages (scripts/image-build.sh, run by hand: too slow for the suite)
deploy_packages=()
for package in docker-compose buildah mmdebstrap; do
  dpkg -s "$package" >/dev/null 2>&1 || deploy_packages+=("$package")
done
if [ "${#deploy_packages[@]}" -gt 0 ]; then
  echo "▸ installing ${deploy_packages[*]} (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${deploy_packages[@]}" >/dev/null
fi
