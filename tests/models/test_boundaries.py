"""Boundary cases found by recomputing the metrics independently (issue 11, section 5).

Each test builds a tiny input whose answer is known by hand and pins the fixed definition of
PRODUCT.md it exercises: an allocation's telemetry is the samples taken in [start, end); "sustained
for 30 minutes" is 30 elapsed minutes; shared queues are split per tenant, never labelled with a
guess; waiting work is reported with its pending age; monthly figures are computed over the month.
"""
from __future__ import annotations

import datetime as dt

import pytest

from pipelines.pack.figures import TABLES, table_frame
from tests.models.builders import (
    at,
    build,
    event,
    gpu,
    load,
    one,
    placement,
    rows,
    series,
    simple_job,
    submit,
)

pytestmark = pytest.mark.slow  # dbt builds of constructed warehouses

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
SECONDS = dt.timedelta(seconds=1)


# -- 1. an allocation's telemetry: samples taken at or after its start and before its end -----
def test_sample_taken_before_the_start_in_the_start_minute_is_not_the_allocations(warehouse):
    # One sample a minute, on the minute. The GPU sat idle (0.0) until 10:00 and is fully busy
    # (1.0) from 10:01. The job holds it 10:00:30 -> 11:00:30: its samples are 10:01 .. 11:00,
    # 60 samples all at 1.0 -> utilisation of allocated 100%, active = allocated = 1 GPU-hour.
    # The 10:00:00 sample (0.0) was taken before the job existed and is not its own; nor is it
    # covered by the allocation, so an allocation-less busy minute there would be reported.
    start, end = at("10:00") + 30 * SECONDS, at("11:00") + 30 * SECONDS
    events, placements = simple_job("j-edge", "a100-01", 0, start, end)
    samples = series("a100-01", 0, GR, at("09:00"), 61, 0.0) + series("a100-01", 0, GR, at("10:01"), 119, 1.0)
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    usage = one(con, "select * from metrics.allocation_usage where job_id = 'j-edge'")
    assert usage["allocated_gpu_hours"] == pytest.approx(1.0)
    assert usage["telemetry_minutes"] == 60
    assert usage["utilisation_of_allocated_pct"] == pytest.approx(100.0)
    assert usage["active_gpu_hours"] == pytest.approx(1.0)
    minutes = one(con, "select min(minute_at) as first, max(minute_at) as last from marts.fct_allocation_activity")
    assert (minutes["first"], minutes["last"]) == (at("10:01"), at("11:00"))


def test_busy_sample_before_the_start_is_busy_unallocated(warehouse):
    # Busy (0.9) 09:58 .. 10:01 with one sample a minute; a job starts 10:00:30. The 09:58, 09:59 and
    # 10:00:00 samples were taken before it began: 3 busy unallocated minutes (today's code said 2).
    start = at("10:00") + 30 * SECONDS
    events, placements = simple_job("j-late", "a100-01", 0, start, at("11:00"))
    samples = series("a100-01", 0, GR, at("09:58"), 62, 0.9)
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    busy = one(con, "select * from metrics.telemetry_reconciliation where finding = 'busy_unallocated'")
    assert (busy["first_at"], busy["last_at"], busy["minutes"]) == (at("09:58"), at("10:01"), 3)


def test_allocation_under_a_minute_between_two_samples_has_no_telemetry(warehouse):
    # Samples on the minute; a job holds the GPU 10:00:10 -> 10:00:50, between the 10:00 and 10:01
    # samples: no sample was taken while it existed, so it has no telemetry and is reported.
    events, placements = simple_job("j-blink", "a100-01", 0, at("10:00") + 10 * SECONDS, at("10:00") + 50 * SECONDS)
    samples = series("a100-01", 0, GR, at("09:50"), 20, 0.0)
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    usage = one(con, "select * from metrics.allocation_usage where job_id = 'j-blink'")
    assert usage["has_telemetry"] is False
    assert usage["telemetry_minutes"] == 0
    dark = one(con, "select * from metrics.telemetry_reconciliation where finding = 'allocation_without_telemetry'")
    assert dark["job_id"] == "j-blink"


# -- 2. "sustained for 30 minutes" is 30 elapsed minutes, not 30 samples ------------------------
@pytest.mark.parametrize(("idle_samples", "expected_minutes"), [(30, None), (31, 30.5)])
def test_idle_window_needs_thirty_elapsed_minutes_not_thirty_samples(warehouse, idle_samples, expected_minutes):
    # The job starts 10:00:30; samples are taken at hh:mm:45, idle (0.0) for `idle_samples` minutes,
    # then busy. 30 idle samples (10:00:45 .. 10:29:45) span 10:00:30 -> 10:30 = 29.5 minutes inside
    # the allocation: not the 30-minute default window. 31 samples span 30.5 minutes: a window.
    start = at("10:00") + 30 * SECONDS
    events, placements = simple_job("j-idle", "a100-01", 0, start, at("12:00"))
    first = at("10:00") + 45 * SECONDS
    samples = series("a100-01", 0, GR, first, idle_samples, 0.0) + series(
        "a100-01", 0, GR, first + dt.timedelta(minutes=idle_samples), 60, 0.9
    )
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    windows = rows(con, "select * from metrics.idle_allocations")
    if expected_minutes is None:
        assert windows == []
    else:
        assert len(windows) == 1
        assert windows[0]["window_start_at"] == start
        assert windows[0]["idle_minutes"] == pytest.approx(expected_minutes)


# -- 3. a shared queue is split per tenant, never labelled with a guess -------------------------
def test_shared_queue_has_a_row_per_tenant_and_sums_by_tenant_are_right(warehouse):
    # Queue "shared" is used by vision (3 jobs) and audio (1 job), each job 1 GPU for 1 hour.
    # Summing queue_daily by tenant must give vision 3 jobs / 3 GPU-hours and audio 1 / 1 (today's
    # code labels the whole queue "audio", the alphabetically smallest tenant).
    jobs = [simple_job(f"v{i}", "a100-01", i, at("10:00"), at("11:00"), tenant="vision", queue="shared")
            for i in range(3)]
    jobs.append(simple_job("a0", "a100-01", 3, at("10:00"), at("11:00"), tenant="audio", queue="shared"))
    load(warehouse, gpu_inventory=[gpu("a100-01", i) for i in range(4)],
         job_events=[e for ev, _ in jobs for e in ev], job_gpus=[p for _, pl_ in jobs for p in pl_])
    con = build(warehouse)

    by_tenant = {r["tenant"]: (r["submissions"], r["jobs_started"], r["allocated_gpu_hours"]) for r in rows(
        con, "select tenant, sum(submissions) as submissions, sum(jobs_started) as jobs_started, "
             "sum(allocated_gpu_hours) as allocated_gpu_hours from metrics.queue_daily group by tenant")}
    assert by_tenant == {"vision": (3, 3, pytest.approx(3.0)), "audio": (1, 1, pytest.approx(1.0))}
    queue = one(con, "select sum(submissions) as submissions, sum(allocated_gpu_hours) as gpu_hours "
                     "from metrics.queue_daily where queue = 'shared'")
    assert (queue["submissions"], queue["gpu_hours"]) == (4, pytest.approx(4.0))
    month = {r["tenant"]: r["submissions"] for r in rows(con, "select tenant, submissions from metrics.queue_month")}
    assert month == {"vision": 3, "audio": 1}


# -- 4. waiting work: jobs still waiting and jobs cancelled while queued, with their pending age --
def test_jobs_still_waiting_and_cancelled_while_queued_are_reported_with_their_pending_age(warehouse):
    # j-ran: submitted 10:00, started 10:10 -> the only queue wait, 600 s.
    # j-gave-up: submitted 10:00, cancelled 10:40 without starting -> pending age 2,400 s.
    # j-waits: submitted 11:00, never starts; the data ends at 12:00 (telemetry) -> pending age 3,600 s.
    events = [
        submit("j-ran", at("10:00")), event("j-ran", "start", at("10:10")),
        event("j-ran", "finish", at("11:00"), state="COMPLETED"),
        submit("j-gave-up", at("10:00")), event("j-gave-up", "finish", at("10:40"), state="CANCELLED"),
        submit("j-waits", at("11:00")),
    ]
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events,
         job_gpus=[placement("j-ran", 1, "a100-01", 0, at("10:10"))],
         dcgm_samples=series("a100-01", 0, GR, at("10:00"), 120, 0.5))
    con = build(warehouse)

    day = one(con, "select * from metrics.queue_daily")
    assert (day["jobs_started"], day["queue_wait_p95_s"]) == (1, pytest.approx(600))
    assert (day["cancelled_while_queued"], day["cancelled_pending_age_p95_s"]) == (1, pytest.approx(2400))
    assert (day["jobs_waiting"], day["waiting_age_max_s"]) == (1, pytest.approx(3600))
    for view, where in (("job_period", "template = 'all'"), ("pack_month", "true"), ("queue_month", "true")):
        r = one(con, f"select * from metrics.{view} where {where}")
        assert (r["jobs_waiting"], r["waiting_age_max_s"]) == (1, pytest.approx(3600)), view
        assert (r["cancelled_while_queued"], r["cancelled_pending_age_p95_s"]) == (1, pytest.approx(2400)), view


def test_a_job_waiting_across_midnight_is_waiting_on_the_first_day_and_started_on_the_second(warehouse):
    # Submitted 22:00 on day 1, started 02:00 on day 2 (wait 14,400 s). At day 1's end it had waited
    # 7,200 s; the started job's wait is reported on day 2.
    events = [submit("j-night", at("22:00")), event("j-night", "start", at("02:00", day=2)),
              event("j-night", "finish", at("03:00", day=2), state="COMPLETED")]
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events)
    con = build(warehouse)

    days = {str(r["day"]): r for r in rows(con, "select * from metrics.queue_daily")}
    assert (days["2026-11-01"]["jobs_waiting"], days["2026-11-01"]["waiting_age_max_s"]) == (1, pytest.approx(7200))
    assert days["2026-11-01"]["jobs_started"] == 0
    assert (days["2026-11-02"]["jobs_waiting"], days["2026-11-02"]["queue_wait_p95_s"]) == (0, pytest.approx(14400))


# -- 5. monthly figures are computed over the month ------------------------------------------------
def _timed_job(job_id: str, submitted: dt.datetime, wait_s: int, run_s: int, **fields) -> list[dict]:
    started = submitted + wait_s * SECONDS
    return [submit(job_id, submitted, **fields), event(job_id, "start", started),
            event(job_id, "finish", started + run_s * SECONDS, state="COMPLETED")]


def test_month_percentiles_are_over_the_months_jobs_not_the_worst_day(warehouse):
    # Day 1: one job waits 1,000 s and runs 10,000 s. Day 2: 19 jobs wait 100 s and run 1,000 s.
    # The worst daily p95 is 1,000 s; the month's p95 over its 20 jobs is
    # 100 + 0.05 x (1,000 - 100) = 145 s (quantile_cont at 0.95 x 19 = 18.05). Run time likewise:
    # 1,000 + 0.05 x 9,000 = 1,450 s.
    events = _timed_job("slow", at("08:00"), 1000, 10000)
    for i in range(19):
        events += _timed_job(f"quick-{i}", at("08:00", day=2), 100, 1000)
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events)
    con = build(warehouse)

    month = one(con, "select * from metrics.pack_month")
    assert month["queue_wait_p95_s"] == pytest.approx(145.0)
    assert month["run_time_p95_s"] == pytest.approx(1450.0)
    queue = one(con, "select * from metrics.queue_month")
    assert (queue["jobs_started"], queue["queue_wait_p95_s"]) == (20, pytest.approx(145.0))
    runs = one(con, "select * from metrics.task_month where template = 'all'")
    assert (runs["finished_jobs"], runs["run_time_p95_s"]) == (20, pytest.approx(1450.0))
    tables = {t.key: t for t in TABLES}
    november = dt.date(2026, 11, 1)
    queues = table_frame(con, tables["queues"], november)
    assert queues["queue_wait_p95_s"].to_list() == [pytest.approx(145.0)]
    run_times = table_frame(con, tables["run_times"], november)
    assert run_times.filter(run_times["template"] == "training")["run_time_p95_s"].to_list() == [pytest.approx(1450.0)]


def test_pooling_scorecard_is_per_month(warehouse):
    # October 31: a job waits 2 h; November 1: a job waits 10 min. Each month's shared-queues row
    # reads its own month's wait p95, not the window's.
    events = _timed_job("oct", dt.datetime(2026, 10, 31, 8, 0), 7200, 600) + _timed_job("nov", at("08:00"), 600, 600)
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events)
    con = build(warehouse)

    scored = rows(con, "select month, stage, queue_wait_p95_s, first_day, last_day from metrics.pooling_scorecard "
                       "where stage = 'shared_queues' order by month")
    assert [(str(r["month"]), r["queue_wait_p95_s"]) for r in scored] == [
        ("2026-10-01", pytest.approx(7200.0)), ("2026-11-01", pytest.approx(600.0))]
    assert [str(r["first_day"]) for r in scored] == ["2026-10-31", "2026-11-01"]
    assert one(con, "select count(*) as n from metrics.pooling_scorecard")["n"] == 8
