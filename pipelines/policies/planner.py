"""From findings to decisions: which step of which finding is due now, and what happens to it.

A policy's steps escalate (remind, then after a grace reclaim or preempt). `plan` looks at each
finding, asks the history which of its steps were decided already, and decides the next one when
it is due: the first step `after_s` after the finding was detected, each later one `after_s` after
the previous step's decision. Everything it decides is a `PlannedAction` with a status:

- DROPPED: the finding no longer holds when its step is due (the job ended during the grace
  period, or it became busy again); recorded once, and the finding is closed;
- RECOMMENDED: advice (a right-size) recorded; partial idle (some of the job's GPUs busy) gets a
  recommendation where its policy would reclaim or preempt, since that would kill the busy GPUs' work;
- EXEMPT: production inference (template inference) and allow-listed work are never reclaimed,
  preempted or capped automatically; reminders still go;
- SHADOW: the policy is in shadow mode, nothing reaches the engine;
- RATE_LIMITED: over the hourly reclaim limit (per tenant or in total); not counted as decided,
  so the same step is planned again at the next call and goes out once the hour allows;
- QUEUED: to be delivered by the outbox.

gpu_health findings (pipelines/policies/health.py) drain a node or GPU and later undrain it: the
drain is rate-limited on its own (rate_limits.drains_per_hour, nodes and GPUs together), and the
undrain is the finding's next step, due healthy_hours after the later of the drain's decision and
the last fault (the finding's evidence), and only with telemetry in that period's last hour. The undrain is
for a finding that stopped holding, so it is never dropped for that; until it is due nothing is
recorded for it, and a fault in the meantime moves its due time.

The plan is a pure function of (findings, catalog, history, now): the same inputs give the same
actions with the same idempotency keys (`action_key`), so re-planning after a crash is harmless.
"""
from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import polars as pl

from allocator.records import rfc3339
from pipelines.clock import duration_text, parse_utc
from pipelines.contracts import DecisionStatus, Mode, PolicyKind, StepAction
from pipelines.policies.model import PlannedAction, RateLimits, Rule, Step, action_key

# Actions that take GPUs away or end work: exemptions and the rate limit apply to them.
ENFORCING = frozenset({StepAction.RECLAIM, StepAction.PREEMPT, StepAction.CAP_RUNTIME})
RATE_LIMITED_ACTIONS = frozenset({StepAction.RECLAIM, StepAction.PREEMPT})
DRAIN_ACTIONS = frozenset({StepAction.DRAIN})  # counted against rate_limits.drains_per_hour
# An undrain needs telemetry in the healthy period's last hour (the health frame's telemetry rows are hourly).
SEEN_SLACK = dt.timedelta(hours=1)
PROTECTED_TEMPLATES = frozenset({"inference"})
RATE_WINDOW = dt.timedelta(hours=1)
# How far back an earlier decision is looked for when a finding is no longer reported.
OPEN_FINDING_LOOKBACK = dt.timedelta(days=2)
# The finding's fields copied into PlannedAction.evidence: the decision log reads them from there.
FINDING_FIELDS = (
    "detected_at", "window_start_at", "window_end_at", "gpus_flagged", "gpus_held", "gpu_hours",
    "recommendation", "metric", "observed", "threshold", "template", "scope",
    "user_name",  # the owner a reminder goes to (pipelines/notify/)
)


class PlanningCatalog(Protocol):
    """What the planner needs of `pipelines.policies.catalog.PolicyCatalog`."""

    rate_limits: RateLimits

    def rule(self, policy: str, *, queue: str | None = None, template: str | None = None) -> Rule: ...

    def exemption_for(self, policy: str, tenant: str, queue: str | None, job_id: str | None,
                      now: dt.datetime) -> Any: ...


@dataclass(frozen=True)
class DeliveredStep:
    """A step already decided for a finding, as the history keeps it."""

    step_index: int
    action: str
    decided_at: dt.datetime
    status: DecisionStatus
    outcome: str | None = None
    answered_at: dt.datetime | None = None  # when the engine answered it (None: not yet)


class ActionHistory(Protocol):
    """What was decided before: the outbox (pipelines/governance/outbox.py); tests keep one in memory
    (tests/policies/history.py)."""

    def steps(self, finding_id: str) -> list[DeliveredStep]:
        """The finding's recorded steps by step_index (rate-limited ones included, with that status)."""
        ...

    def steps_of(self, finding_ids: Iterable[str]) -> dict[str, list[DeliveredStep]]:
        """`steps` of many findings at once (a plan reads its findings' steps in one go): finding_id ->
        its steps, absent when it has none."""
        ...

    def reclaims_since(self, since: dt.datetime) -> list[str]:
        """The tenant of every reclaim or preempt queued or answered since `since` (one entry each)."""
        ...

    def drains_since(self, since: dt.datetime) -> int:
        """Drains queued or answered since `since`."""
        ...

    def open_findings(self, since: dt.datetime) -> list[PlannedAction]:
        """The latest decided step of each finding decided since `since` and not dropped."""
        ...


# --- words -----------------------------------------------------------------------------------


def _number(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.1f}".removesuffix(".0") + "%"


def _window_param(rule: Rule) -> float | None:
    for key, scale in (("window_s", 1), ("window_min", 60), ("window_minutes", 60)):
        value = rule.params.get(key)
        if isinstance(value, int | float):
            return value * scale
    return None


def finding_text(finding: dict, rule: Rule) -> str:
    """What was seen, in words with numbers."""
    metric, observed, threshold = finding["metric"], finding["observed"], finding["threshold"]
    if metric in ("hardware_fault_minutes", "faulty_gpus"):
        what = ("GPUs with repeated hardware faults" if metric == "faulty_gpus"
                else f"GPU {finding['job_id']}: minutes with a hardware fault")
        return (f"{what}: {_number(observed)} (threshold {_number(threshold)} within "
                f"{_number(rule.params.get('window_hours', 0))} h), last at {finding['window_end_at']:%Y-%m-%d %H:%M} UTC")
    span = (finding["window_end_at"] - finding["window_start_at"]).total_seconds()
    gpus = f"on {finding['gpus_flagged']} of {finding['gpus_held']} GPUs"
    window = _window_param(rule)
    limits = f"threshold {_percent(threshold)}" + (f", window {duration_text(window)}" if window else "")
    if metric == "activity":
        return f"GPU activity {_percent(observed)} over the last {duration_text(span)} {gpus} ({limits})"
    if metric.endswith("_s"):
        what = metric.removesuffix("_s").replace("_", " ")
        return f"{what} {duration_text(observed)}, over the limit of {duration_text(threshold)} ({gpus})"
    what = metric.replace("_", " ")
    return (f"{what} {_number(observed)} over {duration_text(span)} "
            f"(threshold {_number(threshold)}) {gpus}")


INSTEAD_TEXT = {  # why the step a reminder announces will not act (`_following`'s `instead`)
    "partial": "some of the job's GPUs are busy",
    "protected": "production inference is never acted on automatically",
    "exempt": "the job is allow-listed until {exempt_until}",
}


def _step_text(action: StepAction, index: int, steps: tuple[Step, ...], finding: dict,
               runtime_s: int | None, following_step: dict | None = None) -> str:
    following = steps[index + 1] if index + 1 < len(steps) else None
    if action == StepAction.REMIND:
        if following is not None and following.action in ENFORCING:
            verb = following.action.value.replace("_", " ")
            instead = (following_step or {}).get("instead")
            if instead:  # never announce what will not happen
                return f"no {verb} will follow: {INSTEAD_TEXT[instead].format(**following_step)}"
            return f"{verb} in {duration_text(following.after_s)} unless it is used"
        return "reminder"
    if action == StepAction.RECOMMEND:
        return f"recommendation: {finding['recommendation'] or 'right-size the request'}"
    if action == StepAction.CAP_RUNTIME:
        return f"run time capped at {duration_text(runtime_s or 0)}"
    if action == StepAction.DRAIN:
        return f"{finding['job_id']} drained: no new work is placed there, running work keeps running"
    if action == StepAction.UNDRAIN:
        return f"{finding['job_id']} undrained: no hardware fault since, with telemetry, so it takes work again"
    verb = {StepAction.RECLAIM: "reclaimed", StepAction.PREEMPT: "preempted"}[action]
    if index > 0:
        return f"{verb} {duration_text(steps[index].after_s)} after the previous step"
    return verb


# --- planning --------------------------------------------------------------------------------


def _evidence(finding: dict) -> dict:
    """The finding's evidence object plus the fields the decision log carries at the top level."""
    try:
        parsed = json.loads(finding["evidence"]) if finding["evidence"] else {}
    except json.JSONDecodeError:
        parsed = {"evidence_text": finding["evidence"]}
    out = parsed if isinstance(parsed, dict) else {"evidence": parsed}
    for name in FINDING_FIELDS:
        value = finding.get(name)
        out[name] = rfc3339(value) if isinstance(value, dt.datetime) else value
    return out


def _runtime_cap(finding: dict, rule: Rule) -> int | None:
    """The new cap: the finding's own (overrun: cap_factor x the declared time, within the queue's
    maximum), else a fixed cap_runtime_s, else the threshold the run passed."""
    try:
        evidence = json.loads(finding["evidence"]) if finding["evidence"] else {}
    except json.JSONDecodeError:
        evidence = {}
    if isinstance(evidence, dict) and isinstance(evidence.get("runtime_cap_s"), int | float):
        return max(int(evidence["runtime_cap_s"]), 1)
    cap = rule.params.get("cap_runtime_s")
    if isinstance(cap, int | float):
        return int(cap)
    if finding["metric"].endswith("runtime_s") and finding["threshold"]:
        return max(int(finding["threshold"]), 1)
    return None


class _Budget:
    """Reclaims and preempts left this hour, per tenant and in total, and drains: read from the history
    when a step first needs them (most plans decide no rate-limited step, and the history does not change
    while a plan is made)."""

    def __init__(self, limits: RateLimits, history: ActionHistory, since: dt.datetime):
        self.limits, self.history, self.since = limits, history, since
        self._per_tenant: Counter | None = None
        self._drains: int | None = None

    @property
    def per_tenant(self) -> Counter:
        if self._per_tenant is None:
            self._per_tenant = Counter(self.history.reclaims_since(self.since))
        return self._per_tenant

    @property
    def drains(self) -> int:
        if self._drains is None:
            self._drains = self.history.drains_since(self.since)
        return self._drains

    def refusal(self, tenant: str) -> str | None:
        total = sum(self.per_tenant.values())
        if total >= self.limits.reclaims_per_hour_total:
            return (f"{total} reclaims or preemptions in the last hour in total "
                    f"(limit {self.limits.reclaims_per_hour_total}/h); planned again at the next evaluation")
        used = self.per_tenant[tenant]
        if used >= self.limits.reclaims_per_hour_per_tenant:
            return (f"{used} reclaims or preemptions for tenant {tenant} in the last hour "
                    f"(limit {self.limits.reclaims_per_hour_per_tenant}/h); planned again at the next evaluation")
        return None

    def spend(self, tenant: str) -> None:
        self.per_tenant[tenant] += 1

    def drain_refusal(self) -> str | None:
        if self.drains >= self.limits.drains_per_hour:
            return (f"{self.drains} drains in the last hour (limit {self.limits.drains_per_hour}/h); "
                    "planned again at the next evaluation")
        return None

    def spend_drain(self) -> None:
        self._drains = self.drains + 1


def _next_step(decided_steps: dict[str, list[DeliveredStep]], finding_id: str, steps: tuple[Step, ...],
               detected_at: dt.datetime) -> tuple[int, dt.datetime | None] | None:
    """(index, due time) of the finding's next step, the time None while it waits for its reminder to
    go out; None when the finding is closed or has no step left."""
    decided = [s for s in decided_steps.get(finding_id, []) if s.status != DecisionStatus.RATE_LIMITED]
    if any(s.status == DecisionStatus.DROPPED for s in decided):
        return None
    index = max((s.step_index for s in decided), default=-1) + 1
    if index >= len(steps):
        return None
    if index == 0:
        return 0, detected_at + dt.timedelta(seconds=steps[0].after_s)
    previous = max(decided, key=lambda s: s.step_index)
    since = previous.decided_at
    if previous.action == StepAction.REMIND.value:
        # The owner is promised `after_s` from the reminder: while it has not gone out (mail down, the
        # engine away) nothing follows it, and once it has, the next step counts from its delivery.
        if previous.status == DecisionStatus.QUEUED:
            return index, None
        if previous.answered_at is not None:
            since = max(since, previous.answered_at)
    return index, since + dt.timedelta(seconds=steps[index].after_s)


def _undrain_due(finding: dict, rule: Rule, due: tuple[int, dt.datetime]) -> tuple[int, dt.datetime] | None:
    """The undrain of a gpu_health finding: healthy_hours after the later of the drain's decision
    (`due`'s time, the undrain's after_s being 0) and the last fault; None while no telemetry was
    seen in the period's last hour (a silent GPU is not a healthy one; telemetry rows are hourly)."""
    evidence = json.loads(finding["evidence"] or "{}")
    last_fault = parse_utc(evidence["last_fault_at"])
    last_seen = parse_utc(evidence["last_seen_at"])
    at = max(due[1], last_fault) + dt.timedelta(hours=float(rule.params["healthy_hours"]))
    return (due[0], at) if last_seen >= at - SEEN_SLACK else None


def _following(finding: dict, rule: Rule, index: int, catalog: PlanningCatalog, now: dt.datetime) -> dict:
    """What a reminder announces: the step after it (`action`, due `after_s` after the reminder's decision)
    as it would be decided now if the finding still holds then, and why it would not act (`instead`:
    partial idle, production inference, an exemption), so the message never threatens what will not happen."""
    step = rule.steps[index]
    out: dict[str, Any] = {"action": step.action.value, "after_s": step.after_s}
    if step.action not in ENFORCING:
        return out
    if finding["gpus_flagged"] < finding["gpus_held"] and step.action in (StepAction.RECLAIM, StepAction.PREEMPT):
        out["instead"] = "partial"
    elif finding.get("template") in PROTECTED_TEMPLATES:
        out["instead"] = "protected"
    elif (exemption := catalog.exemption_for(rule.policy, finding["tenant"], finding["queue"], finding["job_id"],
                                             now)) is not None:
        out["instead"] = "exempt"
        out["exempt_until"] = rfc3339(exemption.expires_at)
    return out


def _decide(finding: dict, rule: Rule, index: int, catalog: PlanningCatalog, now: dt.datetime,
            budget: _Budget, holds: str | None) -> PlannedAction:
    """One step of one finding: its action, status and reason. `holds`: why it no longer holds, or None."""
    step = rule.steps[index]
    action = step.action
    partial = finding["gpus_flagged"] < finding["gpus_held"]
    if partial and action in (StepAction.RECLAIM, StepAction.PREEMPT):
        action = StepAction.RECOMMEND
    runtime_s = _runtime_cap(finding, rule) if action == StepAction.CAP_RUNTIME else None
    following = (_following(finding, rule, index + 1, catalog, now)
                 if action == StepAction.REMIND and index + 1 < len(rule.steps) else None)
    text = f"{finding_text(finding, rule)}; {_step_text(action, index, rule.steps, finding, runtime_s, following)}"
    status, status_reason = DecisionStatus.QUEUED, ""
    if partial and action == StepAction.RECOMMEND and step.action != StepAction.RECOMMEND:
        status_reason = (f"{finding['gpus_held'] - finding['gpus_flagged']} of the job's {finding['gpus_held']} "
                         f"GPUs are busy: a {step.action.value} would stop their work")
    if holds is not None and action != StepAction.RECOMMEND:
        status, status_reason = DecisionStatus.DROPPED, holds
    elif action == StepAction.RECOMMEND:
        status = DecisionStatus.RECOMMENDED
    elif action in ENFORCING and finding.get("template") in PROTECTED_TEMPLATES:
        status = DecisionStatus.EXEMPT
        status_reason = f"production inference is never {action.value.replace('_', ' ')}ed automatically"
    elif action in ENFORCING and (exemption := catalog.exemption_for(
            rule.policy, finding["tenant"], finding["queue"], finding["job_id"], now)) is not None:
        status = DecisionStatus.EXEMPT
        status_reason = (f"allow-listed for tenant {exemption.tenant} until "
                         f"{exemption.expires_at:%Y-%m-%d %H:%M} UTC: {exemption.reason}")
    elif rule.mode == Mode.SHADOW:
        status, status_reason = DecisionStatus.SHADOW, f"policy {rule.policy} {rule.version} is in shadow mode"
    elif action in RATE_LIMITED_ACTIONS:
        refusal = budget.refusal(finding["tenant"])
        if refusal is not None:
            status, status_reason = DecisionStatus.RATE_LIMITED, refusal
        else:
            budget.spend(finding["tenant"])
    elif action in DRAIN_ACTIONS:
        refusal = budget.drain_refusal()
        if refusal is not None:
            status, status_reason = DecisionStatus.RATE_LIMITED, refusal
        else:
            budget.spend_drain()
    evidence = _evidence(finding)
    if following is not None:
        evidence["next_step"] = following
    return PlannedAction(
        idempotency_key=action_key(finding["finding_id"], index, action.value),
        finding_id=finding["finding_id"],
        policy=finding["policy"],
        policy_version=finding["policy_version"],
        kind=PolicyKind(finding["kind"]),
        mode=rule.mode,
        step_index=index,
        action=action,
        engine=finding["source"],
        job_id=finding["job_id"],
        attempt=finding["attempt"],
        tenant=finding["tenant"],
        queue=finding["queue"],
        reason=text,
        evidence=evidence,
        status=status,
        status_reason=status_reason,
        runtime_s=runtime_s,
    )


def _vanished(previous: PlannedAction, rule: Rule, index: int) -> PlannedAction:
    """The next step of a finding that is no longer reported: dropped."""
    step = rule.steps[index]
    return replace(
        previous,
        idempotency_key=action_key(previous.finding_id, index, step.action.value),
        step_index=index,
        action=step.action,
        status=DecisionStatus.DROPPED,
        status_reason=f"no longer found when the {step.action.value.replace('_', ' ')} was due: "
                      "the job ended or its GPUs are in use again",
        runtime_s=None,
    )


def _evidence_time(previous: PlannedAction, name: str) -> dt.datetime | None:
    value = previous.evidence.get(name)
    return parse_utc(value) if value else None


def _continued(findings: pl.DataFrame, open_before: list[PlannedAction]) -> pl.DataFrame:
    """Findings that continue an open one keep its id and detection time.

    An evaluation sees only its lookback: when an attempt has been idle for longer, the window it
    reports starts at the lookback's edge and moves every minute, and so would its finding id. A
    finding of the same policy version and attempt whose window starts before the open finding's window
    ended is the same episode; one that starts later (the work was busy in between) is a new one."""
    if findings.is_empty() or not open_before:
        return findings
    # keyed on the version too: a new version (e.g. a shadow policy switched to enforce) starts afresh
    latest: dict[tuple[str, str, str, str, int], PlannedAction] = {}
    for previous in open_before:
        latest[(previous.policy, previous.policy_version, previous.engine, previous.job_id, previous.attempt)] = previous
    rows, changed = [], False
    for finding in findings.iter_rows(named=True):
        previous = latest.get((finding["policy"], finding["policy_version"], finding["source"], finding["job_id"],
                               finding["attempt"]))
        if previous is not None and previous.finding_id != finding["finding_id"]:
            ended = _evidence_time(previous, "window_end_at")
            detected = _evidence_time(previous, "detected_at")
            if ended is not None and detected is not None and finding["window_start_at"] <= ended:
                finding = {**finding, "finding_id": previous.finding_id, "detected_at": detected,
                           "window_start_at": min(finding["window_start_at"],
                                                  _evidence_time(previous, "window_start_at") or ended)}
                changed = True
        rows.append(finding)
    return pl.DataFrame(rows, schema=findings.schema) if changed else findings


def next_steps(findings: pl.DataFrame, catalog: PlanningCatalog, history: ActionHistory,
               now: dt.datetime) -> dict[tuple[str, str, str, int], tuple[StepAction, dt.datetime | None]]:
    """(policy, engine, job_id, attempt) -> each finding's next step and when it is due, as `plan` would
    time it (None: it waits for its reminder to go out), for findings with a step left: what a dry run
    announces. Findings continue open ones as in `plan`."""
    rows = _continued(findings, history.open_findings(now - OPEN_FINDING_LOOKBACK))
    decided = history.steps_of(dict.fromkeys(rows["finding_id"]))
    out: dict[tuple[str, str, str, int], tuple[StepAction, dt.datetime | None]] = {}
    for finding in rows.iter_rows(named=True):
        rule = catalog.rule(finding["policy"], queue=finding["queue"], template=finding["template"])
        key = (finding["policy"], finding["source"], finding["job_id"], finding["attempt"])
        due = _next_step(decided, finding["finding_id"], rule.steps, finding["detected_at"])
        if due is not None:
            out[key] = (rule.steps[due[0]].action, due[1])
    return out


def plan(
    findings: pl.DataFrame,
    catalog: PlanningCatalog,
    history: ActionHistory,
    now: dt.datetime,
    jobs_ended: Collection[tuple[str, str, int]] | None = None,
    evaluated_kinds: Collection[str] | None = None,
) -> list[PlannedAction]:
    """The steps due now, oldest finding first.

    `jobs_ended`: (engine, job_id, attempt) known to have ended since the findings' data (e.g.
    absent from that engine's running jobs): their findings no longer hold. `evaluated_kinds`: the policy kinds
    these findings cover; a finding of one of them decided before but absent now no longer holds
    (None: absent findings are left alone, only those reported not ongoing are dropped).
    """
    ended = set(jobs_ended or ())
    budget = _Budget(catalog.rate_limits, history, now - RATE_WINDOW)
    out: list[PlannedAction] = []
    open_before = history.open_findings(now - OPEN_FINDING_LOOKBACK)
    rows = _continued(findings, open_before)
    if rows.height > 1:  # one row is its own order (a simulated look's findings are mostly one)
        rows = rows.sort(["detected_at", "finding_id"]).unique("finding_id", keep="last", maintain_order=True)
    # every step this plan needs, in one read of the history
    decided = history.steps_of(dict.fromkeys([*rows["finding_id"], *(p.finding_id for p in open_before)]))
    for finding in rows.iter_rows(named=True):
        rule = catalog.rule(finding["policy"], queue=finding["queue"], template=finding["template"])
        due = _next_step(decided, finding["finding_id"], rule.steps, finding["detected_at"])
        if due is not None and rule.steps[due[0]].action == StepAction.UNDRAIN:
            due = _undrain_due(finding, rule, due)
        if due is None or due[1] is None or now < due[1]:
            continue
        holds = None
        undrain = rule.steps[due[0]].action == StepAction.UNDRAIN  # for a finding that stopped holding
        if not undrain and (finding["source"], finding["job_id"], finding["attempt"]) in ended:
            holds = f"job {finding['job_id']} attempt {finding['attempt']} ended before the step was due"
        elif not undrain and not finding["is_ongoing"]:
            holds = (f"the condition stopped at {finding['window_end_at']:%Y-%m-%d %H:%M} UTC before the step "
                     "was due (the job ended or its GPUs are in use again)")
        out.append(_decide(finding, rule, due[0], catalog, now, budget, holds))
    if evaluated_kinds is not None:
        reported = set(rows["finding_id"].to_list())
        kinds = {str(k) for k in evaluated_kinds}
        for previous in open_before:
            if previous.finding_id in reported or previous.kind.value not in kinds:
                continue
            rule = catalog.rule(previous.policy, queue=previous.queue, template=previous.evidence.get("template"))
            detected = parse_utc(previous.evidence.get("detected_at"))
            due = _next_step(decided, previous.finding_id, rule.steps, detected)
            if due is not None and due[1] is not None and now >= due[1]:
                out.append(_vanished(previous, rule, due[0]))
    return out
