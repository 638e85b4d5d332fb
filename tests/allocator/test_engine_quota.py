"""Quota, borrowing, reclaim of borrowed work by its owner, and the preemption order."""
from __future__ import annotations

from allocator.model import JobState, ShareMode
from tests.allocator.conftest import T0, at, events_of, experiment, inference, make_engine, training


def admit_reason(sink, job_id: str) -> str:
    return [e for e in sink.events if e["job_id"] == job_id and e["type"] == "admit"][-1]["reason"]


def test_jobs_run_in_quota_then_borrow_idle_capacity_and_non_borrowing_queues_wait() -> None:
    engine, sink = make_engine()
    vision = [engine.submit(training(), T0, "a") for _ in range(5)]
    serve = [engine.submit(inference("nlp"), T0, "b") for _ in range(3)]
    started = engine.schedule(T0)
    # inference outranks training (priority 90 against 50)
    assert [j.job_id for j in started] == [j.job_id for j in serve[:2] + vision]
    assert [j.borrowed for j in vision] == [False] * 4 + [True]
    assert admit_reason(sink, vision[0].job_id) == "within quota"
    assert admit_reason(sink, vision[4].job_id) == "borrowing idle capacity"
    assert engine.usage("vision-train") == {"H100": 4.0} and engine.borrowed("vision-train") == {"H100": 1.0}
    # inference may not borrow: the third waits on quota although 5 H100 are idle
    assert serve[2].state == JobState.PENDING and len(engine.holders()) == 7
    engine.finish(serve[0].job_id, at(5))
    assert [j.job_id for j in engine.schedule(at(5))] == [serve[2].job_id]


def test_borrowed_work_is_preempted_when_the_quota_owner_needs_the_capacity() -> None:
    engine, sink = make_engine()
    research = [engine.submit(training("research", queue="research", gpus=4), at(i), "r") for i in range(3)]
    for i in range(3):
        engine.schedule(at(i))
    assert all(j.borrowed and j.state == JobState.RUNNING for j in research)
    owner = engine.submit(training(gpus=4), at(10), "v")
    assert engine.schedule(at(10)) == [owner]
    victim = research[2]  # the most recently started
    assert events_of(sink, victim.job_id)[-2:] == [("preempt", 1), ("requeue", 1)]
    preempt, requeue = [e for e in sink.events if e["job_id"] == victim.job_id][-2:]
    assert preempt["reason"] == f"preempted by job {owner.job_id}"
    assert requeue["reason"] == "requeued after preemption: resumes from its checkpoint (hourly)"
    assert victim.state == JobState.PENDING and victim.attempt == 2
    assert admit_reason(sink, owner.job_id) == f"within quota; preempting {victim.job_id}"
    assert hosts_of_slots(owner) == {"h-03"} and not owner.borrowed
    engine.finish(owner.job_id, at(20))
    assert engine.schedule(at(20)) == [victim]
    assert events_of(sink, victim.job_id)[-2:] == [("admit", 2), ("start", 2)]


def hosts_of_slots(job) -> set[str]:
    return {s.host for s in job.slots}


def test_borrowed_jobs_are_promoted_when_quota_frees_and_demoted_when_it_shrinks() -> None:
    engine, _ = make_engine()
    big = engine.submit(training(gpus=4), T0, "v")
    small = engine.submit(training(), T0, "v")
    engine.schedule(T0)
    assert not big.borrowed and small.borrowed
    engine.finish(big.job_id, at(1))
    assert not small.borrowed and engine.usage("vision-train") == {"H100": 1.0}
    more = [engine.submit(training(), at(2), "v") for _ in range(3)]
    engine.schedule(at(2))
    assert not any(j.borrowed for j in more)
    engine.update_queue("vision-train", {"quota": {"H100": 2, "A100": 2, "L40S": 1}}, at(3), "ops-admin")
    assert [j.borrowed for j in [small, *more]] == [False, False, True, True]
    assert engine.usage("vision-train") == {"H100": 2.0} and engine.borrowed("vision-train") == {"H100": 2.0}


def test_preemption_order_backfill_then_borrowed_most_recent_first_never_inference() -> None:
    engine, sink = make_engine()
    nlp = [engine.submit(training("nlp"), at(1), "n") for _ in range(4)]
    engine.schedule(at(1))
    vision = [engine.submit(training(), at(2), "v") for _ in range(4)]
    engine.schedule(at(2))
    serve = [engine.submit(inference(), at(3), "s") for _ in range(2)]
    engine.schedule(at(3))
    backfill = []
    for minute in (4, 5):
        backfill.append(engine.submit(experiment(), at(minute), "r"))
        engine.schedule(at(minute))
    assert len(engine.holders()) == 12 and all(j.borrowed for j in backfill)
    # nlp loses its quota (its jobs become borrowed); vision gets it and outranks everyone but inference
    engine.update_queue("nlp-train", {"quota": {"H100": 0}}, at(6), "ops-admin")
    assert all(j.borrowed for j in nlp)
    engine.update_queue("vision-train", {"quota": {"H100": 10, "A100": 2, "L40S": 1}, "priority": 95}, at(6), "ops")
    preempted = []
    for i in range(7):
        job = engine.submit(training(), at(10 + i), "v")
        before = {e["event_id"] for e in sink.events}
        engine.schedule(at(10 + i))
        preempted += [e["job_id"] for e in sink.events if e["event_id"] not in before and e["type"] == "preempt"]
    # backfill newest first, then the borrowed nlp jobs newest first (same start: last submitted first)
    assert preempted == [backfill[1].job_id, backfill[0].job_id] + [j.job_id for j in reversed(nlp)]
    assert job.state == JobState.PENDING  # over quota now, nothing borrowed left to take: inference stays
    assert all(j.state == JobState.RUNNING for j in serve + vision)


def test_in_quota_work_of_lower_priority_is_preempted_by_higher_priority_in_quota_work() -> None:
    engine, sink = make_engine()
    engine.update_queue("vision-train", {"quota": {"H100": 4, "A100": 4, "L40S": 1}}, T0, "ops-admin")
    vision = []
    for i in range(4):
        vision.append(engine.submit(training(model="A100"), at(i), "v"))
        engine.schedule(at(i))
    assert not any(j.borrowed for j in vision)
    serving = engine.submit(inference(model="A100"), at(10), "s")
    assert engine.schedule(at(10)) == [serving]
    assert vision[3].state == JobState.PENDING and vision[3].attempt == 2
    # and in-quota work never displaces inference, whatever its priority
    engine.update_queue("vision-train", {"priority": 99}, at(11), "ops-admin")
    engine.schedule(at(11))
    assert vision[3].state == JobState.PENDING and serving.state == JobState.RUNNING
    assert [e["type"] for e in sink.events if e["job_id"] == serving.job_id] == ["submit", "admit", "start"]


def test_a_preempted_job_keeps_its_gpus_for_the_grace_period() -> None:
    engine, sink = make_engine(grace=60)
    research = [engine.submit(training("research", queue="research", gpus=4), T0, "r") for _ in range(3)]
    engine.schedule(T0)
    owner = engine.submit(training(gpus=4), at(1), "v")
    assert engine.schedule(at(1)) == []
    victim = research[2]
    assert owner.admitted_at == at(1) and owner.state == JobState.PENDING
    assert victim.state == JobState.RUNNING and engine.next_timer() == at(2)
    assert engine.tick(at(1.5)) == []
    assert engine.tick(at(2)) == [victim]
    assert engine.schedule(at(2)) == [owner] and owner.started_at == at(2)
    types = [(e["type"], e["job_id"]) for e in sink.events if e["ts"] == "2026-11-02T08:02:00Z"]
    assert types == [("preempt", victim.job_id), ("requeue", victim.job_id), ("start", owner.job_id)]


def test_a_victim_that_ends_during_its_grace_lets_the_preemptor_start_at_once() -> None:
    engine, _ = make_engine(grace=300)
    backfill = [engine.submit(experiment(model="L40S", share_mode=ShareMode.TIMESLICE), T0, "r") for _ in range(8)]
    engine.schedule(T0)
    owner = engine.submit(training(model="L40S", share_mode=ShareMode.TIMESLICE), at(1), "v")
    engine.schedule(at(1))
    victim = backfill[7]
    assert engine._track[victim.job_id].preempted_by == owner.job_id
    engine.finish(victim.job_id, at(2))
    assert owner.state == JobState.RUNNING and owner.started_at == at(2)
    assert engine.schedule(at(2)) == [owner]
    assert victim.state == JobState.COMPLETED
