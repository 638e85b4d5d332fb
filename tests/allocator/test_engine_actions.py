"""Enforcement actions: outcomes, idempotency, protected work, dry runs, quota proposals, admin changes."""
from __future__ import annotations

import pytest

from allocator.model import Action, ActionKind, JobState, Outcome
from tests.allocator.conftest import T0, at, events_of, inference, make_engine, training


def running(engine, spec, now=T0):
    job = engine.submit(spec, now, spec.user)
    engine.schedule(now)
    assert job.state == JobState.RUNNING
    return job


def reclaim(job_id: str, key: str = "idle/v1:j:1:reclaim", **fields) -> Action:
    return Action(ActionKind.RECLAIM, key, job_id, "governance-bot", reason="idle 2 h", policy="idle",
                  policy_version="v1", **fields)


def test_the_same_action_twice_has_one_effect() -> None:
    engine, sink = make_engine()
    job = running(engine, training(gpus=2))
    first = engine.apply_action(reclaim(job.job_id), at(30))
    assert first.outcome == Outcome.APPLIED and job.state == JobState.CANCELLED
    assert first.effects == {"state": "CANCELLED", "released_slots": ["h-01/0", "h-01/1"], "gpus_released": 2.0}
    assert sink.events[-1]["reason"] == "reclaimed: idle 2 h" and sink.events[-1]["state"] == "CANCELLED"
    events = len(sink.events)
    second = engine.apply_action(reclaim(job.job_id), at(31))
    assert second.outcome == Outcome.ALREADY_DONE and second.effects == first.effects
    assert len(sink.events) == events
    assert [a["decision"] for a in sink.audits] == ["applied", "already_done"]
    applied = sink.audits[0]
    assert applied["action"] == "enforcement.reclaim" and applied["object_kind"] == "job"
    assert applied["object_namespace"] == "vision" and applied["object_name"] == job.job_id
    assert applied["before"]["state"] == "RUNNING" and applied["after"] == {"state": "CANCELLED"}
    assert applied["reason"] == "idle 2 h (policy idle v1)" and applied["idempotency_key"] == "idle/v1:j:1:reclaim"
    assert applied["actor_role"] == "governance_bot"


def test_a_key_reused_for_another_target_is_refused() -> None:
    engine, _ = make_engine()
    a, b = running(engine, training()), running(engine, training())
    engine.apply_action(reclaim(a.job_id, key="k"), at(1))
    result = engine.apply_action(reclaim(b.job_id, key="k"), at(2))
    assert result.outcome == Outcome.REFUSED and "was used for reclaim on" in result.reason
    assert b.state == JobState.RUNNING


@pytest.mark.parametrize(("kind", "fields", "word"), [
    (ActionKind.RECLAIM, {}, "reclaim"),
    (ActionKind.PREEMPT, {}, "preemption"),
    (ActionKind.CAP_RUNTIME, {"runtime_s": 600}, "run-time caps"),
])
def test_inference_is_refused_for_reclaim_preempt_and_caps(kind: ActionKind, fields: dict, word: str) -> None:
    engine, sink = make_engine()
    job = running(engine, inference())
    action = Action(kind, "k1", job.job_id, "governance-bot", reason="idle", **fields)
    result = engine.apply_action(action, at(5))
    assert result.outcome == Outcome.REFUSED
    assert result.reason == f"production inference is exempt from automatic {word}"
    assert job.state == JobState.RUNNING and job.runtime_cap_s is None
    assert sink.audits[-1]["decision"] == "refused" and "after" not in sink.audits[-1]
    # a refusal is not remembered: the same key is judged again
    assert engine.apply_action(action, at(6)).outcome == Outcome.REFUSED


def test_remind_is_only_an_audit_record() -> None:
    engine, sink = make_engine()
    job = running(engine, inference())
    events = list(sink.events)
    result = engine.apply_action(Action(ActionKind.REMIND, "r1", job.job_id, "governance-bot", reason="idle 1 h"),
                                 at(60))
    assert result.outcome == Outcome.APPLIED and result.effects == {"reminded": "vision-carol"}
    assert sink.events == events and job.state == JobState.RUNNING
    assert sink.audits[-1]["action"] == "enforcement.remind" and sink.audits[-1]["decision"] == "applied"


def test_preempt_requeues_the_job_as_its_next_attempt() -> None:
    engine, sink = make_engine()
    job = running(engine, training())
    result = engine.apply_action(Action(ActionKind.PREEMPT, "p1", job.job_id, "ops", reason="maintenance"), at(10))
    assert result.outcome == Outcome.APPLIED and result.effects["attempt"] == 2
    assert events_of(sink, job.job_id)[-2:] == [("preempt", 1), ("requeue", 1)]
    assert sink.events[-2]["reason"] == "preempted: maintenance"
    assert engine.schedule(at(10)) == [job] and job.attempt == 2


def test_preempt_is_refused_for_a_non_preemptible_queue_and_a_job_not_running() -> None:
    engine, _ = make_engine()
    job = running(engine, training("nlp"))
    engine.update_queue("nlp-train", {"preemptible": False}, at(1), "ops-admin")
    result = engine.apply_action(Action(ActionKind.PREEMPT, "p1", job.job_id, "ops"), at(2))
    assert (result.outcome, result.reason) == (Outcome.REFUSED, "queue nlp-train is not preemptible")
    engine.finish(job.job_id, at(3))
    late = engine.apply_action(reclaim(job.job_id), at(4))
    assert (late.outcome, late.reason) == (Outcome.REFUSED, f"job {job.job_id} is COMPLETED, not running")
    assert engine.apply_action(reclaim("j-nope", key="x"), at(4)).reason == "no job j-nope"


def test_a_dry_run_reports_and_changes_nothing() -> None:
    engine, sink = make_engine()
    job = running(engine, training())
    before = engine.state_dict()
    events = list(sink.events)
    result = engine.apply_action(reclaim(job.job_id, dry_run=True), at(5))
    assert result.outcome == Outcome.DRY_RUN and result.reason == "dry run: would apply: idle 2 h (policy idle v1)"
    assert result.effects["state"] == "CANCELLED"
    after = engine.state_dict()
    for state in (before, after):
        state.pop("counters")
    assert after == before and sink.events == events and job.state == JobState.RUNNING
    assert sink.audits[-1]["decision"] == "dry_run"
    refused = engine.apply_action(Action(ActionKind.CAP_RUNTIME, "c", job.job_id, "bot", dry_run=True), at(5))
    assert refused.outcome == Outcome.REFUSED and refused.reason.startswith("dry run: ")
    # the dry run is not remembered: the real action with the same key applies
    assert engine.apply_action(reclaim(job.job_id), at(6)).outcome == Outcome.APPLIED


def test_a_quota_change_is_only_a_proposal_until_an_admin_approves_it() -> None:
    engine, sink = make_engine()
    proposal = Action(ActionKind.QUOTA_CHANGE, "quota/v1:nlp-train:H100", "nlp-train", "governance-bot",
                      reason="nlp waits 10 h for H100", quota={"H100": 6})
    result = engine.apply_action(proposal, at(1))
    assert result.outcome == Outcome.PROPOSED and result.proposal_id == "qp-000001"
    assert engine.quota("nlp-train") == {"H100": 4.0}
    again = engine.apply_action(proposal, at(2))
    assert again.outcome == Outcome.ALREADY_DONE and again.proposal_id == "qp-000001"
    approved = engine.approve("qp-000001", at(3), "maria")
    assert approved.outcome == Outcome.APPLIED and engine.quota("nlp-train") == {"H100": 6.0}
    assert engine.approve("qp-000001", at(4), "maria").outcome == Outcome.ALREADY_DONE
    assert engine.approve("qp-000099", at(4), "maria").outcome == Outcome.REFUSED
    trail = [(a["action"], a["decision"], a.get("request_id")) for a in sink.audits]
    assert trail == [
        ("enforcement.quota_proposal", "proposed", "qp-000001"),
        ("enforcement.quota_proposal", "already_done", "act-000002"),
        ("approval.grant", "approved", "qp-000001"),
        ("quota.update", "applied", "qp-000001"),
        ("approval.grant", "already_done", "qp-000001"),
        ("approval.grant", "refused", "qp-000099"),
    ]
    assert sink.audits[3]["before"] == {"quota": {"H100": 4.0}} and sink.audits[3]["after"] == {"quota": {"H100": 6.0}}
    assert sink.audits[2]["actor"] == "maria" and sink.audits[2]["actor_role"] == "admin"


def test_a_proposal_beyond_capacity_is_refused() -> None:
    engine, _ = make_engine()
    too_much = Action(ActionKind.QUOTA_CHANGE, "q", "nlp-train", "bot", quota={"H100": 9})
    result = engine.apply_action(too_much, at(1))
    assert result.outcome == Outcome.REFUSED
    assert result.reason == "quotas for H100 would add up to 15 GPUs; the pool has 12"


def test_queue_changes_are_audited_and_invalid_ones_refused() -> None:
    engine, sink = make_engine()
    queue = engine.update_queue("vision-train", {"priority": 70, "max_runtime_s": 3600}, T0, "ops-admin",
                                reason="OPS-12")
    assert queue.priority == 70 and engine.queues["vision-train"] is queue
    record = sink.audits[-1]
    assert (record["action"], record["decision"], record["reason"]) == ("queue.update", "applied", "OPS-12")
    assert record["before"] == {"priority": 50, "max_runtime_s": 86400}
    assert record["after"] == {"priority": 70, "max_runtime_s": 3600}
    with pytest.raises(ValueError, match="priority is -1"):
        engine.update_queue("vision-train", {"priority": -1}, T0, "ops-admin")
    with pytest.raises(ValueError, match="cannot be changed"):
        engine.update_queue("vision-train", {"tenant": "nlp"}, T0, "ops-admin")
    assert [a["decision"] for a in sink.audits[-2:]] == ["refused", "refused"]
    with pytest.raises(KeyError):
        engine.update_queue("nope", {"priority": 1}, T0, "ops-admin")
