"""The planner: step timing, findings that stop holding, exemptions, rate limits, modes, determinism."""
from __future__ import annotations

import dataclasses
import datetime as dt

from pipelines.contracts import DecisionStatus, Mode, StepAction
from pipelines.policies.model import Exemption, RateLimits, action_key
from pipelines.policies.planner import plan
from tests.governance.conftest import GRACE_S, T0, at, catalog, finding, findings
from tests.policies.history import MemoryHistory


def run(history: MemoryHistory, frame, now, cat=None, **kwargs):
    decided = plan(frame, cat or catalog(), history, now, **kwargs)
    history.record(decided, now)
    return decided


def test_reminder_first_then_reclaim_exactly_at_the_grace_and_not_a_second_before():
    history, frame = MemoryHistory(), findings(finding())
    [remind] = run(history, frame, T0)
    assert (remind.action, remind.status, remind.step_index) == (StepAction.REMIND, DecisionStatus.QUEUED, 0)
    assert remind.reason == ("GPU activity 0.8% over the last 42 min on 8 of 8 GPUs (threshold 5%, window 30 min); "
                             "reclaim in 15 min unless it is used")
    assert remind.idempotency_key == action_key(remind.finding_id, 0, "remind")
    assert remind.evidence["idle_minutes"] == 42 and remind.evidence["gpus_held"] == 8
    assert remind.evidence["detected_at"] == "2026-11-02T09:00:00Z"
    assert run(history, frame, at(1)) == []  # the reminder is not sent again
    assert run(history, frame, at(GRACE_S - 1)) == []
    [reclaim] = run(history, frame, at(GRACE_S))
    assert (reclaim.action, reclaim.status, reclaim.step_index) == (StepAction.RECLAIM, DecisionStatus.QUEUED, 1)
    assert reclaim.reason.endswith("reclaimed 15 min after the previous step")
    assert run(history, frame, at(GRACE_S + 3600)) == []  # no step left


def test_nothing_follows_a_reminder_that_has_not_gone_out():
    history, frame = MemoryHistory(answered=False), findings(finding())
    assert [a.action for a in run(history, frame, T0)] == [StepAction.REMIND]
    assert run(history, frame, at(GRACE_S)) == []
    assert run(history, frame, at(GRACE_S * 10)) == []  # however long the mail server is away


def test_the_first_step_waits_for_its_own_delay_after_detection():
    cat = catalog()
    policy = cat.policies["idle-allocation"]
    steps = (dataclasses.replace(policy.steps[0], after_s=60), policy.steps[1])
    cat = dataclasses.replace(cat, policies={**cat.policies, "idle-allocation": dataclasses.replace(policy, steps=steps)})
    history, frame = MemoryHistory(), findings(finding())
    assert run(history, frame, at(59), cat) == []
    assert [a.action for a in run(history, frame, at(60), cat)] == [StepAction.REMIND]


def test_the_same_inputs_give_the_same_plan():
    frame = findings(finding("j-2"), finding("j-1", detected_at=at(-60)))
    first, second = plan(frame, catalog(), MemoryHistory(), T0), plan(frame, catalog(), MemoryHistory(), T0)
    assert first == second
    assert [a.job_id for a in first] == ["j-1", "j-2"]  # oldest finding first


def test_job_ending_during_the_grace_drops_the_reclaim_once():
    history = MemoryHistory()
    run(history, findings(finding()), T0)
    ended = findings(finding(is_ongoing=False))
    assert run(history, ended, at(GRACE_S - 1)) == []  # nothing is due yet
    [dropped] = run(history, ended, at(GRACE_S))
    assert (dropped.action, dropped.status) == (StepAction.RECLAIM, DecisionStatus.DROPPED)
    assert "stopped at 2026-11-02 09:00 UTC" in dropped.status_reason
    assert run(history, ended, at(GRACE_S + 60)) == []  # recorded once, finding closed
    assert run(history, findings(finding()), at(GRACE_S + 120)) == []  # even if reported again


def test_an_ended_job_named_by_the_caller_drops_the_step():
    history = MemoryHistory()
    run(history, findings(finding()), T0)
    [dropped] = run(history, findings(finding()), at(GRACE_S), jobs_ended={("allocator", "j-1", 1)})
    assert dropped.status == DecisionStatus.DROPPED
    assert dropped.status_reason == "job j-1 attempt 1 ended before the step was due"


def test_a_finding_no_longer_reported_is_dropped_when_its_kind_was_evaluated():
    history = MemoryHistory()
    run(history, findings(finding()), T0)
    empty = findings()
    assert run(history, empty, at(GRACE_S)) == []  # kinds not named: absent findings left alone
    assert run(history, empty, at(GRACE_S), evaluated_kinds={"zombie"}) == []
    [dropped] = run(history, empty, at(GRACE_S), evaluated_kinds={"idle_allocation"})
    assert (dropped.action, dropped.status, dropped.job_id) == (StepAction.RECLAIM, DecisionStatus.DROPPED, "j-1")
    assert dropped.idempotency_key == action_key(dropped.finding_id, 1, "reclaim")
    assert run(history, empty, at(GRACE_S + 60), evaluated_kinds={"idle_allocation"}) == []


def test_busy_again_before_the_first_step_drops_it():
    [dropped] = plan(findings(finding(is_ongoing=False)), catalog(), MemoryHistory(), T0)
    assert (dropped.action, dropped.status) == (StepAction.REMIND, DecisionStatus.DROPPED)


def test_partial_idle_never_reclaims_it_recommends():
    history = MemoryHistory()
    frame = findings(finding(gpus_flagged=7, gpus_held=8, recommendation="1 x H100 instead of 8 x H100"))
    [remind] = run(history, frame, T0)
    assert remind.action == StepAction.REMIND and "on 7 of 8 GPUs" in remind.reason
    assert remind.reason.endswith("no reclaim will follow: some of the job's GPUs are busy")  # nothing threatened
    [advice] = run(history, frame, at(GRACE_S))
    assert (advice.action, advice.status) == (StepAction.RECOMMEND, DecisionStatus.RECOMMENDED)
    assert advice.reason.endswith("recommendation: 1 x H100 instead of 8 x H100")
    assert advice.status_reason == "1 of the job's 8 GPUs are busy: a reclaim would stop their work"


def test_production_inference_is_reminded_but_never_reclaimed():
    history = MemoryHistory()
    frame = findings(finding(template="inference", queue="platform-serve"))
    [remind] = run(history, frame, T0)
    assert remind.status == DecisionStatus.QUEUED
    assert remind.reason.endswith("no reclaim will follow: production inference is never acted on automatically")
    [exempt] = run(history, frame, at(GRACE_S))
    assert (exempt.action, exempt.status) == (StepAction.RECLAIM, DecisionStatus.EXEMPT)
    assert exempt.status_reason == "production inference is never reclaimed automatically"
    assert run(history, frame, at(GRACE_S + 60)) == []


def test_allow_list_applies_until_it_expires():
    entry = Exemption(tenant="vision", reason="benchmark holds GPUs between runs (GPU-118)",
                      expires_at=at(GRACE_S + 600), policy="idle-allocation")
    cat = catalog(exemptions=(entry,))
    history = MemoryHistory()
    [remind] = run(history, findings(finding("j-1")), T0, cat)
    assert remind.reason.endswith("no reclaim will follow: the job is allow-listed until 2026-11-02T09:25:00Z")
    [exempt] = run(history, findings(finding("j-1")), at(GRACE_S), cat)
    assert exempt.status == DecisionStatus.EXEMPT
    assert exempt.status_reason == ("allow-listed for tenant vision until 2026-11-02 09:25 UTC: "
                                    "benchmark holds GPUs between runs (GPU-118)")
    # a finding whose reclaim falls due after the entry expired is reclaimed
    late = finding("j-2", detected_at=at(GRACE_S), window_end_at=at(GRACE_S))
    run(history, findings(late), at(GRACE_S), cat)
    [reclaim] = run(history, findings(late), at(2 * GRACE_S), cat)
    assert (reclaim.job_id, reclaim.status) == ("j-2", DecisionStatus.QUEUED)


def test_rate_limit_per_tenant_defers_to_the_next_hour():
    cat = catalog(rate_limits=RateLimits(reclaims_per_hour_total=10, reclaims_per_hour_per_tenant=2))
    history = MemoryHistory()
    frame = findings(*(finding(f"j-{i}", detected_at=at(i)) for i in range(3)),
                     finding("j-9", tenant="nlp", detected_at=at(9)))
    run(history, frame, at(10), cat)
    reclaims = run(history, frame, at(GRACE_S + 10), cat)
    assert [(a.job_id, a.status) for a in reclaims] == [
        ("j-0", DecisionStatus.QUEUED), ("j-1", DecisionStatus.QUEUED), ("j-2", DecisionStatus.RATE_LIMITED),
        ("j-9", DecisionStatus.QUEUED)]
    assert "2 reclaims or preemptions for tenant vision in the last hour (limit 2/h)" in reclaims[2].status_reason
    # still limited within the hour, with the same key each time
    [again] = run(history, frame, at(GRACE_S + 3599 + 10), cat)
    assert (again.status, again.idempotency_key) == (DecisionStatus.RATE_LIMITED, reclaims[2].idempotency_key)
    # an hour after the first two, the deferred one goes out
    [later] = run(history, frame, at(GRACE_S + 3601 + 10), cat)
    assert (later.job_id, later.status) == ("j-2", DecisionStatus.QUEUED)
    assert run(history, frame, at(GRACE_S + 3700), cat) == []


def test_rate_limit_in_total_counts_what_this_call_planned():
    cat = catalog(rate_limits=RateLimits(reclaims_per_hour_total=2, reclaims_per_hour_per_tenant=5))
    history = MemoryHistory()
    frame = findings(*(finding(f"j-{i}", tenant=f"t{i}", detected_at=at(i)) for i in range(3)))
    run(history, frame, at(10), cat)
    statuses = [a.status for a in run(history, frame, at(GRACE_S + 10), cat)]
    assert statuses == [DecisionStatus.QUEUED, DecisionStatus.QUEUED, DecisionStatus.RATE_LIMITED]


def test_shadow_mode_records_what_would_be_done_and_sends_nothing():
    history, frame = MemoryHistory(), findings(finding())
    cat = catalog().with_mode(Mode.SHADOW)
    [remind] = run(history, frame, T0, cat)
    [reclaim] = run(history, frame, at(GRACE_S), cat)
    assert {remind.status, reclaim.status} == {DecisionStatus.SHADOW}
    assert reclaim.status_reason == "policy idle-allocation 1 is in shadow mode"
    assert history.reclaims_since(T0 - dt.timedelta(hours=1)) == []


def test_recommend_steps_are_recorded_even_for_finished_work():
    row = finding(policy="oversized", policy_version="2", kind="oversized", is_ongoing=False, metric="gpus_used",
                  observed=1.0, threshold=8.0, recommendation="1 x 3g.40gb instead of 8 x H100")
    [advice] = plan(findings(row), catalog(), MemoryHistory(), T0)
    assert (advice.action, advice.status) == (StepAction.RECOMMEND, DecisionStatus.RECOMMENDED)
    assert advice.reason == ("gpus used 1 over 42 min (threshold 8) on 8 of 8 GPUs; "
                             "recommendation: 1 x 3g.40gb instead of 8 x H100")


def test_a_window_cut_by_the_lookback_continues_its_finding_and_a_new_idle_spell_is_new():
    """Idle longer than the evaluation's lookback: the reported window starts at the lookback's edge
    and moves every minute; it is still the same finding (one reminder, then the reclaim)."""
    history = MemoryHistory()
    [remind] = run(history, findings(finding()), T0)
    later = at(GRACE_S)
    moved = finding(window_start_at=later - dt.timedelta(minutes=60), window_end_at=later, detected_at=later)
    assert moved["finding_id"] != remind.finding_id
    [reclaim] = run(history, findings(moved), later)
    assert (reclaim.action, reclaim.finding_id) == (StepAction.RECLAIM, remind.finding_id)
    # busy in between: a window starting after the open one ended is another spell, with its own reminder
    again = at(GRACE_S + 7200)
    fresh = finding(window_start_at=again - dt.timedelta(minutes=35), window_end_at=again, detected_at=again)
    [second] = run(history, findings(fresh), again)
    assert (second.action, second.step_index) == (StepAction.REMIND, 0) and second.finding_id != remind.finding_id
