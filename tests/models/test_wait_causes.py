"""Wait-time decomposition and spec gaps on pools where the cause of each wait is known by construction.

Every job waits from 10:00; the pool is one or two nodes, every GPU's holder is listed, and each
test states the pool, the queue's quota and the expected split with its GPU-hours.
"""
from __future__ import annotations

import datetime as dt

import pytest

from tests.models.builders import at, build, event, gpu, load, placement, quota, rows, submit

pytestmark = pytest.mark.slow  # dbt builds of constructed warehouses

Q = "vision-train"


def job(job_id: str, start: dt.datetime | None, end: dt.datetime | None, gpus: list[tuple[str, int]] | None = None,
        submitted: dt.datetime | None = None, placement_fields: dict | None = None, **submit_fields) -> tuple[list, list]:
    """Submitted at `submitted` (default: start), started at `start` on `gpus`, finished at `end`."""
    submitted = submitted or start
    events = [submit(job_id, submitted, gpus=max(len(gpus or []), 1), **submit_fields)]
    placements = []
    if start is not None:
        events += [event(job_id, "admit", start), event(job_id, "start", start)]
        placements = [placement(job_id, 1, host, i, start, **(placement_fields or {})) for host, i in gpus or []]
    if end is not None:
        events.append(event(job_id, "finish", end, state="COMPLETED"))
    return events, placements


def load_jobs(warehouse, inventory, quotas, *jobs):
    load(
        warehouse, gpu_inventory=inventory, queue_quotas=quotas,
        job_events=[e for events, _ in jobs for e in events],
        job_gpus=[p for _, placements in jobs for p in placements],
    )
    return build(warehouse)



def hours(con, job_id: str, attempt: int = 1) -> dict[str, float]:
    found = rows(con, "select cause, sum(waited_gpu_hours) as g from marts.fct_wait_causes "
                      "where job_id = ? and attempt = ? group by cause", [job_id, attempt])
    return {r["cause"]: r["g"] for r in found}


def test_quota_full_with_gpus_free_is_quota_bound(warehouse):
    # 4 A100 free-standing on one node; the queue's quota is 2 and two of its jobs hold GPUs 0 and 1
    # 10:00-12:00. The waiting 1-GPU job (10:00 -> start 11:00 on GPU 2) fits but 2 + 1 > 2.
    con = load_jobs(
        warehouse, [gpu("a1", i) for i in range(4)], [quota(Q, "vision", "A100", 2)],
        job("r1", at("10:00"), at("12:00"), [("a1", 0)]),
        job("r2", at("10:00"), at("12:00"), [("a1", 1)]),
        job("w", at("11:00"), at("12:00"), [("a1", 2)], submitted=at("10:00")),
    )
    assert hours(con, "w") == {"quota_bound": pytest.approx(1.0)}
    day = rows(con, "select * from metrics.wait_causes")
    assert [(r["cause"], r["queue"], r["gpu_model"], r["pending_intervals"]) for r in day] == [
        ("quota_bound", Q, "A100", 1)
    ]
    assert day[0]["waited_gpu_hours"] == pytest.approx(1.0)
    assert day[0]["cause_share_pct"] == pytest.approx(100.0)


def test_no_h100_free_is_capacity_bound_then_policy_exact_gpu_hours(warehouse):
    # 2 H100, both held by another queue 10:00-11:00. A 2-GPU job waits 10:00 -> 11:30: capacity-bound
    # 1 h x 2 GPUs = 2 GPU-hours, then free, fitting and within quota (8): policy 0.5 h x 2 = 1 GPU-hour.
    con = load_jobs(
        warehouse, [gpu("h1", i, "H100") for i in range(2)],
        [quota(Q, "vision", "H100", 8), quota("nlp-train", "nlp", "H100", 8)],
        job("x", at("10:00"), at("11:00"), [("h1", 0), ("h1", 1)], queue="nlp-train", tenant="nlp", gpu_model="H100"),
        job("w", at("11:30"), at("12:00"), [("h1", 0), ("h1", 1)], submitted=at("10:00"), gpu_model="H100"),
    )
    assert hours(con, "w") == {"capacity_bound": pytest.approx(2.0), "policy": pytest.approx(1.0)}
    interval = rows(con, "select * from marts.fct_wait_intervals where job_id = 'w'")[0]
    assert (interval["ended_by"], interval["pending_s"], interval["pending_gpu_hours"]) == (
        "start", pytest.approx(5400), pytest.approx(3.0))


def test_eight_free_over_two_nodes_for_an_eight_gpu_job_is_fragmentation(warehouse):
    # Two nodes of 8 A100; 4 held on each 10:00-11:00 -> 8 free in total, at most 4 on a node. The 8-GPU
    # single-node job waits 10:00 -> 11:00: fragmentation 1 h x 8 = 8 GPU-hours.
    inventory = [gpu(h, i) for h in ("n1", "n2") for i in range(8)]
    con = load_jobs(
        warehouse, inventory, [quota(Q, "vision", "A100", 32)],
        job("a", at("10:00"), at("11:00"), [("n1", i) for i in range(4)]),
        job("b", at("10:00"), at("11:00"), [("n2", i) for i in range(4)]),
        job("w", at("11:00"), at("12:00"), [("n1", i) for i in range(8)], submitted=at("10:00")),
    )
    assert hours(con, "w") == {"fragmentation": pytest.approx(8.0)}
    gaps = rows(con, "select * from metrics.spec_gaps where gpus_requested = 8")
    assert gaps[0]["fragmentation_gpu_hours"] == pytest.approx(8.0)
    assert gaps[0]["capacity_bound_gpu_hours"] == 0


def test_fifo_head_blocks_free_capacity_and_a_cancel_while_pending(warehouse):
    # One node of 4 A100, nothing held. The head asks 8 (more than the pool: capacity-bound) and is
    # cancelled while pending at 11:00: 1 h x 8 = 8 GPU-hours, interval ended_by cancel. Behind it a
    # 1-GPU job waits 10:00 -> 10:30 with everything free, fitting, within quota: policy 0.5 GPU-hours.
    head = [submit("head", at("10:00"), gpus=8), event("head", "finish", at("11:00"), state="CANCELLED")]
    con = load_jobs(
        warehouse, [gpu("a1", i) for i in range(4)], [quota(Q, "vision", "A100", 16)],
        (head, []),
        job("w", at("10:30"), at("12:00"), [("a1", 0)], submitted=at("10:00")),
    )
    assert hours(con, "head") == {"capacity_bound": pytest.approx(8.0)}
    assert hours(con, "w") == {"policy": pytest.approx(0.5)}
    ended = {r["job_id"]: r["ended_by"] for r in rows(con, "select * from marts.fct_wait_intervals")}
    assert ended == {"head": "cancel", "w": "start"}


def test_mig_profile_taken_while_slices_are_free_elsewhere_is_fragmentation(warehouse):
    # An A100 cut into one 3g.40gb and four 1g.10gb. The 3g instance is held 10:00-11:00; a 3g ask
    # waits 10:00 -> 11:00 while 4/7 of the GPU is free in 1g instances (>= 3/7):
    # fragmentation, 1 h x 3/7 GPU-hours.
    inventory = [gpu("m1", 0, share_mode="mig", gpu_instance_id=1, gpu_instance_profile="3g.40gb", fraction=3 / 7)] + [
        gpu("m1", 0, share_mode="mig", gpu_instance_id=i, gpu_instance_profile="1g.10gb", fraction=1 / 7)
        for i in range(2, 6)
    ]
    mig = {"gpu_instance_id": 1, "gpu_instance_profile": "3g.40gb", "fraction": 3 / 7}
    con = load_jobs(
        warehouse, inventory, [quota(Q, "vision", "A100", 16)],
        job("x", at("10:00"), at("11:00"), [("m1", 0)], placement_fields=mig, share_mode="mig", mig_profile="3g.40gb"),
        job("w", at("11:00"), at("12:00"), [("m1", 0)], submitted=at("10:00"), placement_fields=mig,
            share_mode="mig", mig_profile="3g.40gb"),
    )
    assert hours(con, "w") == {"fragmentation": pytest.approx(3 / 7)}
    interval = rows(con, "select * from marts.fct_wait_intervals where job_id = 'w'")[0]
    assert interval["unit_fraction"] == pytest.approx(3 / 7)


def test_requeue_starts_a_new_pending_interval(warehouse):
    # One A100. Attempt 1 starts at submit (no wait) and is requeued at 11:00; attempt 2 waits
    # 11:00 -> 11:30 with the GPU free: policy, 0.5 GPU-hours; the day is cut into hours.
    events = [
        submit("rq", at("10:00")), event("rq", "start", at("10:00")), event("rq", "requeue", at("11:00")),
        event("rq", "start", at("11:30"), attempt=2), event("rq", "finish", at("12:30"), attempt=2, state="COMPLETED"),
    ]
    placements = [placement("rq", 1, "a1", 0, at("10:00")), placement("rq", 2, "a1", 0, at("11:30"))]
    con = load_jobs(warehouse, [gpu("a1", 0)], [quota(Q, "vision", "A100", 4)], (events, placements))
    intervals = rows(con, "select attempt, pending_from_at, pending_to_at from marts.fct_wait_intervals")
    assert intervals == [{"attempt": 2, "pending_from_at": at("11:00"), "pending_to_at": at("11:30")}]
    assert hours(con, "rq", 2) == {"policy": pytest.approx(0.5)}
    free = rows(con, "select valid_from_at, free_units from marts.fct_pool_free_segments "
                     "where valid_from_at between ? and ? order by 1", [at("10:00"), at("11:30")])
    assert [(f["valid_from_at"], f["free_units"]) for f in free] == [
        (at("10:00"), 0), (at("11:00"), 1), (at("11:30"), 0)
    ]


def test_zero_quota_queue_is_never_quota_bound(warehouse):
    # backfill has quota 0 on A100: its job waits 10:00 -> 10:20 with the GPU free -> policy, not quota_bound.
    con = load_jobs(
        warehouse, [gpu("a1", 0)], [quota("backfill", "platform", "A100", 0)],
        job("bf", at("10:20"), at("11:00"), [("a1", 0)], submitted=at("10:00"), queue="backfill", tenant="platform"),
    )
    assert hours(con, "bf") == {"policy": pytest.approx(1 / 3)}
