"""The allocator's engine, pure and clock-free (every call takes `now`): the `Scheduler`
(`allocator.scheduler`, the scheduling rules) with enforcement actions, admin changes to queues
and state save/restore on top. Callers use `Engine`.

The engine keeps the pool's state in memory and writes every job event and every administrative
decision to its `RecordSink` (`allocator.records`). It never reads a clock and never sleeps; the
caller drives it: `submit`/`finish`/`cancel`/`apply_action`/`update_queue` change state, `tick(now)`
fires timers (`next_timer()` says when the next one is due) and `schedule(now)` admits and starts
what can run. Call `schedule(now)` after anything that may free capacity or add work.

Admission (`submit`) refuses a request that breaks a rule with `AdmissionError(rule, message)`;
the rules, and the checks of quota and queue changes, are in `allocator.admission`.

Enforcement (`apply_action`). Every action is audited (`enforcement.<kind>`, quota_change as
`enforcement.quota_proposal`) and answered with an `ActionResult`:
remind (audit only), reclaim (the job finishes CANCELLED, reason `reclaimed: <reason>`), preempt
(the preempt + requeue path, at once), cap_runtime (a shorter cap for the running attempt; if it
is already past, the job ends TIMEOUT now), quota_change (a proposal `qp-...`, applied by
`approve`), drain (a node `host` or a GPU `host/gpu` takes no new placements; what runs there
keeps running; audited with object kind node or gpu), undrain (it takes work again). Inference
is refused for reclaim, preempt and cap_runtime; preempt is refused for a non-preemptible queue;
drain is refused for a target the pool does not have or one already drained (the answer names
the key that drained it), undrain for a target that is not drained. A dry run reports `dry_run` (or `refused`) and changes nothing. An action
that was applied or proposed is remembered by its idempotency key: the same key again answers
`already_done` with the first answer's effects (a key reused for another action or target is
refused). A refused action is not remembered, so it can be retried once the reason is gone.

Checkpoint and artifact reports (`report_artifact`, rules in `allocator.artifacts`): each accepted
report becomes one `gpupool.artifact/v1` record (`ar-000000001`, ...) on the sink's `artifact`;
an ok checkpoint moves its attempt's `last_checkpoint_at` forward.

State. `state_dict()` returns a JSON-serialisable dict of everything needed to resume
(`allocator.state`); `Engine.from_state(pool, state, sink)` rebuilds an engine that behaves
identically from there on (timers and indexes are rebuilt from the jobs). `dirty_jobs` collects
the ids of jobs changed since the caller last cleared it, so a store can save only those
(`job_state(job_id)` gives the same dict as `state_dict()["jobs"]`).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from allocator import records
from allocator.admission import queue_changes, quota_problem
from allocator.artifacts import ArtifactReport, reported_attempt, track_attempt
from allocator.model import (
    NODE_ACTIONS,
    Action,
    ActionKind,
    ActionResult,
    Job,
    JobState,
    Outcome,
    PoolConfig,
    QueueSpec,
    drain_object_kind,
    drain_target,
)
from allocator.scheduler import Scheduler
from allocator.state import EngineState, job_state, queue_to_dict


@dataclass
class _Decision:
    """What an action would do; `apply` does it."""

    outcome: Outcome
    reason: str
    object_kind: str
    object_name: str
    object_namespace: str | None = None
    before: dict | None = None
    after: dict | None = None
    effects: dict = dataclasses.field(default_factory=dict)
    apply: object = None  # callable () -> dict of extra effects


# --- the engine ------------------------------------------------------------------------------


class Engine(Scheduler):
    """The pool's scheduler and enforcement point (see the module docstring)."""

    def __init__(self, pool: PoolConfig, sink: records.RecordSink) -> None:
        super().__init__(pool, sink)
        self._actions: dict[str, dict] = {}  # idempotency key -> the first answer
        self._proposals: dict[str, dict] = {}
        self._counters.setdefault("artifact", 0)

    def _emit(self, event_type: str, job: Job, now: dt.datetime, **fields: object) -> None:
        super()._emit(event_type, job, now, **fields)
        track_attempt(job, event_type, now)

    # --- checkpoint and artifact reports -------------------------------------------------

    def report_artifact(self, job_id: str, report: ArtifactReport, now: dt.datetime,
                        reported_by: str | None = None) -> dict:
        """Records a job's checkpoint, artifact or model version (`gpupool.artifact/v1`) and returns the
        record. KeyError for an unknown job; `ArtifactReportError` (422/409) for a refused report."""
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(f"no job {job_id}")
        attempt, log, written_at = reported_attempt(job, report, now)
        if report.kind == "checkpoint" and report.status == "ok" and (
                log.last_checkpoint_at is None or written_at > log.last_checkpoint_at):
            log.last_checkpoint_at = written_at
            self.dirty_jobs.add(job_id)
        record = records.artifact_record(
            f"ar-{self._next('artifact'):09d}", written_at, job_id, attempt, report.kind, report.status,
            location=report.location, size_bytes=report.size_bytes, training_step=report.training_step,
            model_name=report.model_name, model_version=report.model_version, reported_by=reported_by)
        self.sink.artifact(record)
        return record

    def proposals(self) -> dict[str, dict]:
        """Quota-change proposals by id (`qp-...`), proposed or approved."""
        return {pid: dict(p) for pid, p in self._proposals.items()}

    # --- enforcement ----------------------------------------------------------------------

    def _job_object(self, action: Action) -> tuple[Job | None, _Decision | None]:
        job = self.jobs.get(action.target)
        if job is None:
            return None, _Decision(Outcome.REFUSED, f"no job {action.target}", "job", action.target)
        if job.state != JobState.RUNNING:
            return job, _Decision(Outcome.REFUSED, f"job {job.job_id} is {job.state.value}, not running", "job",
                                  job.job_id, job.spec.tenant)
        return job, None

    def _reason(self, action: Action) -> str:
        text = action.reason or action.kind.value
        if action.policy:
            text += f" (policy {action.policy}" + (f" {action.policy_version})" if action.policy_version else ")")
        return text

    def _decide(self, action: Action, now: dt.datetime) -> _Decision:
        if action.kind == ActionKind.QUOTA_CHANGE:
            return self._decide_quota_change(action)
        if action.kind in NODE_ACTIONS:
            return self._decide_drain(action, now)
        job, refusal = self._job_object(action)
        if refusal is not None:
            return refusal
        running = {"state": job.state.value, "attempt": job.attempt, "slots": [s.slot_id for s in job.slots]}
        if action.evidence:
            running["evidence"] = action.evidence
        base = {"object_kind": "job", "object_name": job.job_id, "object_namespace": job.spec.tenant}
        reason = self._reason(action)
        if action.kind == ActionKind.REMIND:
            return _Decision(Outcome.APPLIED, reason, before=running, effects={"reminded": job.spec.user},
                             apply=dict, **base)
        if job.protected:
            what = {ActionKind.RECLAIM: "reclaim", ActionKind.PREEMPT: "preemption",
                    ActionKind.CAP_RUNTIME: "run-time caps"}[action.kind]
            return _Decision(Outcome.REFUSED, f"production inference is exempt from automatic {what}",
                             before=running, **base)
        released = {"released_slots": [s.slot_id for s in job.slots],
                    "gpus_released": round(sum(s.fraction for s in job.slots), 6)}
        if action.kind == ActionKind.RECLAIM:
            return _Decision(Outcome.APPLIED, reason, before=running, after={"state": JobState.CANCELLED.value},
                             effects={"state": JobState.CANCELLED.value, **released},
                             apply=lambda: {"released_slots": self._end(job, now, JobState.CANCELLED,
                                                                        f"reclaimed: {action.reason or 'reclaim'}",
                                                                        None)}, **base)
        if action.kind == ActionKind.PREEMPT:
            queue = self.queues[job.spec.queue]
            if not (queue.preemptible or queue.low_priority):
                return _Decision(Outcome.REFUSED, f"queue {queue.name} is not preemptible", before=running, **base)
            return _Decision(Outcome.APPLIED, reason, before=running,
                             after={"state": JobState.PENDING.value, "attempt": job.attempt + 1},
                             effects={"state": JobState.PENDING.value, "attempt": job.attempt + 1, **released},
                             apply=lambda: {"released_slots": self._preempt(job, now,
                                                                            f"preempted: {action.reason or 'preempt'}")},
                             **base)
        if action.kind == ActionKind.CAP_RUNTIME:
            new = action.runtime_s
            if new is None or new < 1:
                return _Decision(Outcome.REFUSED, "cap_runtime needs runtime_s >= 1", before=running, **base)
            old = job.runtime_cap_s
            if old is not None and new >= old:
                return _Decision(Outcome.REFUSED, f"the attempt's cap is already {old} s (asked {new} s)",
                                 before={**running, "runtime_cap_s": old}, **base)
            ends_at = job.started_at + dt.timedelta(seconds=new)
            effects = {"runtime_cap_s": new, "ends_at": records.rfc3339(ends_at)}
            if ends_at <= now:
                effects["state"] = JobState.TIMEOUT.value
            return _Decision(Outcome.APPLIED, reason, before={**running, "runtime_cap_s": old},
                             after={"runtime_cap_s": new, "ends_at": records.rfc3339(ends_at)}, effects=effects,
                             apply=lambda: self._cap(job, new, now), **base)
        raise ValueError(f"unknown action kind {action.kind!r}")

    def _decide_drain(self, action: Action, now: dt.datetime) -> _Decision:
        kind, target = drain_object_kind(action.target), action.target
        try:
            node, gpu = drain_target(target)
        except ValueError as error:
            return _Decision(Outcome.REFUSED, str(error), kind, target)
        slots = self.target_slots(node, gpu)
        if not slots:
            known = self.target_slots(node, None)
            if not known:
                return _Decision(Outcome.REFUSED, f"no node {node} in the pool", kind, target)
            indices = sorted({self._shape.slots[s].gpu for s in known})
            return _Decision(
                Outcome.REFUSED, f"node {node} has no GPU {gpu} (its GPUs: {indices})", kind, target
            )
        drained = self._drained.get(target)
        holders = self.holders()
        running = sorted({holders[s].job_id for s in slots if s in holders})
        before = {"drained": drained is not None, "slots": slots, "running_jobs": running}
        if action.evidence:
            before["evidence"] = action.evidence
        reason = self._reason(action)
        if action.kind == ActionKind.DRAIN:
            if drained is not None:
                return _Decision(
                    Outcome.REFUSED,
                    f"{kind} {target} is already drained (key "
                    f"{drained['idempotency_key']} at {drained['at']}: {drained['reason']})",
                    kind,
                    target,
                    before=before,
                )
            info = {
                "idempotency_key": action.idempotency_key,
                "reason": reason,
                "at": records.rfc3339(now),
                "actor": action.actor,
            }
            return _Decision(
                Outcome.APPLIED,
                reason,
                kind,
                target,
                before=before,
                after={"drained": True, "reason": reason},
                effects={"drained": True, "slots": slots, "running_jobs": running},
                apply=lambda: self._set_drained({**self._drained, target: info}) or {},
            )
        if drained is None:
            hint = (
                f"; its node {node} is drained: undrain {node}"
                if gpu is not None and node in self._drained
                else ""
            )
            return _Decision(
                Outcome.REFUSED, f"{kind} {target} is not drained{hint}", kind, target, before=before
            )
        rest = {t: i for t, i in self._drained.items() if t != target}
        return _Decision(
            Outcome.APPLIED,
            reason,
            kind,
            target,
            before={**before, "drained_by": drained},
            after={"drained": False},
            effects={"drained": False, "slots": slots},
            apply=lambda: self._set_drained(rest) or {},
        )

    def _decide_quota_change(self, action: Action) -> _Decision:
        queue = self.queues.get(action.target)
        if queue is None:
            return _Decision(Outcome.REFUSED, f"no queue {action.target}", "queue", action.target)
        base = {"object_kind": "queue", "object_name": queue.name, "object_namespace": queue.tenant}
        problem = quota_problem(queue, action.quota, self.queues, self._shape)
        if problem is not None:
            return _Decision(Outcome.REFUSED, problem, before={"quota": dict(queue.quota)}, **base)
        proposed = {**queue.quota, **{m: float(v) for m, v in action.quota.items()}}

        def apply() -> dict:
            pid = f"qp-{self._next('proposal'):06d}"
            self._proposals[pid] = {"queue": queue.name, "quota": proposed, "state": "proposed",
                                    "idempotency_key": action.idempotency_key, "actor": action.actor,
                                    "reason": self._reason(action)}
            return {"proposal_id": pid}

        return _Decision(Outcome.PROPOSED, self._reason(action), before={"quota": dict(queue.quota)},
                         after={"quota": proposed}, effects={"quota": proposed}, apply=apply, **base)

    def apply_action(self, action: Action, now: dt.datetime, actor_role: str = "governance_bot") -> ActionResult:
        """Applies an enforcement action once per idempotency key; audited; answers the outcome."""
        kind = ActionKind(action.kind)
        request_id = f"act-{self._next('request'):06d}"
        audit_action = "enforcement.quota_proposal" if kind == ActionKind.QUOTA_CHANGE else f"enforcement.{kind.value}"
        stored = self._actions.get(action.idempotency_key)
        if stored is not None:
            if kind == ActionKind.QUOTA_CHANGE:
                object_kind, queue = "queue", self.queues.get(action.target)
                namespace = queue.tenant if queue else None
            elif kind in NODE_ACTIONS:
                object_kind, namespace = drain_object_kind(action.target), None
            else:
                object_kind, job = "job", self.jobs.get(action.target)
                namespace = job.spec.tenant if job else None
            if (stored["kind"], stored["target"]) != (kind.value, action.target):
                reason = (f"idempotency key {action.idempotency_key} was used for {stored['kind']} on "
                          f"{stored['target']}")
                outcome = Outcome.REFUSED
            else:
                reason = f"already {stored['outcome']} at {stored['at']}: {stored['reason']}"
                outcome = Outcome.ALREADY_DONE
            self._audit(now, action.actor, audit_action, object_kind, action.target, outcome.value,
                        actor_role=actor_role, object_namespace=namespace, reason=reason, request_id=request_id,
                        idempotency_key=action.idempotency_key)
            return ActionResult(action.idempotency_key, kind, action.target, outcome, reason,
                                stored.get("proposal_id") if outcome == Outcome.ALREADY_DONE else None,
                                dict(stored["effects"]) if outcome == Outcome.ALREADY_DONE else {})
        decision = self._decide(action, now)
        outcome, reason, effects = decision.outcome, decision.reason, dict(decision.effects)
        if outcome in (Outcome.APPLIED, Outcome.PROPOSED):
            if action.dry_run:
                verb = "propose" if outcome == Outcome.PROPOSED else "apply"
                outcome, reason = Outcome.DRY_RUN, f"dry run: would {verb}: {reason}"
            else:
                effects.update(decision.apply())
                self._actions[action.idempotency_key] = {
                    "kind": kind.value, "target": action.target, "outcome": outcome.value, "reason": reason,
                    "proposal_id": effects.get("proposal_id"), "effects": effects, "at": records.rfc3339(now)}
        elif action.dry_run:
            reason = f"dry run: {reason}"
        self._audit(now, action.actor, audit_action, decision.object_kind, decision.object_name, outcome.value,
                    actor_role=actor_role, object_namespace=decision.object_namespace,
                    before=decision.before, after=decision.after if outcome != Outcome.REFUSED else None,
                    reason=reason, request_id=effects.get("proposal_id") or request_id,
                    idempotency_key=action.idempotency_key)
        return ActionResult(action.idempotency_key, kind, action.target, outcome, reason, effects.get("proposal_id"),
                            effects)

    def approve(self, proposal_id: str, now: dt.datetime, actor: str, actor_role: str = "admin") -> ActionResult:
        """An admin applies a quota-change proposal (`approval.grant`, then `quota.update`)."""
        proposal = self._proposals.get(proposal_id)
        if proposal is None:
            reason = f"no proposal {proposal_id}"
            self._audit(now, actor, "approval.grant", "proposal", proposal_id, Outcome.REFUSED.value,
                        actor_role=actor_role, reason=reason, request_id=proposal_id)
            return ActionResult("", ActionKind.QUOTA_CHANGE, "", Outcome.REFUSED, reason, proposal_id)
        queue = self.queues[proposal["queue"]]
        key = proposal["idempotency_key"]
        base = {"actor_role": actor_role, "object_namespace": queue.tenant, "request_id": proposal_id,
                "idempotency_key": key}
        if proposal["state"] == "approved":
            reason = f"proposal {proposal_id} was approved by {proposal['approved_by']} at {proposal['approved_at']}"
            self._audit(now, actor, "approval.grant", "queue", queue.name, Outcome.ALREADY_DONE.value, reason=reason,
                        **base)
            return ActionResult(key, ActionKind.QUOTA_CHANGE, queue.name, Outcome.ALREADY_DONE, reason, proposal_id,
                                {"quota": dict(proposal["quota"])})
        problem = quota_problem(queue, proposal["quota"], self.queues, self._shape)
        if problem is not None:
            self._audit(now, actor, "approval.grant", "queue", queue.name, Outcome.REFUSED.value, reason=problem, **base)
            return ActionResult(key, ActionKind.QUOTA_CHANGE, queue.name, Outcome.REFUSED, problem, proposal_id)
        before = dict(queue.quota)
        reason = f"approve quota proposal {proposal_id}: {proposal['reason']}"
        self._audit(now, actor, "approval.grant", "queue", queue.name, "approved", before={"quota": before},
                    after={"quota": dict(proposal["quota"])}, reason=reason, **base)
        self.update_queue(queue.name, {"quota": proposal["quota"]}, now, actor, actor_role=actor_role,
                          reason=f"quota proposal {proposal_id}", request_id=proposal_id)
        proposal.update(state="approved", approved_by=actor, approved_at=records.rfc3339(now))
        return ActionResult(key, ActionKind.QUOTA_CHANGE, queue.name, Outcome.APPLIED, reason, proposal_id,
                            {"quota": dict(proposal["quota"]), "previous_quota": before})

    # --- admin changes --------------------------------------------------------------------

    def update_queue(self, queue: str, changes: dict, now: dt.datetime, actor: str, actor_role: str = "admin",
                     reason: str = "", request_id: str | None = None) -> QueueSpec:
        """An admin changes a queue (quota, priority, limits); audited as quota.update / queue.update.
        An invalid change is audited as refused and raises ValueError."""
        old = self.queues.get(queue)
        if old is None:
            raise KeyError(f"no queue {queue!r}")
        request_id = request_id or f"req-{self._next('request'):06d}"
        base = {"actor_role": actor_role, "object_namespace": old.tenant, "request_id": request_id}
        try:
            typed = queue_changes(old, changes, self.queues, self._shape)
        except ValueError as error:
            action = "quota.update" if set(changes) == {"quota"} else "queue.update"
            self._audit(now, actor, action, "queue", queue, "refused", reason=f"{error}", **base)
            raise ValueError(f"queue {queue}: {error}") from None
        new = dataclasses.replace(old, **typed)
        stray = sorted(set(new.quota) - set(new.gpu_models))
        if stray:
            error = f"quota for {stray} but gpu_models is {list(new.gpu_models)}"
            self._audit(now, actor, "queue.update", "queue", queue, "refused", reason=error, **base)
            raise ValueError(f"queue {queue}: {error}")
        self.queues[queue] = new
        if "quota" in typed:
            self._audit(now, actor, "quota.update", "queue", queue, "applied", before={"quota": dict(old.quota)},
                        after={"quota": dict(new.quota)}, reason=reason or None, **base)
        other = [f for f in typed if f != "quota"]
        if other:
            view = queue_to_dict
            self._audit(now, actor, "queue.update", "queue", queue, "applied",
                        before={f: view(old)[f] for f in other}, after={f: view(new)[f] for f in other},
                        reason=reason or None, **base)
        for job_id in list(self._track):
            job = self.jobs[job_id]
            if job.spec.queue == queue and job.priority != new.priority:
                job.priority = new.priority
                self.dirty_jobs.add(job_id)
        for model in sorted(set(old.gpu_models) | set(new.gpu_models) | set(old.quota) | set(new.quota)):
            if (queue, model) in self._active:
                self._rebalance(queue, model)
            self._touch_model(model)
        return new

    # --- state ----------------------------------------------------------------------------

    def job_state(self, job_id: str) -> dict:
        """One job as `state_dict()` stores it (with the engine's bookkeeping while it is live)."""
        return job_state(self.jobs[job_id], self._track.get(job_id))

    def state_dict(self) -> dict:
        """Everything needed to resume, JSON-serialisable (`allocator.state`)."""
        return EngineState(
            queues=[self.queues[q.name] for q in self.pool.queues],
            jobs=[(job, self._track.get(job_id)) for job_id, job in self.jobs.items()],
            counters=self._counters,
            actions=self._actions,
            proposals=self._proposals,
            dirty_keys=self._dirty_keys,
            boundaries_done=self._boundaries_done,
            started_unreported=[j.job_id for j in self._started],
            drained=self._drained,
        ).to_dict()

    @classmethod
    def from_state(cls, pool: PoolConfig, state: Mapping, sink: records.RecordSink) -> Engine:
        """An engine that continues exactly where the one that made `state` stood."""
        engine = cls(pool, sink)
        saved = EngineState.from_dict(state, engine.queues, engine._shape.slots)
        for queue in saved.queues:
            engine.queues[queue.name] = queue
        engine._counters.update(saved.counters)
        for job, track in saved.jobs:
            engine.jobs[job.job_id] = job
            if track is not None:
                engine._track[job.job_id] = track
                engine._restore(job, track)
        for queue_name, model in sorted(engine._active):
            engine._rebalance(queue_name, model)
        engine._actions = saved.actions
        engine._proposals = saved.proposals
        engine._dirty_keys = saved.dirty_keys
        engine._boundaries_done = saved.boundaries_done
        engine._started = [engine.jobs[j] for j in saved.started_unreported]
        for target in saved.drained:
            node, gpu = drain_target(target)
            if not engine.target_slots(node, gpu):
                raise ValueError(f"engine state has drained {target!r}, which the pool does not")
        engine._set_drained(saved.drained)
        engine.dirty_jobs.clear()
        return engine
