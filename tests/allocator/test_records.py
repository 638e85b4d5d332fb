"""Records: the builders, the sinks, and that everything the engine writes parses with no quarantine."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from allocator.model import Action, ActionKind, JobState
from allocator.pool import default_pool
from allocator.records import (
    JsonlDaySink,
    audit_record,
    job_event,
    pool_snapshot,
    rfc3339,
    write_pool_snapshot,
)
from pipelines.sources.allocator_log import parse_audit_log, parse_event_log, parse_pool_snapshot
from tests.allocator.conftest import T0, Driver, at, make_engine, random_specs


def test_rfc3339_and_builders_leave_out_missing_fields() -> None:
    assert rfc3339(dt.datetime(2026, 11, 1, 8, 0, 0)) == "2026-11-01T08:00:00Z"
    assert rfc3339(dt.datetime(2026, 11, 1, 8, 0, 0, 1500)) == "2026-11-01T08:00:00.001500Z"
    event = job_event("ev-1", T0, "finish", "j-1", 2, state="COMPLETED", reason=None, exit_code=0)
    assert event == {"schema": "gpupool.event/v1", "event_id": "ev-1", "ts": "2026-11-02T08:00:00Z",
                     "type": "finish", "job_id": "j-1", "attempt": 2, "state": "COMPLETED", "exit_code": 0}
    audit = audit_record("au-1", T0, "maria", "quota.update", "queue", "nlp-train", "applied",
                         before={"quota": {"H100": 4}}, reason="")
    assert audit == {"schema": "gpupool.audit/v1", "audit_id": "au-1", "ts": "2026-11-02T08:00:00Z", "actor": "maria",
                     "action": "quota.update", "object_kind": "queue", "object_name": "nlp-train",
                     "before": {"quota": {"H100": 4}}, "decision": "applied"}


def test_jsonl_day_sink_files_records_by_day_and_appends(tmp_path: Path) -> None:
    day1, day2 = dt.datetime(2026, 11, 1, 23, 59, 59), dt.datetime(2026, 11, 2, 0, 0, 1)
    sink = JsonlDaySink(tmp_path, buffer_lines=2)
    for i, ts in enumerate([day1, day2, day2]):
        sink.event(job_event(f"ev-{i}", ts, "admit", "j-1", 1))
    sink.audit(audit_record("au-1", day2, "bot", "enforcement.remind", "job", "j-1", "applied"))
    sink.close()
    with JsonlDaySink(tmp_path) as again:
        again.event(job_event("ev-9", day1, "admit", "j-2", 1))
    first = tmp_path / "allocator_events" / "2026-11-01" / "events.jsonl"
    second = tmp_path / "allocator_events" / "2026-11-02" / "events.jsonl"
    audits = tmp_path / "allocator_audit" / "2026-11-02" / "audit.jsonl"
    assert [json.loads(line)["event_id"] for line in first.read_text().splitlines()] == ["ev-0", "ev-9"]
    assert [json.loads(line)["event_id"] for line in second.read_text().splitlines()] == ["ev-1", "ev-2"]
    assert json.loads(audits.read_text())["audit_id"] == "au-1"
    assert sink.paths == {first, second, audits}


def test_pool_snapshot_parses_with_no_quarantine(tmp_path: Path) -> None:
    pool = default_pool()
    snapshot = pool_snapshot(pool, {"nlp-train": {"H100": 30, "A100": 16}}, dt.datetime(2026, 11, 1))
    path = write_pool_snapshot(tmp_path, snapshot)
    assert path == tmp_path / "allocator_pool" / "2026-11-01" / "pool.json"
    result = parse_pool_snapshot(path.read_bytes(), path.name)
    assert result.quarantine.height == 0
    inventory, quotas = result.tables["gpu_inventory"], result.tables["queue_quotas"]
    assert inventory.height == len(pool.slots())
    assert abs(inventory["fraction"].sum() - 256) < 1e-3
    mig = inventory.filter(inventory["share_mode"] == "mig")
    assert sorted(set(mig["gpu_instance_profile"].to_list())) == ["1g.10gb", "2g.20gb", "3g.40gb"]
    nlp = dict(quotas.filter(quotas["queue"] == "nlp-train").select("gpu_model", "quota_gpus").rows())
    assert nlp == {"H100": 30.0, "A100": 16.0}
    backfill = quotas.filter(quotas["queue"] == "backfill")
    assert backfill.height == 3 and backfill["quota_gpus"].sum() == 0


def test_everything_the_engine_writes_parses_with_no_quarantine() -> None:
    engine, sink = make_engine(grace=60)
    driver = Driver(engine, random_specs(11, 160))
    driver.run_until(at(24 * 60))
    running = sorted(j.job_id for j in engine.holders().values())
    engine.apply_action(Action(ActionKind.REMIND, "r", running[0], "bot", reason="idle"), at(24 * 60))
    engine.apply_action(Action(ActionKind.RECLAIM, "c", running[1], "bot", reason="idle", dry_run=True), at(24 * 60))
    proposal = engine.apply_action(Action(ActionKind.QUOTA_CHANGE, "q", "nlp-train", "bot", quota={"H100": 5}),
                                   at(24 * 60))
    engine.approve(proposal.proposal_id, at(24 * 60 + 1), "maria")
    engine.update_queue("research", {"priority": 45}, at(24 * 60 + 2), "maria")
    driver.run_until()
    events = parse_event_log(sink.events_jsonl(), "events.jsonl")
    audits = parse_audit_log(sink.audits_jsonl(), "audit.jsonl")
    assert events.quarantine.height == 0 and audits.quarantine.height == 0
    assert events.records_loaded == len(sink.events) and audits.records_loaded == len(sink.audits) == 6
    types = set(events.tables["job_events"]["event_type"].to_list())
    assert types == {"submit", "admit", "start", "preempt", "requeue", "finish"}
    placed = sum(len(e["gpus"]) for e in sink.events if e["type"] == "start")
    assert events.tables["job_gpus"].height == placed
    assert all(j.state.is_final for j in engine.jobs.values())
    assert {j.state for j in engine.jobs.values()} >= {JobState.COMPLETED, JobState.FAILED}
    ids = [e["event_id"] for e in sink.events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_event_log_invariants_no_gpu_held_twice_and_attempts_in_order() -> None:
    engine, sink = make_engine(grace=60)
    Driver(engine, random_specs(5, 200)).run_until()
    held: dict[tuple, tuple[str, int]] = {}
    last = None
    for e in sink.events:
        ts = dt.datetime.fromisoformat(e["ts"])
        assert last is None or ts >= last
        last = ts
        owner = (e["job_id"], e["attempt"])
        if e["type"] == "start":
            for g in e["gpus"]:
                slot = (g["host"], g["gpu"], g.get("gpu_instance_id"))
                assert slot not in held, f"{slot} held by {held[slot]} when {owner} starts"
                held[slot] = owner
        elif e["type"] in ("preempt", "requeue", "finish"):
            held = {slot: o for slot, o in held.items() if o != owner}
    assert held == {}
