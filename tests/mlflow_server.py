"""A real `mlflow server` (SQLite backend, artifacts served by the server itself) on a free loopback
port, for the MLflow connector's end-to-end test. MLflow lives in its own virtual environment,
.venv-mlflow/ (scripts/components.sh installs it there: its dependencies would fight the project's
pins). Missing: skipped locally, a failure where GPUPOOL_REQUIRE_COMPONENTS=1 (CI)."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from pipelines.paths import REPO_ROOT
from tests.components import component_missing, require_component

# $GPUPOOL_MLFLOW points at another mlflow executable (e.g. a shared install); default: the project's own
MLFLOW = Path(os.environ.get("GPUPOOL_MLFLOW", REPO_ROOT / ".venv-mlflow" / "bin" / "mlflow"))
# The first start compiles what mlflow imports and creates the SQLite schema (alembic migrations): tens of
# seconds idle, and past 90 s on CI's slow machine of 2026-12-07 (still "Waiting for application startup"
# at the deadline) while the other workers built homes. A server that dies is seen at once (poll), so the
# long deadline costs only a server that hangs.
START_TIMEOUT_S = 300


def mlflow_binary() -> Path:
    require_component("mlflow", MLFLOW.is_file(), "bash scripts/components.sh installs it into .venv-mlflow/")
    return MLFLOW


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_mlflow(folder: Path) -> Iterator[str]:
    """Start `mlflow server` with its store in `folder`, wait for /health; yields its URL; stops it (by PID)."""
    binary = mlflow_binary()
    port = _free_port()
    log = (folder / "mlflow-server.log").open("wb")
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    process = subprocess.Popen(
        [str(binary), "server",
         "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", (folder / "artifacts").as_uri(),
         "--serve-artifacts", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if requests.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):  # not listening yet, or busy migrating
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "mlflow-server.log").read_text(errors="replace")[-800:]
                component_missing(f"mlflow server did not answer on {url}/health (exit {process.poll()}): {tail}")
            time.sleep(0.25)
        yield url
    finally:
        # the server's workers are its children in their own session: stop the group by the server's PID
        for sig, wait_s in ((15, 10), (9, 5)):
            if process.poll() is not None:
                break
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
        log.close()
