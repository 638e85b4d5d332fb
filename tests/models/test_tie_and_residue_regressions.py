"""Regressions from comparing the demo month view by view (issue 12).

- metrics.spec_gaps: on a tie of peak pending GPUs, peak_hour_at is the earliest tied hour (it was
  arg_max, which returned any tied hour depending on row order).
- metrics.quota_fit_pairs: idle quota (or need) below 1e-9 GPU-hours is float residue, not an hour
  with idle quota, so it is not a matched hour (it was `> 0`).
"""
from __future__ import annotations

import pytest

from tests.models.builders import at, build, event, gpu, load, one, placement, quota, rows, simple_job, submit


def _jobs(*jobs):
    return [e for j in jobs for e in j[0]], [p for j in jobs for p in j[1]]


def _waits(job_id: str, submitted, start, end, index: int = 0):
    """A 1-GPU vision-train job submitted at `submitted`, started at `start` on a1 GPU `index`."""
    return (
        [submit(job_id, submitted), event(job_id, "admit", start), event(job_id, "start", start),
         event(job_id, "finish", end, state="COMPLETED")],
        [placement(job_id, 1, "a1", index, start)],
    )


def test_spec_gaps_peak_hour_on_a_tie_is_the_earliest_hour_with_its_free_gpus_and_gap(warehouse):
    # One A100, quota 8. The 1-GPU shape pends 1 GPU for all of hours 10, 12 and 14: a three-way tie
    # at 1.0. Hour 10: x holds the GPU (free 0, capacity-bound) -> gap 1. Hours 12 and 14: the GPU is
    # free (policy) -> gap 0. The peak hour must be 10:00, with hour 10's free GPUs and gap. (The old
    # arg_max picked one of the tied hours by row order, so it usually, but not always, answered 10:00
    # here; this pins the rule, it cannot force the old bug every run.)
    x = simple_job("x", "a1", 0, at("10:00"), at("11:00"))
    early = _waits("z-early", at("10:00"), at("11:00"), at("11:30"))
    late = _waits("a-late", at("12:00"), at("13:00"), at("13:30"))
    later = _waits("m-later", at("14:00"), at("15:00"), at("15:30"))
    events, placements = _jobs(x, early, late, later)
    load(warehouse, gpu_inventory=[gpu("a1", 0)], queue_quotas=[quota("vision-train", "vision", "A100", 8)],
         job_events=events, job_gpus=placements)
    con = build(warehouse)

    pending = rows(con, "select hour_at, sum(waited_gpu_hours) as g from marts.fct_wait_causes group by 1 order by 1")
    assert [(p["hour_at"], p["g"]) for p in pending] == [
        (at("10:00"), 1.0), (at("12:00"), 1.0), (at("14:00"), 1.0)]  # an exact tie

    gap = one(con, "select * from metrics.spec_gaps where gpu_model = 'A100' and gpus_requested = 1")
    assert gap["pending_gpus_peak_hour"] == pytest.approx(1.0)
    assert gap["peak_hour_at"] == at("10:00")
    assert gap["free_gpus_at_peak_hour"] == pytest.approx(0.0)
    assert gap["gap_gpus_peak_hour"] == pytest.approx(1.0)
    assert gap["capacity_bound_gpu_hours"] == pytest.approx(1.0)


def test_quota_fit_pairs_does_not_count_an_hour_whose_idle_quota_is_float_residue(warehouse):
    # 8 A100s, 00:00-10:00. vision-train (vision) quota 1 holds 2 GPUs throughout: borrows 1 GPU
    # every hour -> starved. nlp-train (nlp) quota 2 holds nothing 00:00-09:00 (idle 2/h) -> donor.
    # 09:00-10:00 nlp holds 2 GPUs, plus a third in alternate 6-minute slices, so the hour is cut into
    # ten 0.1 h levels (2, 3, 2, 3, ...): in quota 2 x 0.1 ten times = 1.9999999999999998, and its
    # idle quota 2 x 1 - that is ~2e-16 GPU-hours: residue, not idle quota. Matched hours are 00-09
    # only: 9 (not 10), moving min(need 1, idle 2) = 1 GPU-hour each.
    v = simple_job("v", "a100-01", 0, at("00:00"), at("10:00"))
    v[1].append(placement("v", 1, "a100-01", 1, at("00:00")))
    n = simple_job("n", "a100-02", 0, at("09:00"), at("10:00"), tenant="nlp", queue="nlp-train")
    n[1].append(placement("n", 1, "a100-02", 1, at("09:00")))
    slices = [
        simple_job(f"n-{m}", "a100-02", 2, at(f"09:{m:02d}"), at(f"09:{m + 6:02d}") if m < 54 else at("10:00"),
                   tenant="nlp", queue="nlp-train")
        for m in (6, 18, 30, 42, 54)
    ]
    events, placements = _jobs(v, n, *slices)
    load(
        warehouse,
        gpu_inventory=[gpu(f"a100-0{h}", i) for h in (1, 2) for i in range(4)],
        queue_quotas=[quota("vision-train", "vision", "A100", 1), quota("nlp-train", "nlp", "A100", 2)],
        job_events=events,
        job_gpus=placements,
    )
    con = build(warehouse)

    # the precondition: hour 9's idle quota really is a positive residue far below 1e-9
    idle9 = one(con, "select idle_quota_gpu_hours as idle from marts.fct_pool_hourly "
                     "where level_scope = 'queue' and queue = 'nlp-train' and hour_at = ?", [at("09:00")])["idle"]
    assert 0 < idle9 < 1e-9

    fit = {f["tenant"]: f for f in rows(con, "select * from metrics.quota_fit where gpu_model = 'A100'")}
    assert fit["vision"]["is_starved"] and fit["nlp"]["is_donor"]

    pair = one(con, "select * from metrics.quota_fit_pairs")
    assert (pair["starved_tenant"], pair["donor_tenant"]) == ("vision", "nlp")
    assert pair["matched_hours"] == 9
    assert pair["movable_gpu_hours"] == pytest.approx(9.0)
    assert pair["peak_movable_gpus"] == pytest.approx(1.0)
