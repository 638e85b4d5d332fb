"""Reservations: reserved slots in their window, other work kept off them, the window ends the work."""
from __future__ import annotations

from allocator.model import JobState
from tests.allocator.conftest import T0, at, experiment, make_engine, training

PAPER = {"name": "paper", "tenant": "vision", "hosts": ["h-03"], "start": "2026-11-02T10:00:00Z",
         "end": "2026-11-02T14:00:00Z"}


def test_reservation_work_waits_for_the_window_runs_on_it_and_ends_with_it() -> None:
    engine, sink = make_engine(reservations=[PAPER])
    first = engine.submit(experiment("vision", gpus=4, reservation="paper"), T0, "v")
    second = engine.submit(experiment("vision", gpus=4, reservation="paper"), T0, "v")
    assert engine.schedule(T0) == [] and engine.next_timer() == at(120)
    engine.tick(at(120))
    assert engine.schedule(at(120)) == [first]
    assert {s.host for s in first.slots} == {"h-03"} and not first.borrowed
    assert first.runtime_cap_s == 4 * 3600 and engine.usage("vision-train") == {}
    admit = next(e for e in sink.events if e["job_id"] == first.job_id and e["type"] == "admit")
    assert admit["reason"] == "reservation paper"
    assert engine.next_timer() == at(360)
    changed = engine.tick(at(360))
    assert [j.job_id for j in changed] == [second.job_id, first.job_id]
    assert second.state == JobState.CANCELLED and first.state == JobState.TIMEOUT
    assert [e["reason"] for e in sink.events[-2:]] == [
        "reservation paper ended before the job started", "run time cap of 14400 s reached"]


def test_other_work_keeps_off_reserved_gpus_unless_it_ends_before_the_window() -> None:
    engine, _ = make_engine(reservations=[PAPER])
    engine.submit(training("nlp", gpus=4), T0, "n")
    engine.submit(training(gpus=4), T0, "v")
    engine.schedule(T0)  # h-01 and h-02 are full of in-quota work
    blocked = engine.submit(training(), at(1), "v")  # capped by its queue at 24 h: crosses the window
    short = engine.submit(experiment(time_limit_s=3600), at(2), "r")  # ends at 09:02, before 10:00
    assert engine.schedule(at(2)) == [short]
    assert {s.host for s in short.slots} == {"h-03"} and blocked.state == JobState.PENDING
    late = engine.submit(experiment(time_limit_s=3600), at(90), "r")  # would end at 10:30
    assert engine.schedule(at(90)) == [] and late.state == JobState.PENDING
    engine.tick(at(360))  # the window is over: the reserved GPUs are anyone's again
    started = engine.schedule(at(360))
    assert blocked in started and late in started
