"""Run-time caps (TIMEOUT at the cap, cap_runtime shortening it) and the retry budget."""
from __future__ import annotations

from allocator.model import Action, ActionKind, JobState, Outcome
from tests.allocator.conftest import T0, at, events_of, make_engine, training


def test_a_job_times_out_at_its_cap_and_frees_its_gpus() -> None:
    engine, sink = make_engine()
    job = engine.submit(training(gpus=2, time_limit_s=600), T0, "v")
    engine.schedule(T0)
    assert job.runtime_cap_s == 600 and engine.next_timer() == at(10)
    assert engine.tick(at(9.99)) == [] and job.state == JobState.RUNNING
    assert engine.tick(at(10)) == [job]
    assert job.state == JobState.TIMEOUT and job.ended_at == at(10) and engine.holders() == {}
    finish = sink.events[-1]
    assert (finish["type"], finish["state"], finish["reason"]) == ("finish", "TIMEOUT", "run time cap of 600 s reached")
    assert engine.next_timer() is None


def test_the_queue_cap_applies_without_a_time_limit() -> None:
    engine, _ = make_engine()
    capped = engine.submit(training(), T0, "v")
    uncapped = engine.submit(training("nlp"), T0, "n")
    engine.schedule(T0)
    assert capped.runtime_cap_s == 86400 and uncapped.runtime_cap_s is None


def test_cap_runtime_shortens_the_running_attempt_only() -> None:
    engine, sink = make_engine()
    job = engine.submit(training(), T0, "v")
    engine.schedule(T0)
    action = Action(ActionKind.CAP_RUNTIME, "runs-past/v1:j1:cap", job.job_id, "governance-bot",
                    reason="past its declared run time", runtime_s=1800)
    result = engine.apply_action(action, at(5))
    assert result.outcome == Outcome.APPLIED
    assert result.effects == {"runtime_cap_s": 1800, "ends_at": "2026-11-02T08:30:00Z"}
    assert engine.next_timer() == at(30)
    longer = Action(ActionKind.CAP_RUNTIME, "other", job.job_id, "bot", runtime_s=3600)
    refused = engine.apply_action(longer, at(6))
    assert refused.outcome == Outcome.REFUSED and "already 1800 s" in refused.reason
    engine.tick(at(30))
    assert job.state == JobState.TIMEOUT
    audit = sink.audits[0]
    assert audit["action"] == "enforcement.cap_runtime" and audit["decision"] == "applied"
    assert audit["before"]["runtime_cap_s"] == 86400 and audit["after"]["runtime_cap_s"] == 1800


def test_a_cap_already_passed_ends_the_job_now() -> None:
    engine, _ = make_engine()
    job = engine.submit(training(), T0, "v")
    engine.schedule(T0)
    result = engine.apply_action(Action(ActionKind.CAP_RUNTIME, "k", job.job_id, "bot", runtime_s=600), at(20))
    assert result.effects["state"] == "TIMEOUT"
    assert job.state == JobState.TIMEOUT and job.ended_at == at(20)


def test_failures_are_retried_within_the_budget_then_the_job_fails() -> None:
    engine, sink = make_engine()
    job = engine.submit(training(), T0, "v")  # vision-train: retry budget 2
    for attempt in (1, 2, 3):
        engine.schedule(at(attempt))
        assert job.state == JobState.RUNNING and job.attempt == attempt
        engine.finish(job.job_id, at(attempt + 0.5), JobState.OUT_OF_MEMORY if attempt == 2 else JobState.FAILED,
                      exit_code=137, reason="CUDA out of memory")
    assert job.state == JobState.FAILED and job.retries_used == 2
    assert events_of(sink, job.job_id) == [
        ("submit", 1), ("admit", 1), ("start", 1), ("requeue", 1),
        ("admit", 2), ("start", 2), ("requeue", 2),
        ("admit", 3), ("start", 3), ("finish", 3),
    ]
    requeues = [e for e in sink.events if e["type"] == "requeue"]
    assert requeues[0]["reason"] == "retry after failure: CUDA out of memory"
    assert (requeues[0]["state"], requeues[1]["state"], requeues[0]["exit_code"]) == ("FAILED", "OUT_OF_MEMORY", 137)
    assert sink.events[-1]["reason"] == "CUDA out of memory (retry budget of 2 used)"
    assert sink.events[-1]["state"] == "FAILED" and engine.holders() == {}


def test_timeouts_and_cancellations_are_not_retried() -> None:
    engine, _ = make_engine()
    job = engine.submit(training(time_limit_s=60), T0, "v")
    engine.schedule(T0)
    engine.tick(at(1))
    assert job.state == JobState.TIMEOUT and job.retries_used == 0
    other = engine.submit(training(), at(2), "v")
    engine.schedule(at(2))
    engine.cancel(other.job_id, at(3), "vision-alice", "wrong config")
    assert other.state == JobState.CANCELLED and other.retries_used == 0
