"""The real node_exporter (Debian's prometheus-node-exporter) on a free loopback port, for the
parser and scrape tests. Missing binary: skipped locally, a failure where
GPUPOOL_REQUIRE_COMPONENTS=1 (CI, after scripts/components.sh installed it)."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import requests

from tests.components import component_missing, require_component

BINARIES = ("prometheus-node-exporter", "node_exporter")  # Debian's name, upstream's


def node_exporter_binary() -> str:
    path = next((p for p in map(shutil.which, BINARIES) if p), None)
    require_component("prometheus-node-exporter", path is not None,
                      "apt-get install -y prometheus-node-exporter, or scripts/components.sh as root")
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_node_exporter() -> Iterator[str]:
    """Start the binary, wait until /metrics answers; yields its metrics URL; stops it after."""
    port = _free_port()
    process = subprocess.Popen(
        [node_exporter_binary(), f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if requests.get(url, timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                err = process.stderr.read().decode(errors="replace")[-500:] if process.stderr else ""
                component_missing(f"node_exporter did not answer on {url} (exit {process.poll()}): {err}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()
