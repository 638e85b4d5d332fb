#!/usr/bin/env bash
# Install everything gpupool needs into ./.venv (idempotent; fast when already installed).
set -euo pipefail
cd "$(dirname "$0")/.."

# The distribution's Python 3.11 where there is one with venv support (/usr/bin/python3.11 from
# python3.11-venv, as the README installs), else python3.11 on PATH; $PYTHON overrides. The suite runs
# about a tenth faster on Debian's build than on pyenv's default one (bench/README.md, "Figures the
# code's choices rest on").
DISTRIBUTION_PYTHON=/usr/bin/python3.11
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3.11
  if [ -x "$DISTRIBUTION_PYTHON" ] && "$DISTRIBUTION_PYTHON" -c "import ensurepip, venv" 2>/dev/null; then
    PYTHON=$DISTRIBUTION_PYTHON
  fi
fi
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "gpupool needs Python 3.11 ($PYTHON not found). Install it, or set PYTHON=/path/to/python3.11." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "▸ creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.gpupool-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
  echo "▸ installing Python packages (pinned by requirements.lock)"
  # pip installs uv (pinned too), which installs the rest several times faster (docs/testing.md)
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c requirements.lock uv \
    2>&1 | grep -v 'is ignored' || true
  UV_LINK_MODE=copy .venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python -c requirements.lock -e '.[dev]' \
    || { echo "Python packages failed to install; see the output above." >&2; exit 1; }
  .venv/bin/python -c "import dagster, duckdb, polars, great_expectations" \
    || { echo "Python packages failed to install; see the installer's output above." >&2; exit 1; }
  touch "$stamp"
fi
# The dbt manifest (models/target/manifest.json) the Dagster code location loads: `dbt parse`, when
# a file of models/ changed since the last one (pipelines/resources/dbt.py). No network needed.
.venv/bin/python -c "from pipelines.resources.dbt import prepared_project; prepared_project()" \
  || { echo "dbt parse of models/ failed; see its output above." >&2; exit 1; }
