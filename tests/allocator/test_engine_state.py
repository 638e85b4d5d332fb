"""state_dict / from_state: a restored engine behaves exactly as the original from then on."""
from __future__ import annotations

import copy
import json

from allocator.engine import Engine
from allocator.model import Action, ActionKind, JobState
from allocator.records import MemorySink
from tests.allocator.conftest import Driver, make_engine, random_specs, small_pool


def test_a_restored_engine_continues_identically() -> None:
    engine, sink = make_engine(grace=120)
    driver = Driver(engine, random_specs(23, 260))
    # run until a preemptor waits for its victims' grace: the hardest state to carry over
    while True:
        now = driver.next_time()
        assert now is not None, "the workload never produced a preemption grace"
        driver.step(now)
        waiting = [j for j in engine.jobs.values() if j.state == JobState.PENDING and j.admitted_at is not None]
        if waiting and sum(j.state == JobState.PENDING for j in engine.jobs.values()) > 3:
            break
    victim = next(j for j in engine.holders().values() if not j.protected)
    engine.apply_action(Action(ActionKind.RECLAIM, "key-1", victim.job_id, "bot", reason="idle"), now)
    proposal = engine.apply_action(Action(ActionKind.QUOTA_CHANGE, "key-2", "nlp-train", "bot", quota={"H100": 5}),
                                   now)
    state = json.loads(json.dumps(engine.state_dict()))

    copy_sink = MemorySink()
    restored = Engine.from_state(small_pool(grace=120), state, copy_sink)
    assert restored.state_dict() == state
    twin = copy.deepcopy(driver)
    twin.engine = restored
    mark = len(sink.events), len(sink.audits)

    for subject in (engine, restored):
        assert subject.apply_action(Action(ActionKind.RECLAIM, "key-1", victim.job_id, "bot"), now).outcome.value \
            == "already_done"
        subject.approve(proposal.proposal_id, now, "maria")
    driver.run_until()
    twin.run_until()

    assert copy_sink.events == sink.events[mark[0]:] and len(copy_sink.events) > 100
    assert copy_sink.audits == sink.audits[mark[1]:]
    assert twin.log == driver.log
    assert restored.state_dict() == engine.state_dict()
    assert any(e["type"] == "preempt" for e in copy_sink.events)
