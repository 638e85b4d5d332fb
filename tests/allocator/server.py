"""`python -m allocator serve` as a real process on a free loopback port, for the tests that need the
service over HTTP (durability, live scrapes, the Prometheus connector)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from pipelines.paths import REPO_ROOT
from tests.allocator.helpers import ADMIN, BOT, TOKENS

SERVER_TOKENS = {token: TOKENS[token] for token in (ADMIN, BOT)}  # an admin and the governance bot
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    log: Path

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def start_server(
    db: Path, tmp: Path, tokens: dict | None = None, tick_s: float = 0.2, snapshot_every: int = 500
) -> Server:
    """`python -m allocator serve` on a free loopback port; returns once /healthz answers."""
    tokens_file = tmp / "tokens.json"
    tokens_file.write_text(json.dumps(tokens or SERVER_TOKENS))
    port = free_port()
    log = tmp / f"server-{port}.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "allocator",
            "serve",
            "--db",
            str(db),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tokens",
            str(tokens_file),
            "--tick",
            str(tick_s),
            "--snapshot-every",
            str(snapshot_every),
        ],
        cwd=REPO_ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    # a process that exits is seen at once: the long deadline only bounds one that hangs, and leaves room
    # for imports on a loaded CI machine (mlflow's server took over 90 s there, 2026-12-07)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(requests.ConnectionError):
            if requests.get(f"{url}/healthz", timeout=1).ok:
                return Server(url, process, log)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"server did not answer within {START_TIMEOUT_S} s:\n{log.read_text()}")


@contextlib.contextmanager
def running_server(db: Path, tmp: Path, tokens: dict | None = None) -> Iterator[Server]:
    server = start_server(db, tmp, tokens)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.terminate()
            server.process.wait(timeout=10)
