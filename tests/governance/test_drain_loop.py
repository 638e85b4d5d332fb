"""The drain loop end to end on the live allocator API: health events -> gpu_health findings -> plan
-> outbox -> AllocatorEnforcer. Shadow first (logged, nothing sent), then enforced (the node is
drained, placements avoid it, the same plan twice sends once), then undrained once healthy."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json

import polars as pl
import pytest
import requests

from pipelines.contracts import DecisionStatus, Mode, PolicyKind, StepAction
from pipelines.enforcement.allocator import AllocatorEnforcer
from pipelines.governance.outbox import SOURCE, Outbox
from pipelines.policies.catalog import load_catalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.inputs import PolicyInputs
from pipelines.policies.planner import plan
from tests.governance.conftest import ADMIN, BOT, T0, TRAINING, VISION

pytestmark = pytest.mark.slow  # the live allocator over HTTP

HOUR = dt.timedelta(hours=1)
HOST = "h100-01"


def catalog(mode: Mode, version: str):
    cat = load_catalog()
    policy = dataclasses.replace(cat.policies["gpu-health"], mode=mode, version=version)
    return dataclasses.replace(cat, policies={"gpu-health": policy})


def health(until: dt.datetime) -> PolicyInputs:
    """XID 79 on GPUs 0 and 1 of h100-01 two hours before T0 and one hour before (the node's two
    faulty GPUs), then hourly telemetry of both until `until`."""
    rows = [{"host": HOST, "gpu": g, "minute_at": T0 - h * HOUR, "signal": "xid", "xid": 79, "event_count": 1.0,
             "is_hardware_fault": True} for g in (0, 1) for h in (2, 1)]
    t = T0
    while t < until:
        rows += [{"host": HOST, "gpu": g, "minute_at": t, "signal": "telemetry", "event_count": 60.0,
                  "is_hardware_fault": False} for g in (0, 1)]
        t += HOUR
    return PolicyInputs(allocations=None, minutes=None, health=pl.from_dicts(rows, infer_schema_length=None))


def step(outbox: Outbox, cat, now: dt.datetime, url: str):
    found = evaluate(health(now), cat, now, kinds=[PolicyKind.GPU_HEALTH])
    recorded = outbox.record(plan(found, cat, outbox, now), now)
    return recorded, outbox.deliver({"allocator": AllocatorEnforcer(url, BOT)}, now)


def node(url: str) -> dict:
    r = requests.get(f"{url}/v1/nodes", headers={"Authorization": f"Bearer {VISION}"}, timeout=10)
    assert r.status_code == 200, r.text
    return next(n for n in r.json()["nodes"] if n["host"] == HOST)


def log_lines(landing) -> list[dict]:
    return [json.loads(line) for path in sorted((landing / SOURCE).rglob("*.jsonl"))
            for line in path.read_text().splitlines()]


def test_shadow_then_enforce_then_undrain(allocator, tmp_path):
    landing = tmp_path / "landing"
    outbox = Outbox(tmp_path / "outbox.db", landing)
    try:
        # shadow: the drain is decided and logged, nothing reaches the engine
        [shadow], delivery = step(outbox, catalog(Mode.SHADOW, "1"), T0, allocator.url)
        assert (shadow.action, shadow.status, shadow.job_id, shadow.attempt) == (
            StepAction.DRAIN, DecisionStatus.SHADOW, HOST, 0)
        assert delivery.sent == 0 and not node(allocator.url)["drained"]
        [line] = log_lines(landing)
        assert (line["action"], line["status"], line["policy_kind"], line["job_id"], line["tenant"]) == (
            "drain", "shadow", "gpu_health", HOST, "platform")

        # enforce (a new policy version, as a mode change is): drained once, however often planned
        enforce = catalog(Mode.ENFORCE, "2")
        [drain], delivery = step(outbox, enforce, T0, allocator.url)
        assert drain.status == DecisionStatus.QUEUED and delivery.answered == {"applied": 1}
        again, delivery = step(outbox, enforce, T0 + dt.timedelta(minutes=5), allocator.url)
        assert again == [] and delivery.sent == 0
        view = node(allocator.url)
        assert view["drained"] and view["drain"]["idempotency_key"] == drain.idempotency_key
        jobs = [requests.post(f"{allocator.url}/v1/jobs", json=TRAINING, timeout=10,
                              headers={"Authorization": f"Bearer {ADMIN}"}).json() for _ in range(3)]
        assert all(j["state"] == "RUNNING" and j["gpus"][0]["host"] != HOST for j in jobs)
        audit, _ = allocator.store.audit(0, 1000)
        assert [(a["action"], a["decision"]) for a in audit if a["action"].endswith("drain")] == [
            ("enforcement.drain", "applied")]

        # not healthy yet a second before the healthy_hours (24 h) after the drain; then undrained
        assert step(outbox, enforce, T0 + 24 * HOUR - dt.timedelta(seconds=1), allocator.url)[0] == []
        [undrain], delivery = step(outbox, enforce, T0 + 24 * HOUR, allocator.url)
        assert (undrain.action, undrain.finding_id) == (StepAction.UNDRAIN, drain.finding_id)
        assert delivery.answered == {"applied": 1} and not node(allocator.url)["drained"]
        statuses = [(line["record"], line["action"], line["status"]) for line in log_lines(landing)]
        assert statuses == [("decision", "drain", "shadow"), ("decision", "drain", "queued"),
                            ("answer", "drain", "answered"), ("decision", "undrain", "queued"),
                            ("answer", "undrain", "answered")]
    finally:
        outbox.close()
