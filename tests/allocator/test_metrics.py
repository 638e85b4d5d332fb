"""The allocator's `/metrics`: requests per route template, queue depth, admissions and preemptions,
open without a token and naming no job, user or tenant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from allocator.auth import parse_tokens
from allocator.service import create_app
from allocator.store import Store
from tests.allocator.helpers import (
    ADMIN,
    BOT,
    TOKENS,
    TRAINING,
    VISION,
    Clock,
    TestClient,
    auth,
    small_pool,
    submit,
)


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "allocator.db", small_pool())
    yield s
    s.close()


def client_of(store: Store, **options) -> TestClient:
    return TestClient(create_app(store, parse_tokens(json.dumps(TOKENS), "t"), clock=Clock(), tick_interval_s=None),
                      **options)


def samples(client: TestClient) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value of one scrape."""
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def requests_of(scrape: dict, route: str, status: str, method: str = "GET") -> float:
    return scrape.get(
        ("allocator_http_requests_total", (("method", method), ("route", route), ("status", status))), 0
    )


def test_requests_are_counted_under_their_route_template_not_their_path(store: Store) -> None:
    client = client_of(store)
    job = submit(client, VISION, TRAINING)
    client.get(f"/v1/jobs/{job['job_id']}", headers=auth(VISION))
    client.get("/v1/jobs/no-such-job", headers=auth(VISION))
    client.get("/v1/jobs/whatever")  # no token: 401
    client.get("/not/a/route/j-000123")
    scrape = samples(client)
    assert requests_of(scrape, "/v1/jobs", "201", "POST") == 1
    assert requests_of(scrape, "/v1/jobs/{job_id}", "200") == 1
    assert requests_of(scrape, "/v1/jobs/{job_id}", "404") == 1
    assert requests_of(scrape, "/v1/jobs/{job_id}", "401") == 1
    assert requests_of(scrape, "unmatched", "404") == 1
    latency = ("allocator_http_request_duration_seconds_count", (("method", "GET"), ("route", "/v1/jobs/{job_id}")))
    assert scrape[latency] == 3
    assert not any(job["job_id"] in str(labels) or "no-such-job" in str(labels) for _, labels in scrape)


def test_an_unhandled_error_counts_as_a_500_of_its_route(store: Store, monkeypatch) -> None:
    client = client_of(store, raise_server_exceptions=False)

    def broken() -> int:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(store, "command_count", broken)
    assert client.get("/healthz").status_code == 500
    assert requests_of(samples(client), "/healthz", "500") == 1


def test_queue_depth_admissions_and_preemptions_come_from_the_store(store: Store) -> None:
    client = client_of(store)
    running = [submit(client, VISION, TRAINING, gpus=4), submit(client, VISION, TRAINING, gpus=4)]
    submit(client, VISION, TRAINING, gpus=4)  # the pool's 8 H100 are taken: this one waits
    preempt = {"kind": "preempt", "idempotency_key": "p1", "target": running[0]["job_id"]}
    assert client.post("/v1/actions", json=preempt, headers=auth(BOT)).status_code == 200
    scrape = samples(client)
    assert scrape[("allocator_queue_pending_jobs", (("queue", "vision-train"),))] == 1
    assert scrape[("allocator_queue_running_jobs", (("queue", "vision-train"),))] == 2
    assert scrape[("allocator_queue_pending_jobs", (("queue", "nlp-train"),))] == 0
    assert scrape[("allocator_preemptions_total", ())] == 1
    # two started at once, the waiting one in the preempted job's place: three admissions
    assert scrape[("allocator_admissions_total", ())] == 3


def test_the_counts_of_the_event_log_survive_a_restart(tmp_path: Path) -> None:
    first = Store(tmp_path / "allocator.db", small_pool())
    submit(client_of(first), VISION, TRAINING)
    first.close()
    again = Store(tmp_path / "allocator.db", small_pool())
    try:
        assert samples(client_of(again))[("allocator_admissions_total", ())] == 1
    finally:
        again.close()


def test_metrics_need_no_token_and_name_no_job_user_or_token(store: Store) -> None:
    client = client_of(store)
    job = submit(client, VISION, {**TRAINING, "job_name": "secret-project-x"})
    body = client.get("/metrics").text
    for private in (job["job_id"], job["user"], "secret-project-x", VISION, ADMIN, BOT):
        assert private not in body


def test_two_apps_in_one_process_keep_their_own_series(tmp_path: Path) -> None:
    one, two = (Store(tmp_path / f"{n}.db", small_pool()) for n in ("one", "two"))
    try:
        first, second = client_of(one), client_of(two)
        first.get("/healthz")
        assert requests_of(samples(first), "/healthz", "200") == 1
        assert requests_of(samples(second), "/healthz", "200") == 0
    finally:
        one.close()
        two.close()
