"""The bounds every paging connector keeps (pipelines/connectors/bounded.py), against answers that lie:
Kueue's listing (a `continue` token answered again, JSON nested too deep) and the allocator's log pull
(a `next_cursor` that does not advance, over a real HTTP server on 127.0.0.1): a clean error naming
what was asked, never a loop or a crash."""
from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from pipelines.connectors.bounded import SourceAnswerError, loads_bounded
from pipelines.connectors.kubernetes import KubernetesAnswerError, KubernetesConfig
from pipelines.connectors.kueue import KueueClient


@pytest.mark.parametrize("text", [b"[" * 200_000 + b"]" * 200_000, b"[" * 65 + b"]" * 65,
                                  b'{"a": ' * 65 + b"1" + b"}" * 65])
def test_deeply_nested_json_is_refused_with_the_endpoint(text):
    with pytest.raises(SourceAnswerError, match="x: the answer is JSON nested more than 64 levels deep"):
        loads_bounded(text, "x")


@pytest.mark.parametrize("text", [b"[" * 64 + b"]" * 64, b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}'])
def test_json_as_deep_as_the_limit_loads(text):
    assert loads_bounded(text, "x") == json.loads(text)


class SameToken:
    """A CustomObjectsApi that answers every page with the same `continue` token."""

    def __init__(self) -> None:
        self.calls = 0

    def list_cluster_custom_object(self, *args, **kwargs):
        self.calls += 1
        return {"kind": "WorkloadList", "metadata": {"continue": "again"}, "items": []}


def test_kueue_listing_stops_on_a_repeated_continue_token():
    custom = SameToken()
    with pytest.raises(KubernetesAnswerError, match="listing WorkloadList in all namespaces: .*page token it gave"):
        KueueClient(KubernetesConfig(), custom, None).workloads()
    assert custom.calls == 2


def test_kueue_listing_stops_at_the_page_cap():
    class Endless(SameToken):
        def list_cluster_custom_object(self, *args, **kwargs):
            self.calls += 1
            return {"kind": "WorkloadList", "metadata": {"continue": str(self.calls)}, "items": []}

    with pytest.raises(KubernetesAnswerError, match="more than 3 pages"):
        KueueClient(KubernetesConfig(max_pages=3), Endless(), None).workloads()


def test_kueue_deeply_nested_pods_answer_fails_cleanly():
    class DeepPods:
        def list_pod_for_all_namespaces(self, **kwargs):
            return SimpleNamespace(data=b'{"items": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")

    with pytest.raises(KubernetesAnswerError, match="listing PodList in all namespaces: .*nested more than 64 levels"):
        KueueClient(KubernetesConfig(), None, DeepPods()).pods()


@pytest.fixture
def stuck_cursor() -> Iterator[str]:
    """An allocator API whose /v1/events answers a full page and next_cursor 0 forever."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"records": [{"seq": 1, "ts": "2026-12-01T00:00:00Z"}], "next_cursor": 0}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_allocator_pull_stops_on_a_cursor_that_does_not_advance(tmp_path, stuck_cursor):
    from pipelines.connectors.allocator import AllocatorClient

    client = AllocatorClient(stuck_cursor, "token", page_size=1)
    with pytest.raises(SourceAnswerError, match="/v1/events: next_cursor '0' does not advance past 0"):
        client.pull(tmp_path, "events")
    assert not list(tmp_path.rglob("*.jsonl")), "a page was appended before its cursor was checked"
