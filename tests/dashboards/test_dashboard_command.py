"""`gpupool dashboard` passes SIGTERM and SIGINT on to Streamlit and exits when it does: a supervisor's stop
leaves no server behind (issue 33). Served on a home without a warehouse: the server starts all the same."""
from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from pipelines.cli.common import EXIT_OK
from pipelines.cli.dashboard import streamlit_command
from pipelines.paths import REPO_ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_healthy(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"gpupool dashboard did not come up on {url}:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_to_gpupool_dashboard_stops_streamlit_and_exits_0(tmp_path, stop):
    port, log = free_port(), tmp_path / "dashboard.log"
    env = {k: v for k, v in os.environ.items() if k != "GPUPOOL_DASHBOARD_USERS"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "dashboard", "--home", str(tmp_path / "home"), "--port", str(port)],
            cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    streamlit = None
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log)
        [streamlit] = children(proc.pid)
        proc.send_signal(stop)
        code = proc.wait(timeout=60)  # a guard against hanging, not a measure
        assert code == EXIT_OK, log.read_text()[-3000:]
        assert not alive(streamlit), "Streamlit still runs after gpupool dashboard exited"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if streamlit is not None and alive(streamlit):  # what a failing run would leave behind
            os.kill(streamlit, signal.SIGKILL)


def test_the_pages_need_no_magic_so_it_is_served_off():
    """Streamlit's magic would write nothing on any page (its own transform adds no write), so serving with
    it off (STREAMLIT_OPTIONS: magic's ast.parse races in CPython 3.11 before 3.11.8) changes no page."""
    from streamlit.runtime.scriptrunner import magic

    app = REPO_ROOT / "dashboards" / "app.py"
    for page in [app, *sorted((app.parent / "views").glob("*.py"))]:
        tree = magic.add_magic(page.read_text(), str(page))
        writes = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "transparent_write"]
        assert writes == [], f"{page}: magic would write what line {writes[0].lineno} computes"
    command = streamlit_command(app, "127.0.0.1", 8501)
    assert command[command.index("--runner.magicEnabled") + 1] == "false"
