"""Preemption prefers the victim whose preemption loses the least work (a fresh checkpoint), and the
simulator resumes a preempted attempt from its last ok checkpoint: known answers."""
from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from allocator.artifacts import ArtifactReport
from allocator.scheduler import work_at_risk
from allocator.sim.checkpoints import Checkpoints
from tests.allocator.conftest import at, make_engine, training


def _full_pool(prefer: bool):
    """12 borrowed research jobs on the 12 H100, started at minutes 0, 2, ..., 22; the first one wrote an
    ok checkpoint at minute 59. At minute 60 an in-quota nlp job needs one H100."""
    engine, sink = make_engine()
    engine.prefer_fresh_checkpoints = prefer
    research = []
    for i in range(12):
        research.append(engine.submit(training("research", queue="research"), at(2 * i), "r"))
        engine.schedule(at(2 * i))
    assert all(j.borrowed for j in research) and len(engine.holders()) == 12
    engine.report_artifact(research[0].job_id, ArtifactReport("checkpoint"), at(59), "research-alice")
    engine.submit(training("nlp"), at(60), "n")
    engine.schedule(at(60))
    return research, [e["job_id"] for e in sink.events if e["type"] == "preempt"]


def test_among_equal_victims_the_freshest_checkpoint_goes_first():
    research, preempted = _full_pool(prefer=True)
    # research[0] loses 1 GPU-minute; every other one all its minutes since it started (the newest: 38)
    assert preempted == [research[0].job_id]


def test_switched_off_the_most_recently_started_goes_first():
    research, preempted = _full_pool(prefer=False)
    assert preempted == [research[11].job_id]


def test_work_at_risk_is_gpus_times_the_time_since_the_last_checkpoint_or_the_start():
    engine, _ = make_engine()
    job = engine.submit(training(gpus=4), at(0), "v")
    engine.schedule(at(0))
    assert work_at_risk(job, at(30)) == pytest.approx(4 * 30 * 60)  # no checkpoint: since its start
    engine.report_artifact(job.job_id, ArtifactReport("checkpoint"), at(20), "vision-alice")
    engine.report_artifact(job.job_id, ArtifactReport("checkpoint", status="failed"), at(25), "vision-alice")
    assert work_at_risk(job, at(30)) == pytest.approx(4 * 10 * 60)  # a failed write saves nothing


def _sim(engine, job_id: str, planned: bool = True, checkpointed: bool = True) -> SimpleNamespace:
    behaviour = SimpleNamespace(checkpoints=object() if planned else None, checkpointed=checkpointed)
    return SimpleNamespace(engine=engine, plans={job_id: SimpleNamespace(behaviour=behaviour)}, progress={},
                           end=at(10_000))


def test_a_preempted_attempt_keeps_its_work_up_to_its_last_ok_checkpoint_and_loses_the_rest():
    engine, _ = make_engine()
    job = engine.submit(training(gpus=2), at(0), "v")
    engine.schedule(at(0))
    engine.report_artifact(job.job_id, ArtifactReport("checkpoint"), at(50), "vision-alice")
    checkpoints = Checkpoints(_sim(engine, job.job_id), seed=7)
    kept = checkpoints.preempted(job.job_id, 1, at(0), 2.0, at(95))
    assert kept == 50 * 60  # resumes from minute 50 of its work
    assert checkpoints.lost_gpu_s / 3600 == pytest.approx(2 * 45 / 60)  # 2 GPUs x 45 minutes = 1.5 GPU-hours


def test_without_a_checkpoint_everything_is_lost_and_a_replayed_job_keeps_its_whole_hours():
    engine, _ = make_engine()
    job = engine.submit(training(), at(0), "v")
    engine.schedule(at(0))
    checkpoints = Checkpoints(_sim(engine, job.job_id), seed=7)
    assert checkpoints.preempted(job.job_id, 1, at(0), 1.0, at(95)) == 0
    assert checkpoints.lost_gpu_s == pytest.approx(95 * 60)
    # a month read back from a warehouse has no checkpoint plan: the old whole-hour rule
    replayed = Checkpoints(_sim(engine, job.job_id, planned=False), seed=7)
    assert replayed.preempted(job.job_id, 1, at(0), 1.0, at(95)) == 3600
    assert replayed.lost_gpu_s == pytest.approx(35 * 60)
    assert dt.timedelta(seconds=Checkpoints(_sim(engine, job.job_id, planned=False, checkpointed=False), 7)
                        .preempted(job.job_id, 1, at(0), 1.0, at(95))) == dt.timedelta(0)
