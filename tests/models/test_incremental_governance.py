"""Each incremental mart really rebuilds only what its window reaches: a mark put on a row outside the
window survives the next build, while the rows the window reaches are rebuilt (the mark gone). That
the result equals a full refresh is tests/models/test_late_data.py's job."""
from __future__ import annotations

import datetime as dt

import pytest

from pipelines.build import build
from pipelines.warehouse import Warehouse
from tests.models.builders import DAY1, at, audit, gpu, load, quota, series, simple_job

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


# -- the governance marts: fct_audit_events, fct_reclaim_ledger, fct_enforcement_actions,
#    fct_governance_actions ---------------------------------------------------------------------
DAY2 = DAY1 + dt.timedelta(days=1)


def _reclaimed(job_id: str, day: int, gpu_index: int) -> dict[str, list[dict]]:
    """A job on a100-01:<gpu_index> from 08:00 of `day`, reclaimed by the pipeline at 10:00 (queue capped)."""
    events, placements = simple_job(job_id, "a100-01", gpu_index, at("08:00", day), at("10:00", day),
                                    state="CANCELLED", queue="capped", template="experiment")
    key = f"k-{job_id}"
    line = {"idempotency_key": key, "finding_id": f"f-{job_id}", "policy": "idle-allocation", "policy_version": "3",
            "policy_kind": "idle_allocation", "mode": "enforce", "step_index": 0, "action": "reclaim",
            "engine": "allocator", "job_id": job_id, "attempt": 1, "tenant": "vision", "queue": "capped",
            "api_version": "gpupool.governance/v1", "source_file": "governance.jsonl"}
    return {
        "job_events": events,
        "job_gpus": placements,
        "audit_events": [audit(f"au-{job_id}", "enforcement.reclaim", at("10:00", day), decision="applied",
                               object_kind="job", object_name=job_id, idempotency_key=key,
                               actor="gpupool-governance", actor_role="governance_bot")],
        "governance_actions": [
            line | {"record": "decision", "occurred_at": at("09:59", day), "status": "queued"},
            line | {"record": "answer", "occurred_at": at("10:00", day), "status": "answered", "outcome": "applied",
                    "delivery_attempts": 1},
        ],
        "dcgm_samples": series("a100-01", gpu_index, GR, at("08:00", day), 120, 0.0),
    }


# a column no other of these marts reads (a value read from a marked row would carry its mark)
GOVERNANCE_MARKS = {
    "fct_audit_events": ("line_number", "-1", "object_name"),
    "fct_reclaim_ledger": ("no_limit_horizon_h", "-1", "job_id"),
    "fct_enforcement_actions": ("recovery_basis", "'marked'", "job_id"),
    "fct_governance_actions": ("outcome_source", "'marked'", "job_id"),
}


def _mark_governance(warehouse: Warehouse) -> None:
    """Mark every row of the governance marts: only a build that rebuilds a row removes its mark."""
    with warehouse.writer() as con:
        for mart, (column, mark, _job) in GOVERNANCE_MARKS.items():
            con.execute(f"update marts.{mart} set {column} = {mark}")


def _marked(warehouse: Warehouse) -> dict[str, set[str]]:
    """The job ids whose rows still carry the mark, per mart."""
    with warehouse.connect() as con:
        return {mart: {r[0] for r in con.execute(
            f"select distinct {job} from marts.{mart} where {column} = {mark}").fetchall()}
                for mart, (column, mark, job) in GOVERNANCE_MARKS.items()}


@pytest.mark.slow
def test_governance_marts_rebuild_the_jobs_the_window_reaches_and_keep_the_others(tmp_path):
    warehouse = Warehouse(tmp_path / "gpupool")
    old, new = _reclaimed("old-1", 1, 0), _reclaimed("new-1", 2, 1)
    six_hours = quota("capped", "vision", "A100", 2, max_runtime_s=6 * 3600)
    load(warehouse, gpu_inventory=[gpu("a100-01", 0), gpu("a100-01", 1)], queue_quotas=[six_hours], **old)
    load(warehouse, ingest="day2", day=DAY2, **new)
    build(warehouse)
    with warehouse.connect() as con:
        assert con.execute("select job_id, would_end_at from marts.fct_reclaim_ledger order by 1").fetchall() == [
            ("new-1", at("14:00", 2)), ("old-1", at("14:00"))]
    _mark_governance(warehouse)

    load(warehouse, ingest="day2", day=DAY2, **new)  # day 2 again: its job's rows are rebuilt, day 1's kept
    build(warehouse)
    assert _marked(warehouse) == {mart: {"old-1"} for mart in GOVERNANCE_MARKS}

    # a queue cap that dim_queues (the latest quota snapshot) now states otherwise reaches the old job's
    # ledger row, and through it the enforcement and governance rows; its audit record is left alone
    four_hours = quota("capped", "vision", "A100", 2, max_runtime_s=4 * 3600, snapshot_at=at("00:00", 2))
    load(warehouse, ingest="day2", day=DAY2, queue_quotas=[four_hours], **new)
    build(warehouse)
    assert _marked(warehouse) == {"fct_audit_events": {"old-1"}, "fct_reclaim_ledger": set(),
                                  "fct_enforcement_actions": set(), "fct_governance_actions": set()}
    with warehouse.connect() as con:
        assert con.execute("select job_id, would_end_at, recovered_gpu_hours from marts.fct_reclaim_ledger "
                           "order by 1").fetchall() == [("new-1", at("12:00", 2), 2.0), ("old-1", at("12:00"), 2.0)]
        assert con.execute("select job_id, would_end_at from marts.fct_enforcement_actions order by 1").fetchall() == [
            ("new-1", at("12:00", 2)), ("old-1", at("12:00"))]
        assert con.execute("select job_id, recovered_gpu_hours from marts.fct_governance_actions "
                           "order by 1").fetchall() == [("new-1", 2.0), ("old-1", 2.0)]
