"""Task metrics: waits, attempts, failures, retries, deduplication of re-delivered events."""
from __future__ import annotations

import datetime as dt

import pytest

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


def requeued_job() -> tuple[list[dict], list[dict]]:
    """submit 10:00, admit 10:05, start 10:10, requeue 11:00, admit 11:20, start 11:30, finish 12:30."""
    events = [
        submit("j-rq", at("10:00"), spec={"checkpoint_policy": "none"}),
        event("j-rq", "admit", at("10:05")),
        event("j-rq", "start", at("10:10")),
        event("j-rq", "requeue", at("11:00"), reason="node drain"),
        event("j-rq", "admit", at("11:20"), attempt=2),
        event("j-rq", "start", at("11:30"), attempt=2),
        event("j-rq", "finish", at("12:30"), attempt=2, state="COMPLETED", exit_code=0),
    ]
    placements = [placement("j-rq", 1, "a100-01", 0, at("10:10")), placement("j-rq", 2, "a100-01", 1, at("11:30"))]
    return events, placements


def test_queue_wait_and_admission_wait_with_a_requeue(warehouse):
    # Queue wait = first start - submit = 10:10 - 10:00 = 600 s.
    # Admission wait: attempt 1 = 10:05 - 10:00 = 300 s; attempt 2 = 11:20 - 11:00 (the requeue) = 1200 s.
    events, placements = requeued_job()
    load(warehouse, gpu_inventory=[gpu("a100-01", 0), gpu("a100-01", 1)], job_events=events, job_gpus=placements)
    con = build(warehouse)

    job = one(con, "select * from metrics.job_summary")
    assert job["queue_wait_s"] == pytest.approx(600)
    assert (job["attempts"], job["retries"], job["requeues"]) == (2, 1, 1)
    assert job["run_time_s"] == pytest.approx(50 * 60 + 60 * 60)  # 10:10-11:00 and 11:30-12:30
    attempts = rows(con, "select attempt, admission_wait_s, end_event_type from marts.fct_job_attempts order by attempt")
    assert [(a["attempt"], a["admission_wait_s"], a["end_event_type"]) for a in attempts] == [
        (1, pytest.approx(300), "requeue"),
        (2, pytest.approx(1200), "finish"),
    ]
    queue = one(con, "select * from metrics.queue_daily")
    assert queue["queue_wait_p50_s"] == pytest.approx(600)
    assert queue["admission_wait_p50_s"] == pytest.approx(750)  # median of 300 and 1200
    assert queue["admission_wait_p95_s"] == pytest.approx(300 + 0.95 * 900)
    assert (queue["admissions"], queue["requeues"], queue["submissions"]) == (2, 1, 1)


def test_retries_and_the_gpu_hours_they_burned(warehouse):
    # Attempt 1 held GPU 0 for 50 min and was requeued (interrupted, no checkpoint policy);
    # attempt 2 (the retry) held GPU 1 for 60 min.
    events, placements = requeued_job()
    load(warehouse, gpu_inventory=[gpu("a100-01", 0), gpu("a100-01", 1)], job_events=events, job_gpus=placements)
    con = build(warehouse)

    task = one(con, "select * from metrics.task_daily")
    assert task["retries"] == 1
    assert task["retry_gpu_hours"] == pytest.approx(1.0)
    assert task["interrupted_gpu_hours"] == pytest.approx(50 / 60)
    assert task["interruptions_without_checkpoint_policy"] == 1
    assert task["checkpoint_policy_pct"] == pytest.approx(0.0)  # "none" is not a policy


def test_failure_rate_reasons_and_task_type_mix(warehouse):
    # Three training jobs finish: one COMPLETED, one FAILED (CUDA error), one CANCELLED (not a
    # failure) -> failure rate 1/3. One inference job is submitted and keeps running.
    jobs = [
        simple_job("t-ok", "a100-01", 0, at("01:00"), at("02:00"), spec={"checkpoint_policy": "hourly"}),
        simple_job("t-bad", "a100-01", 1, at("01:00"), at("03:00"), state="FAILED"),
        simple_job("t-stop", "a100-01", 2, at("01:00"), at("01:30"), state="CANCELLED"),
        simple_job("i-svc", "a100-01", 3, at("01:00"), None, template="inference", tenant="search", queue="serve"),
    ]
    events = [e for evs, _ in jobs for e in evs]
    for e in events:
        if e["job_id"] == "t-bad" and e["event_type"] == "finish":
            e["reason"] = "CUDA error: an illegal memory access"
    load(warehouse, gpu_inventory=[gpu("a100-01", i) for i in range(4)], job_events=events,
         job_gpus=[p for _, ps in jobs for p in ps])
    con = build(warehouse)

    training = one(con, "select * from metrics.task_daily where template = 'training'")
    assert (training["finished_jobs"], training["failed_jobs"]) == (3, 1)
    assert training["failure_rate_pct"] == pytest.approx(100 / 3)
    assert training["submissions_share_pct"] == pytest.approx(75.0)  # 3 of the day's 4 submissions
    assert training["checkpoint_policy_pct"] == pytest.approx(100 / 3)
    reason = one(con, "select * from metrics.failure_reasons")
    assert (reason["final_state"], reason["failure_reason"], reason["failed_jobs"]) == (
        "FAILED", "CUDA error: an illegal memory access", 1)
    assert reason["allocated_gpu_hours"] == pytest.approx(2.0)
    statuses = {r["job_id"]: r["status"] for r in rows(con, "select job_id, status from metrics.job_summary")}
    assert statuses == {"t-ok": "COMPLETED", "t-bad": "FAILED", "t-stop": "CANCELLED", "i-svc": "RUNNING"}


def test_preemption_ends_an_attempt_and_is_counted(warehouse):
    events = [
        submit("j-p", at("09:00")),
        event("j-p", "start", at("09:00")),
        event("j-p", "preempt", at("10:00"), reason="preempted by job j-42"),
        event("j-p", "start", at("10:30"), attempt=2),
        event("j-p", "finish", at("11:00"), attempt=2, state="COMPLETED"),
    ]
    placements = [placement("j-p", 1, "a100-01", 0, at("09:00")), placement("j-p", 2, "a100-01", 0, at("10:30"))]
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements)
    con = build(warehouse)

    assert one(con, "select preemptions from metrics.queue_daily")["preemptions"] == 1
    assert one(con, "select preemptions from metrics.task_daily")["preemptions"] == 1
    job = one(con, "select * from metrics.job_summary")
    assert job["allocated_gpu_hours"] == pytest.approx(1.5)
    assert job["interrupted_gpu_hours"] == pytest.approx(1.0)


def test_redelivered_events_and_samples_count_once(warehouse):
    # A Slurm job still running on day 1 is seen again in day 2's ingest: the same events and
    # placement arrive twice (two partitions). The day-1 telemetry file is also ingested twice,
    # by two sources. Everything must count once.
    events, placements = simple_job("4242", "node1", 0, at("22:00"), None, tenant="phys", queue="gpu")
    samples = series("node1", 0, "DCGM_FI_DEV_GPU_UTIL", at("22:00"), 60, 50.0, hpc_job="4242")
    load(warehouse, "slurm", day=dt.date(2026, 11, 1), job_events=events, job_gpus=placements, dcgm_samples=samples)
    load(warehouse, "prometheus", day=dt.date(2026, 11, 1), dcgm_samples=samples)
    finish = [event("4242", "finish", at("01:00", day=2), state="COMPLETED")]
    load(warehouse, "slurm", day=dt.date(2026, 11, 2), job_events=events + finish, job_gpus=placements)
    load(warehouse, "gpu_inventory", gpu_inventory=[gpu("node1", 0)])
    con = build(warehouse)

    assert one(con, "select count(*) as n from raw.job_events where event_type = 'submit'")["n"] == 2
    job = one(con, "select * from metrics.job_summary")
    assert (job["status"], job["attempts"]) == ("COMPLETED", 1)
    assert job["allocated_gpu_hours"] == pytest.approx(3.0)  # 22:00 -> 01:00, not 6
    assert one(con, "select sum(submissions) as n from metrics.task_daily")["n"] == 1
    minute = one(con, "select samples, activity from marts.fct_gpu_activity where minute_at = ?", [at("22:30")])
    assert (minute["samples"], minute["activity"]) == (1, pytest.approx(0.5))
    assert one(con, "select label_status from metrics.allocation_usage")["label_status"] == "match"


def test_a_corrected_redelivery_counts_once_with_the_latest_value(warehouse):
    # GPU_UTIL every 30 s. The scrape file has 10:00:00 = 40 and 10:00:30 = 60; Prometheus history,
    # ingested later, re-delivers 10:00:30 as 100. The minute holds two samples, 40 and 100:
    # activity 0.7 (all three would give 0.667; the first delivery's value would give 0.5).
    def sample(second: int, value: float) -> dict:
        return {
            "sampled_at": at("10:00") + dt.timedelta(seconds=second), "host": "node1", "gpu": 0,
            "metric": "DCGM_FI_DEV_GPU_UTIL", "value": value, "source": "dcgm_text", "source_file": "m.prom",
        }

    load(warehouse, "dcgm_text", dcgm_samples=[sample(0, 40.0), sample(30, 60.0)])
    load(warehouse, "prometheus", dcgm_samples=[sample(30, 100.0)])
    con = build(warehouse)

    minute = one(con, "select samples, gpu_util_pct, activity from marts.fct_gpu_activity")
    assert (minute["samples"], minute["gpu_util_pct"], minute["activity"]) == (2, pytest.approx(70.0), pytest.approx(0.7))
    redelivered = one(con, "select gpu_util_pct, deliveries from staging.stg_dcgm__samples where deliveries > 1")
    assert (redelivered["gpu_util_pct"], redelivered["deliveries"]) == (pytest.approx(100.0), 2)


def test_an_attempt_ended_without_a_reason_does_not_borrow_the_next_attempts(warehouse):
    # Slurm's preempted row carries no reason; the next attempt's finish does. The first attempt's
    # end must stay without a reason rather than take the later one (arg_min skips NULLs).
    events = [
        submit("j-pre", at("10:00")),
        event("j-pre", "start", at("10:00")),
        event("j-pre", "preempt", at("11:00"), state="PREEMPTED"),
        event("j-pre", "start", at("11:30"), attempt=2),
        event("j-pre", "finish", at("12:00"), attempt=2, state="CANCELLED", reason="cancelled by uid 0",
              exit_code=0),
    ]
    placements = [placement("j-pre", 1, "a100-01", 0, at("10:00")), placement("j-pre", 2, "a100-01", 0, at("11:30"))]
    load(warehouse, job_events=events, job_gpus=placements)
    con = build(warehouse)
    first = one(con, "select end_state, end_reason, exit_code from marts.fct_job_attempts "
                     "where job_id = 'j-pre' and attempt = 1")
    assert first == {"end_state": "PREEMPTED", "end_reason": None, "exit_code": None}
