"""The audit webhook backend over real loopback HTTP: the falco sample events, posted as the API server's
webhook posts them (audit.k8s.io/v1 EventList batches), land where the k8s_audit source ingests them."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator

import pytest
import requests

from pipelines.connectors.k8s_audit import AuditWebhookServer, AuditWriter
from pipelines.ingest import ingest_partition
from pipelines.sources.k8s_audit import parse_k8s_audit
from tests.kubernetes.webhook import running_webhook

TOKEN = "audit-webhook-test-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.fixture
def webhook(warehouse) -> Iterator[AuditWebhookServer]:
    with running_webhook(warehouse.landing, TOKEN, instance="test") as server:
        yield server


@pytest.fixture
def falco_events(real_data) -> list[dict]:
    lines = (real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _event_list(events: list) -> bytes:
    return json.dumps(
        {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": events}
    ).encode()


def _landed(warehouse) -> dict[str, list[str]]:
    root = warehouse.landing / "k8s_audit"
    return {p.parent.name: p.read_text().splitlines() for p in sorted(root.glob("*/webhook-test.jsonl"))}


def test_batches_land_by_event_day_and_ingest_like_the_files(webhook, warehouse, falco_events, real_data):
    with requests.Session() as session:  # one kept-alive connection, as the API server uses
        for start in range(0, len(falco_events), 20):
            response = session.post(
                webhook.url, data=_event_list(falco_events[start : start + 20]), headers=HEADERS, timeout=10
            )
            assert response.status_code == 200, response.text
            assert response.json()["events"] == len(falco_events[start : start + 20])

    landed = _landed(warehouse)
    assert {day: len(lines) for day, lines in landed.items()} == {
        "2018-10-25": 9,
        "2018-10-26": 38,
        "2020-03-24": 1,
        "2020-04-21": 3,
    }
    written = sorted(
        json.loads(line)["auditID"] + json.loads(line).get("stage", "")
        for lines in landed.values()
        for line in lines
    )
    assert written == sorted(e["auditID"] + e.get("stage", "") for e in falco_events)

    reports = [ingest_partition(warehouse, "k8s_audit", dt.date.fromisoformat(day)) for day in landed]
    direct = parse_k8s_audit((real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl").read_bytes(), "falco")
    assert sum(r.records_read for r in reports) == direct.records_read == 51
    assert sum(r.records_loaded for r in reports) == direct.records_loaded
    assert sum(r.records_quarantined for r in reports) == direct.quarantine.height
    with warehouse.connect(read_only=True) as con:
        ids = con.execute("select audit_id, stage from raw.audit_events order by 1, 2").fetchall()
    assert ids == sorted((row["audit_id"], row["stage"]) for row in direct.tables["audit_events"].to_dicts())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "body is not JSON"),
        (
            json.dumps({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "auditID": "x"}).encode(),
            "body kind is 'Event', expected 'EventList'",
        ),
        (
            json.dumps({"kind": "EventList", "apiVersion": "v1", "items": []}).encode(),
            "body apiVersion is 'v1'",
        ),
        (
            json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": {}}).encode(),
            "body 'items' is not a list",
        ),
        (b"[]", "body is a JSON list"),
    ],
)
def test_a_body_that_is_not_an_event_list_is_400(webhook, warehouse, body, message):
    response = requests.post(webhook.url, data=body, headers=HEADERS, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)
    assert _landed(warehouse) == {}


def test_bearer_token(webhook, falco_events):
    body = _event_list(falco_events[:1])
    assert requests.post(webhook.url, data=body, timeout=10).status_code == 401
    wrong = requests.post(webhook.url, data=body, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Bearer"
    assert requests.post(webhook.url, data=body, headers=HEADERS, timeout=10).status_code == 200


def test_health_oversized_body_and_empty_list(warehouse, falco_events):
    with running_webhook(warehouse.landing, TOKEN, instance="test", max_body_bytes=4096) as server:
        assert requests.get(server.url + "healthz", timeout=10).json() == {"status": "ok"}
        oversized = requests.post(server.url, data=_event_list(falco_events), headers=HEADERS, timeout=10)
        assert oversized.status_code == 413
        empty = requests.post(server.url, data=_event_list([]), headers=HEADERS, timeout=10)
        assert empty.status_code == 200 and empty.json() == {"events": 0, "refused": [], "files": {}}
    assert _landed(warehouse) == {}


def test_a_failed_batch_leaves_no_part_of_itself(tmp_path, falco_events, monkeypatch):
    writer = AuditWriter(tmp_path, instance="test")
    now = dt.datetime(2024, 1, 1)
    writer.write(falco_events[:5], now)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.jsonl")}

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        writer.write(falco_events, now)  # spans four days: every file is truncated back
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.jsonl")} == {
        **{p: b"" for p in tmp_path.rglob("*.jsonl")},
        **before,
    }


def test_a_line_cut_off_by_a_dead_writer_is_ended_first(tmp_path, falco_events):
    writer = AuditWriter(tmp_path, instance="test")
    day_file = writer.path(dt.date(2018, 10, 25))
    day_file.parent.mkdir(parents=True)
    day_file.write_bytes(b'{"kind":"Event","auditID":"cut-o')
    writer.write(
        [e for e in falco_events if e.get("stageTimestamp", e.get("timestamp", "")).startswith("2018-10-25")],
        dt.datetime(2024, 1, 1),
    )
    parsed = parse_k8s_audit(day_file.read_bytes(), str(day_file))
    assert (parsed.records_read, parsed.records_loaded, parsed.quarantine.height) == (10, 9, 1)
    assert parsed.quarantine["line_number"][0] == 1
