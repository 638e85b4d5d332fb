"""The durable store in process: the command log, replay, snapshots, and what a restart must reproduce."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sqlite3
from pathlib import Path

import pytest

from allocator.store import Store, StoreError
from tests.allocator.helpers import T0, small_pool

SPEC = {
    "tenant": "vision",
    "queue": "vision-train",
    "user": "vic",
    "template": "training",
    "gpu_model": "H100",
    "gpus": 1,
    "expected_runtime_s": 3600,
    "checkpoint_policy": "hourly",
}


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def run_scenario(store: Store) -> None:
    """A bit of everything: placements, a wait, a finish that starts the waiting job, enforcement,
    a quota proposal and its approval, a refused submission, a run-time cap reached by a timer."""
    big = {**SPEC, "gpus": 4}
    for i in range(3):
        assert store.execute("submit", {"spec": big}, "vic", at(i)).status == 200
    store.execute("submit", {"spec": {**SPEC, "checkpoint_policy": None}}, "vic", at(3))  # refused
    store.execute("finish", {"job_id": "j-000001", "state": "COMPLETED", "exit_code": 0}, "agent", at(10))
    store.execute("submit", {"spec": {**SPEC, "time_limit_s": 600}}, "vic", at(11))
    action = {"kind": "preempt", "idempotency_key": "p-1", "target": "j-000002", "actor": "bot"}
    store.execute("action", {"action": action, "actor_role": "governance_bot"}, "bot", at(12))
    proposal = {
        "kind": "quota_change",
        "idempotency_key": "q-1",
        "target": "nlp-train",
        "actor": "bot",
        "quota": {"H100": 2},
    }
    result = store.execute("action", {"action": proposal, "actor_role": "governance_bot"}, "bot", at(13))
    store.execute(
        "approve", {"proposal_id": result.body["proposal_id"], "actor_role": "admin"}, "alice", at(14)
    )
    store.execute(
        "update_queue",
        {"queue": "vision-train", "changes": {"priority": 60}, "actor_role": "admin"},
        "alice",
        at(15),
    )
    assert store.tick(at(25)) is not None  # the 600 s cap of the job submitted at minute 11


def test_pragmas_make_acknowledged_writes_durable(tmp_path: Path):
    store = Store(tmp_path / "a.db", small_pool())
    assert store._db.execute("pragma journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("pragma synchronous").fetchone()[0] == 2  # FULL: fsync at every commit
    store.close()


def test_a_restart_without_a_clean_stop_rebuilds_the_same_engine(tmp_path: Path):
    store = Store(tmp_path / "a.db", small_pool(), snapshot_every=10_000)
    run_scenario(store)
    with pytest.raises(StoreError, match="in use by another allocator process"):
        Store(tmp_path / "a.db", small_pool())
    events_before = store.events(0, 10_000)
    store.close(snapshot=False)  # as if the process died: no snapshot, the log is all there is
    again = Store(tmp_path / "a.db", small_pool(), snapshot_every=10_000)
    assert again.replayed_commands == store.command_count() == 11
    assert again.replay_divergences == 0
    assert again.engine.state_dict() == store.engine.state_dict()
    assert again.events(0, 10_000) == events_before
    states = {j.job_id: j.state.value for j in again.engine.jobs.values()}
    assert states == {
        "j-000001": "COMPLETED",
        "j-000002": "RUNNING",
        "j-000003": "RUNNING",
        "j-000004": "TIMEOUT",
    }
    assert again.engine.quota("nlp-train") == {"H100": 2.0}
    assert again.engine.queues["vision-train"].priority == 60
    # ids carry on where they stopped, so the logs never repeat one
    result = again.execute("submit", {"spec": SPEC}, "vic", at(30))
    assert result.body["job_id"] == "j-000005"
    events, _ = again.events(0, 10_000)
    assert len({e["event_id"] for e in events}) == len(events)


def test_snapshots_bound_the_replay(tmp_path: Path):
    store = Store(tmp_path / "a.db", small_pool(), snapshot_every=4)
    run_scenario(store)
    rows = store._db.execute("select command_seq from snapshots").fetchall()
    assert rows == [(8,)]  # only the latest snapshot is kept
    store.close(snapshot=False)
    again = Store(tmp_path / "a.db", small_pool(), snapshot_every=4)
    assert again.replayed_commands == 3 and again.replay_divergences == 0
    assert again.engine.state_dict() == store.engine.state_dict()
    again.close()  # a clean stop snapshots, so the next start replays nothing
    third = Store(tmp_path / "a.db", small_pool(), snapshot_every=4)
    assert third.replayed_commands == 0
    assert third.engine.state_dict() == store.engine.state_dict()


def test_every_command_is_logged_with_its_records_in_one_row_set(tmp_path: Path):
    store = Store(tmp_path / "a.db", small_pool())
    run_scenario(store)
    db = sqlite3.connect(tmp_path / "a.db")
    statuses = [s for (s,) in db.execute("select status from commands order by seq")]
    assert statuses == [200, 200, 200, 422, 200, 200, 200, 200, 200, 200, 200]
    # every event belongs to a logged command, and seq follows the order the engine made them
    orphans = db.execute("select count(*) from events where command_seq not in (select seq from commands)")
    assert orphans.fetchone()[0] == 0
    ids = [json.loads(r)["event_id"] for (r,) in db.execute("select record from events order by seq")]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    tenants = {t for (t,) in db.execute("select distinct tenant from events")}
    assert tenants == {"vision"}


def test_an_engine_fault_is_not_acknowledged_and_leaves_no_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = Store(tmp_path / "a.db", small_pool())
    store.execute("submit", {"spec": SPEC}, "vic", at(0))
    engine = store.engine

    def broken(now):
        raise RuntimeError("scheduler bug")

    monkeypatch.setattr(engine, "schedule", broken)
    with pytest.raises(RuntimeError, match="scheduler bug"):
        store.execute("submit", {"spec": SPEC}, "vic", at(1))  # submitted in memory, then the fault
    assert store.engine is not engine  # rebuilt from the log
    assert list(store.engine.jobs) == ["j-000001"] and store.command_count() == 1
    assert store.execute("submit", {"spec": SPEC}, "vic", at(2)).body["job_id"] == "j-000002"


def test_the_engines_clock_never_goes_backwards(tmp_path: Path):
    store = Store(tmp_path / "a.db", small_pool())
    store.execute("submit", {"spec": SPEC}, "vic", at(10))
    late = store.execute("submit", {"spec": SPEC}, "vic", at(5))  # the wall clock stepped back
    assert late.body["submitted_at"] == "2026-11-02T08:10:00Z"
    store.close()
    again = Store(tmp_path / "a.db", small_pool())
    assert again.now(at(1)) == at(10)


def test_a_request_key_answers_a_retry_from_the_log(tmp_path: Path):
    store = Store(tmp_path / "a.db", small_pool())
    first = store.execute("submit", {"spec": SPEC}, "vic", at(0), request_key="vic:abc")
    store.close()
    again = Store(tmp_path / "a.db", small_pool())
    retry = again.execute("submit", {"spec": SPEC}, "vic", at(1), request_key="vic:abc")
    assert retry.replayed and retry.body == first.body and retry.seq == first.seq
    assert again.command_count() == 1 and len(again.engine.jobs) == 1


def test_a_database_belongs_to_its_pool(tmp_path: Path):
    Store(tmp_path / "a.db", small_pool()).close()
    pool = small_pool()
    other = dataclasses.replace(pool, tenants=(*pool.tenants, "speech"))
    with pytest.raises(StoreError, match="created with another pool"):
        Store(tmp_path / "a.db", other)


def test_permission_sync_is_one_command(tmp_path: Path):
    store = Store(tmp_path / "a.db", small_pool())
    grants = [
        {"name": "alice", "role": "admin"},
        {"name": "vic", "role": "tenant_member", "tenant": "vision"},
    ]
    assert store.sync_principals(grants, at(0)).status == 200
    assert store.sync_principals(grants, at(1)) is None
    result = store.sync_principals(grants[:1], at(2))
    assert result.body["revokes"] == [{"name": "vic", "role": "tenant_member", "tenant": "vision"}]
    records, cursor = store.audit(0, 100)
    assert [(r["action"], r["object_name"]) for r in records] == [
        ("permission.grant", "alice"),
        ("permission.grant", "vic"),
        ("permission.revoke", "vic"),
    ]
    assert store.audit(0, 100, tenant="vision")[0] == [records[1], records[2]]
    assert cursor == 3
    store.close(snapshot=False)
    again = Store(tmp_path / "a.db", small_pool())  # replays the permission commands as no-ops
    assert again.replay_divergences == 0 and again.command_count() == 2
