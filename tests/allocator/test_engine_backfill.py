"""Backfill: a job that cannot be placed holds back what would delay it, not what it can take back."""
from __future__ import annotations

from allocator.model import JobState
from tests.allocator.conftest import T0, at, experiment, make_engine, training


def fragmented_pool():
    """Three research jobs of 3 GPUs, one per node, made non-preemptible: one GPU free per node."""
    engine, sink = make_engine()
    research = [engine.submit(training("research", queue="research", gpus=3), T0, "r") for _ in range(3)]
    engine.schedule(T0)
    assert sorted(s.host for j in research for s in j.slots) == ["h-01"] * 3 + ["h-02"] * 3 + ["h-03"] * 3
    engine.update_queue("research", {"preemptible": False}, T0, "ops-admin")
    return engine, sink, research


def test_a_blocked_job_holds_back_later_work_it_could_not_take_back_but_not_backfill() -> None:
    engine, _, research = fragmented_pool()
    head = engine.submit(training(gpus=4), at(1), "v")  # in quota; no node has 4 free GPUs, no victim
    behind = engine.submit(training("nlp"), at(2), "n")  # in quota too, same priority: it would delay head
    filler = engine.submit(experiment(), at(3), "r")  # low priority: head can preempt it later
    assert engine.schedule(at(3)) == [filler]
    assert head.state == JobState.PENDING and behind.state == JobState.PENDING
    assert len(engine.holders()) == 10  # two GPUs stay idle for the head job
    # a research job ends: its node has 3 free GPUs + the filler's, so the head preempts the filler
    node = filler.slots[0].host
    engine.finish(next(j.job_id for j in research if j.slots[0].host == node), at(10))
    started = engine.schedule(at(10))
    assert head in started and behind in started
    assert {s.host for s in head.slots} == {node}
    # the filler was preempted, requeued, and backfilled again elsewhere
    assert filler.attempt == 2 and node not in {s.host for s in filler.slots}


def test_in_quota_work_passes_a_blocked_job_that_is_borrowing() -> None:
    engine, _, _ = fragmented_pool()
    engine.update_queue("research", {"preemptible": True}, at(1), "ops-admin")
    borrower = engine.submit(training("research", queue="research", gpus=4), at(1), "r")  # over quota: borrowing
    owner = engine.submit(training("nlp"), at(2), "n")
    assert engine.schedule(at(2)) == [owner]
    assert borrower.state == JobState.PENDING


def test_lower_priority_borrowed_work_passes_a_blocked_higher_priority_borrower() -> None:
    engine, _ = make_engine()
    engine.update_queue("vision-train", {"quota": {"H100": 0, "A100": 2, "L40S": 1}}, T0, "ops-admin")
    engine.update_queue("nlp-train", {"quota": {"H100": 9}}, T0, "ops-admin")
    for _ in range(3):
        engine.submit(training("nlp", gpus=3), T0, "n")
    engine.schedule(T0)
    assert len(engine.holders()) == 9  # in quota, one per node: one GPU free on each
    big = engine.submit(training(gpus=4), at(1), "v")  # borrowing at priority 50; no borrowed work to take
    small = engine.submit(training("research", queue="research"), at(2), "r")  # borrowing at 40: big can take it
    same = engine.submit(training(), at(3), "v")  # borrowing at 50, behind big: it would delay it
    assert engine.schedule(at(3)) == [small]
    assert big.state == same.state == JobState.PENDING
