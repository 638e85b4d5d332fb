"""Real components for the connector tests, and loopback HTTP servers that misbehave on purpose.

A test that needs a component that is not installed (Prometheus) is skipped with the reason,
unless GPUPOOL_REQUIRE_COMPONENTS=1, which CI sets: there a missing component fails the test.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from tests.components import require_component


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    require_component(
        "prometheus",
        path is not None,
        "apt-get install -y --no-install-recommends prometheus, or scripts/prometheus-up.sh as root",
    )
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- loopback HTTP servers ---------------------------------------------------------------------
Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


@dataclass
class LoopbackServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 answering every GET with `handle(request)`."""

    handle: Handler
    hits: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self

        class _Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner.hits.append(self.path)
                owner.handle(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def send(
    request: http.server.BaseHTTPRequestHandler,
    status: int,
    body: bytes,
    content_type: str = "text/plain; version=0.0.4; charset=utf-8",
    headers: dict[str, str] | None = None,
) -> None:
    request.send_response(status)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        request.send_header(name, value)
    request.end_headers()
    request.wfile.write(body)


def backfill_and_ingest(warehouse, start, end, config, **options):
    """What `gpupool backfill prometheus` does: land the window, then ingest each day it touched."""
    from pipelines.connectors.prometheus import LANDING_SOURCE, backfill_prometheus
    from pipelines.ingest import ingest_partition

    report = backfill_prometheus(warehouse.landing, start, end, config, **options)
    return report, [ingest_partition(warehouse, LANDING_SOURCE, day) for day in report.days]


@pytest.fixture
def loopback() -> Iterator[Callable[[Handler], LoopbackServer]]:
    """Start loopback servers (`loopback(handler)`); every one is stopped after the test."""
    started: list[LoopbackServer] = []

    def start(handle: Handler) -> LoopbackServer:
        server = LoopbackServer(handle)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
