"""Headroom, trend and quota fit (metrics.capacity_headroom, capacity_trend, quota_fit, quota_fit_pairs).

Every figure is computed by hand from rows built so the answer is known.
"""
from __future__ import annotations

import pytest

from tests.models.builders import at, build, event, gpu, load, one, placement, quota, rows, simple_job, submit

pytestmark = pytest.mark.slow  # dbt builds of constructed warehouses


def _jobs(*jobs):
    return [e for j in jobs for e in j[0]], [p for j in jobs for p in j[1]]


def test_the_shared_steps_and_snapshots_the_marts_read(warehouse):
    # a: 1 GPU 00:00-21:00, b: 2 GPUs 05:00-06:30, c: 1 GPU 06:00-07:00 (tenant vision, queue vision-train).
    # Quota snapshots at 00:00 and 12:00: the day takes the 12:00 one, the latest before it ends.
    a = simple_job("a", "a100-01", 0, at("00:00"), at("21:00"))
    b = simple_job("b", "a100-01", 1, at("05:00"), at("06:30"))
    b[1].append(placement("b", 1, "a100-01", 2, at("05:00")))
    c = simple_job("c", "a100-01", 3, at("06:00"), at("07:00"))
    events, placements = _jobs(a, b, c)
    load(
        warehouse,
        gpu_inventory=[gpu("a100-01", i) for i in range(4)],
        queue_quotas=[quota("vision-train", "vision", "A100", 2),
                      quota("vision-train", "vision", "A100", 3, snapshot_at=at("12:00"))],
        job_events=events,
        job_gpus=placements,
    )
    con = build(warehouse)

    steps = [(at("00:00"), at("05:00"), 1.0), (at("05:00"), at("06:00"), 3.0), (at("06:00"), at("06:30"), 4.0),
             (at("06:30"), at("07:00"), 2.0), (at("07:00"), at("21:00"), 1.0)]
    for scope, tenant, queue in (("tenant", "vision", None), ("queue", None, "vision-train"), ("pool", None, None)):
        got = rows(con, "select tenant, queue, level_start_at, level_end_at, allocated_gpus from marts.fct_allocation_steps "
                        "where level_scope = ? and gpu_model = 'A100' order by level_start_at", [scope])
        assert [(r["tenant"], r["queue"]) for r in got] == [(tenant, queue)] * len(steps), scope
        assert [(r["level_start_at"], r["level_end_at"], r["allocated_gpus"]) for r in got] == steps, scope

    in_effect = rows(con, "select snapshot_table, snapshot_at from marts.dim_snapshots_in_effect order by 1")
    assert [(r["snapshot_table"], r["snapshot_at"]) for r in in_effect] == [
        ("gpu_inventory", at("00:00")), ("queue_quotas", at("12:00"))]
    assert one(con, "select quota_gpus from marts.fct_quota_daily")["quota_gpus"] == pytest.approx(3.0)


def test_peak_p95_and_headroom_on_a_constructed_day(warehouse):
    # 4 A100s; the data runs 00:00-21:00 (21 hours). Queue vision-train, quota 2.
    #   a: 1 GPU 00:00-21:00; b: 2 GPUs 05:00-06:30; c: 1 GPU 06:00-07:00
    # hourly peaks: hour 5 -> 3, hour 6 -> 4, the 19 others -> 1.
    # p95 over 21 hours sits at position 20 x 0.95 = 19 of the sorted peaks: 3 (no interpolation).
    # allocated = 21 + 2 x 1.5 + 1 = 25 GPU-hours; above quota 2: 05-06 one GPU, 06:00-06:30 two -> 2.
    a = simple_job("a", "a100-01", 0, at("00:00"), at("21:00"))
    b = simple_job("b", "a100-01", 1, at("05:00"), at("06:30"))
    b[1].append(placement("b", 1, "a100-01", 2, at("05:00")))
    c = simple_job("c", "a100-01", 3, at("06:00"), at("07:00"))
    events, placements = _jobs(a, b, c)
    load(
        warehouse,
        gpu_inventory=[gpu("a100-01", i) for i in range(4)],
        queue_quotas=[quota("vision-train", "vision", "A100", 2)],
        job_events=events,
        job_gpus=placements,
    )
    con = build(warehouse)

    m = one(con, "select * from metrics.capacity_headroom where window_kind = 'period' and queue = 'all'")
    assert m["hours"] == pytest.approx(21.0)
    assert m["capacity_gpus"] == 4
    assert m["allocated_gpu_hours"] == pytest.approx(25.0)
    assert m["mean_allocated_gpus"] == pytest.approx(25 / 21)
    assert m["peak_allocated_gpus"] == pytest.approx(4.0)
    assert m["p95_allocated_gpus"] == pytest.approx(3.0)
    assert m["headroom_at_peak_gpus"] == pytest.approx(0.0)
    assert m["headroom_at_p95_gpus"] == pytest.approx(1.0)
    assert m["utilisation_at_peak_pct"] == pytest.approx(100.0)
    assert m["utilisation_at_p95_pct"] == pytest.approx(75.0)
    assert m["quota_headroom_at_peak_gpus"] is None  # the model row carries capacity headroom

    q = one(con, "select * from metrics.capacity_headroom where window_kind = 'period' and queue = 'vision-train'")
    assert q["tenant"] == "vision"
    assert q["quota_gpus"] == pytest.approx(2.0)
    assert q["peak_allocated_gpus"] == pytest.approx(4.0)
    assert q["quota_headroom_at_peak_gpus"] == pytest.approx(-2.0)  # borrowed 2 GPUs above quota at the peak
    assert q["quota_headroom_at_p95_gpus"] == pytest.approx(-1.0)
    assert q["quota_usage_at_peak_pct"] == pytest.approx(200.0)
    assert q["headroom_at_peak_gpus"] is None

    # the hourly mart: dense, and the queue's borrowing taken moment by moment
    h = one(
        con,
        "select count(*) as hours, sum(allocated_gpu_hours) as allocated, sum(in_quota_gpu_hours) as in_quota,"
        " sum(borrowed_gpu_hours) as borrowed, sum(idle_quota_gpu_hours) as idle"
        " from marts.fct_pool_hourly where level_scope = 'queue'",
    )
    assert h == pytest.approx({"hours": 21, "allocated": 25.0, "in_quota": 23.0, "borrowed": 2.0, "idle": 42.0 - 23.0})
    hour6 = one(con, "select * from marts.fct_pool_hourly where level_scope = 'pool' and hour_at = ?", [at("06:00")])
    assert hour6["peak_allocated_gpus"] == pytest.approx(4.0)
    assert hour6["allocated_gpu_hours"] == pytest.approx(1 + 2 * 0.5 + 1)

    # one partial day: a week row exists but no trend can be drawn
    w = one(con, "select * from metrics.capacity_headroom where window_kind = 'week' and queue = 'all'")
    assert w["weeks_before_end"] == 0 and w["is_complete_week"] is False
    trend = rows(con, "select * from metrics.capacity_trend where gpu_model = 'A100' order by week_x")
    assert len(trend) == 1 + 4
    assert all(r["trend_weeks_used"] == 0 and r["trend_allocated_gpu_hours"] is None for r in trend)


def test_trend_slope_and_forecast_on_a_constructed_series(warehouse):
    # 28 days, 2026-11-01 00:00 to 11-29 00:00: four complete trailing weeks. One GPU held
    # 10, 20, 30, 40 hours in weeks 1..4, so with x = -3..0 the line is 40 + 10 x exactly.
    jobs = [
        simple_job("w1", "a100-01", 0, at("00:00", day=1), at("10:00", day=1)),
        simple_job("w2", "a100-01", 0, at("00:00", day=8), at("20:00", day=8)),
        simple_job("w3", "a100-01", 0, at("00:00", day=15), at("06:00", day=16)),
        simple_job("w4", "a100-01", 0, at("08:00", day=27), at("00:00", day=29)),
    ]
    events, placements = _jobs(*jobs)
    load(warehouse, gpu_inventory=[gpu("a100-01", 0), gpu("a100-01", 1)], job_events=events, job_gpus=placements)
    con = build(warehouse)

    trend = rows(con, "select * from metrics.capacity_trend where gpu_model = 'A100' order by week_x")
    observed = [r for r in trend if not r["is_forecast"]]
    assert [r["week_x"] for r in observed] == [-3, -2, -1, 0]
    assert all(r["is_complete_week"] for r in observed)
    assert [r["allocated_gpu_hours"] for r in observed] == pytest.approx([10.0, 20.0, 30.0, 40.0])
    first = trend[0]
    assert first["trend_weeks_used"] == 4
    assert first["allocated_slope_gpu_hours_per_week"] == pytest.approx(10.0)
    assert first["allocated_trend_r2"] == pytest.approx(1.0)
    assert first["demand_slope_gpu_hours_per_week"] == pytest.approx(10.0)  # nothing waited
    assert first["p95_slope_gpus_per_week"] == pytest.approx(0.0)  # 1 GPU held in >= 5% of each week's hours
    forecast = [r for r in trend if r["is_forecast"]]
    assert [r["week_x"] for r in forecast] == [1, 2, 3, 4]
    assert [r["trend_allocated_gpu_hours"] for r in forecast] == pytest.approx([50.0, 60.0, 70.0, 80.0])
    assert all(r["allocated_gpu_hours"] is None and r["capacity_gpus"] == 2 for r in forecast)
    assert forecast[0]["week_start_at"] == at("00:00", day=29)
    assert forecast[0]["trend_headroom_at_p95_gpus"] == pytest.approx(2 - 1.0)


def test_quota_fit_pairs_a_starved_tenant_with_a_donor(warehouse):
    # 8 A100s, 00:00-10:00. vision-train (vision) quota 1, nlp-train (nlp) quota 3,
    # backfill (platform) quota 0.
    #   vision: 3 GPUs 00:00-10:00, and a 1-GPU job submitted at 00:00 that waits until 08:00
    #     in quota 1 x 10 = 10; borrowed 2 x 10 + 1 x 2 = 22; pending 8, all quota-bound
    #     (GPUs free, vision's usage + 1 above its quota) -> need 30: starved (quota used 100%)
    #   nlp: 1 GPU 00:00-10:00 -> in quota 10 of 30, idle 20 (66.7%): donor
    #   research in backfill: 1 GPU 02:00-04:00 -> platform's quota-less GPU-hours, never need
    # each hour: vision needs 3 (00-08: 2 borrowed + 1 waiting) or 3 (08-10: borrowed), nlp has
    # 2 idle -> 2 GPU-hours match per hour, 20 in all.
    v = simple_job("v-1", "a100-01", 0, at("00:00"), at("10:00"))
    v[1].extend(placement("v-1", 1, "a100-01", i, at("00:00")) for i in (1, 2))
    waiting = (
        [
            submit("v-2", at("00:00")),
            event("v-2", "admit", at("08:00")),
            event("v-2", "start", at("08:00")),
            event("v-2", "finish", at("10:00"), state="COMPLETED"),
        ],
        [placement("v-2", 1, "a100-01", 3, at("08:00"))],
    )
    n = simple_job("n-1", "a100-02", 0, at("00:00"), at("10:00"), tenant="nlp", queue="nlp-train")
    r = simple_job("r-1", "a100-02", 1, at("02:00"), at("04:00"), tenant="research", queue="backfill")
    events, placements = _jobs(v, waiting, n, r)
    load(
        warehouse,
        gpu_inventory=[gpu(f"a100-0{h}", i) for h in (1, 2) for i in range(4)],
        queue_quotas=[
            quota("vision-train", "vision", "A100", 1),
            quota("nlp-train", "nlp", "A100", 3),
            quota("backfill", "platform", "A100", 0),
        ],
        job_events=events,
        job_gpus=placements,
    )
    con = build(warehouse)

    fit = {f["tenant"]: f for f in rows(con, "select * from metrics.quota_fit where gpu_model = 'A100'")}
    vision, nlp, platform = fit["vision"], fit["nlp"], fit["platform"]
    assert vision["quota_gpu_hours"] == pytest.approx(10.0)
    assert vision["in_quota_gpu_hours"] == pytest.approx(10.0)
    assert vision["borrowed_gpu_hours"] == pytest.approx(22.0)
    assert vision["pending_gpu_hours"] == pytest.approx(8.0)
    assert vision["quota_bound_gpu_hours"] == pytest.approx(8.0)  # GPUs free, the queue over quota
    assert vision["need_gpu_hours"] == pytest.approx(30.0)
    assert vision["quota_used_pct"] == pytest.approx(100.0)
    assert vision["is_starved"] and not vision["is_donor"]

    assert nlp["quota_gpu_hours"] == pytest.approx(30.0)
    assert nlp["in_quota_gpu_hours"] == pytest.approx(10.0)
    assert nlp["idle_quota_gpu_hours"] == pytest.approx(20.0)
    assert nlp["idle_quota_share_pct"] == pytest.approx(200 / 3)
    assert nlp["is_donor"] and not nlp["is_starved"]

    assert platform["quota_less_gpu_hours"] == pytest.approx(2.0)
    assert platform["borrowed_gpu_hours"] == pytest.approx(0.0)
    assert not platform["is_starved"] and not platform["is_donor"]

    pair = one(con, "select * from metrics.quota_fit_pairs")
    assert (pair["starved_tenant"], pair["donor_tenant"], pair["gpu_model"]) == ("vision", "nlp", "A100")
    assert pair["movable_gpu_hours"] == pytest.approx(20.0)
    assert pair["matched_hours"] == 10
    assert pair["peak_movable_gpus"] == pytest.approx(2.0)
    assert pair["mean_movable_gpus"] == pytest.approx(2.0)
    assert pair["starved_need_gpu_hours"] == pytest.approx(30.0)

    # the period's quota comes from metrics.tenant_quota and splits into in-quota + idle
    for f in fit.values():
        assert f["quota_gpu_hours"] == pytest.approx(f["in_quota_gpu_hours"] + f["idle_quota_gpu_hours"])
