"""The audit webhook's `/metrics`: its requests per route and status, the events it wrote and refused,
readable without the token that guards the POSTs, with a bounded set of route labels."""

from __future__ import annotations

import json
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.kubernetes.webhook import running_webhook

TOKEN = "audit-webhook-metrics-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
EVENT = {
    "kind": "Event", "apiVersion": "audit.k8s.io/v1", "auditID": "a-1", "stage": "ResponseComplete",
    "stageTimestamp": "2026-11-02T08:00:00.000000Z", "verb": "get", "requestURI": "/api/v1/pods",
}


def event_list(items: list) -> bytes:
    return json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": items}).encode()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    r = requests.get(url + "metrics", timeout=10)  # no token
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def requests_of(samples: dict, method: str, route: str, status: str) -> float:
    key = ("gpupool_audit_webhook_requests_total", (("method", method), ("route", route), ("status", status)))
    return samples.get(key, 0)


def test_requests_events_and_refusals_are_counted_without_the_token(tmp_path: Path) -> None:
    oversized = {**EVENT, "auditID": "a-2", "requestObject": "x" * 2048}  # over max_item_bytes: refused
    with running_webhook(tmp_path / "landing", TOKEN, instance="test", max_item_bytes=1024) as server:
        url = server.url
        assert requests.post(url, data=event_list([EVENT, oversized]), headers=HEADERS, timeout=10).ok
        assert requests.post(url + "audit", data=event_list([EVENT]), timeout=10).status_code == 401
        assert requests.post(url, data=b"not json", headers=HEADERS, timeout=10).status_code == 400
        requests.get(url + "healthz", timeout=10)
        requests.get(url + "no/such/path/a-1", timeout=10)
        samples = scrape(url)
    assert requests_of(samples, "POST", "*", "200") == 1
    assert requests_of(samples, "POST", "*", "401") == 1
    assert requests_of(samples, "POST", "*", "400") == 1
    assert requests_of(samples, "GET", "/healthz", "200") == 1
    assert requests_of(samples, "GET", "unmatched", "404") == 1
    assert samples[("gpupool_audit_webhook_events_total", ())] == 2
    assert samples[("gpupool_audit_webhook_refused_events_total", ())] == 1
    assert samples[("gpupool_audit_webhook_request_duration_seconds_count", (("method", "POST"), ("route", "*")))] == 3
    routes = {dict(labels).get("route") for _, labels in samples}
    assert routes <= {"*", "/healthz", "/readyz", "/metrics", "unmatched", None}


def test_two_webhooks_in_one_process_keep_their_own_series(tmp_path: Path) -> None:
    with running_webhook(tmp_path / "one", TOKEN) as one, running_webhook(tmp_path / "two", TOKEN) as two:
        assert requests.post(one.url, data=event_list([EVENT]), headers=HEADERS, timeout=10).ok
        assert scrape(one.url)[("gpupool_audit_webhook_events_total", ())] == 1
        assert scrape(two.url)[("gpupool_audit_webhook_events_total", ())] == 0


def test_a_request_is_counted_before_its_answer_leaves(tmp_path: Path) -> None:
    """A client holding its answer finds the request counted (a scrape right after it sees it), even when the
    server is slow to count it: counting is made to take 50 ms here."""
    with running_webhook(tmp_path / "landing", TOKEN) as server, requests.Session() as session:
        observe = server.metrics.observe

        def slow_observe(*args) -> None:
            time.sleep(0.05)
            observe(*args)

        server.metrics.observe = slow_observe
        for n in range(1, 6):
            assert session.get(server.url + "healthz", timeout=10).ok
            assert requests_of(counted(server.metrics.registry), "GET", "/healthz", "200") == n


def counted(registry) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in registry.collect() for s in family.samples}
