"""The audit webhook served on a free loopback port for a test, and stopped after it."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.connectors.k8s_audit import AuditWebhookServer


@contextmanager
def running_webhook(landing: Path, token: str | None, **options) -> Iterator[AuditWebhookServer]:
    server = AuditWebhookServer(landing, "127.0.0.1", 0, token, **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
