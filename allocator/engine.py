"""The allocator's scheduling rules and enforcement: pure and clock-free (every call takes `now`).

The engine keeps the pool's state in memory and writes every job event and every administrative
decision to its `RecordSink` (`allocator.records`). It never reads a clock and never sleeps; the
caller drives it: `submit`/`finish`/`cancel`/`apply_action`/`update_queue` change state, `tick(now)`
fires timers (`next_timer()` says when the next one is due) and `schedule(now)` admits and starts
what can run. Call `schedule(now)` after anything that may free capacity or add work.

Admission (`submit`) refuses a request that breaks a rule with `AdmissionError(rule, message)`:

| rule | refused when |
|---|---|
| `request.tenant` | the tenant is not one of the pool's |
| `request.template` | the template or share mode is not a known value |
| `request.job_id` | the job id is already taken |
| `queue.unknown` | the queue does not exist |
| `queue.tenant` | the tenant submits to another tenant's queue (not shared with it) |
| `queue.template` | the queue does not take this template |
| `pool.gpu_model` | the pool has no GPUs of this model |
| `queue.gpu_model` | the queue does not run this model |
| `request.gpus` | fewer than 1 GPU/slice/share |
| `share_mode.mig_profile` | MIG without a profile the model knows or the pool has; a profile without MIG |
| `pool.share_mode` | the pool has no GPUs of this model shared this way |
| `queue.max_gpus_per_request` | more than the queue allows per request |
| `template.training.expected_runtime_s` | training without an expected run time (>= 1 s) |
| `template.training.checkpoint_policy` | training without a checkpoint policy ("none" counts as none) |
| `template.inference.min_replicas` | inference without a minimum replica count (>= 1) |
| `template.inference.rollback` | inference without a rollback method |
| `template.experiment.queue` | an experiment outside a low-priority queue and without a reservation |
| `template.interactive.idle_reminder_s` | an idle reminder below 1 s |
| `request.time_limit_s` | a time limit below 1 s |
| `queue.max_runtime_s` | a time limit, or a training job's expected run time, above the queue's cap |
| `reservation.unknown` / `.tenant` / `.ended` / `.gpu_model` / `.capacity` | no such reservation; another tenant's; already over; none of its slots are of this model and share mode; fewer slots than asked |
| `request.whole_nodes` | more whole GPUs than a node has, but not a multiple of the node size |
| `pool.capacity` | more than the pool could ever place (MIG and time-sliced requests go on one node) |

Quota and borrowing. A queue's quota is in fraction-weighted GPUs per model (a MIG slice counts
its share of compute, a time-sliced replica 1/replicas). A job is *in quota* when its queue's
in-quota usage plus its weight stays within the quota; usage counts admitted jobs, started or
not. A job over quota runs *borrowed* on idle capacity if its queue may borrow: low-priority
(backfill) queues always (they hold no quota), other queues when `can_borrow` and preemptible;
inference and non-preemptible queues never borrow (nobody could take the capacity back). A job
that may not borrow waits ("quota-bound"). When in-quota work of a queue ends, its borrowed jobs
are promoted to in-quota, oldest first, as far as the quota allows; when an admin lowers a quota,
the most recently admitted in-quota jobs become borrowed until usage fits. Reservation jobs run
on their reservation's slots and count against no quota.

Scheduling (`schedule`). Pending jobs are grouped by the slots they can use (model + share mode
[+ MIG profile], or a reservation); a group is looked at again only when something changed for it
(new or requeued work, released slots of its model, a quota or queue change, a reservation
boundary). Within a group, queues are strict FIFO: only a queue's head is tried, and heads compete
by priority, then submission order. In-quota heads go first, then borrowing ones. A head that
fits is admitted and started (`admit` then `start`, same time). A head that does not fit may
preempt:

- an in-quota job may preempt any borrowed work, and in-quota work of preemptible queues with a
  strictly lower priority; a borrowing job only borrowed work of strictly lower priority;
- never inference, non-preemptible queues, reservation work, or a job already being preempted;
- preferred victims: borrowed work of low-priority queues, then other borrowed work, then
  in-quota work; within a class the lowest priority, then the most recently started;
- placement picks the node whose worst victim is the most preemptible, then the fewest victims
  (`placement.plan_preemption`); only the jobs whose slots it takes are preempted.

Victims get a grace period (`PoolConfig.preemption_grace_s`, default 60 s) to checkpoint: the
preemptor is admitted at once (its slots are claimed) and starts when the last victim has let go
(at the latest when the grace ends, in `tick`). A preempted job gets `preempt` then `requeue`
(same attempt; the reason says a training job resumes from its checkpoint, other work restarts),
and goes back to the front of its queue with the next attempt number.

Backfill. A head that cannot be placed even by preempting *blocks* its group: later heads of the
group are tried only if the blocked job could take their capacity back by preemption later
(they would run borrowed, or in quota at a lower priority in a preemptible queue), or if they are
in quota while the blocked job is borrowing. So backfill never delays a blocked job by more than a
preemption grace, and low-priority queues fill whatever is idle.

Run-time caps and retries. A started attempt's cap is the smallest of the job's `time_limit_s`,
the queue's `max_runtime_s` and, on a reservation, the time left in it; `cap_runtime` shortens it
for the current attempt. At the cap, `tick` ends the job TIMEOUT (not retried). A job that ends
FAILED, OUT_OF_MEMORY or NODE_FAIL with retries left in its queue's `retry_budget` is requeued
(`requeue` with the state, exit code and reason "retry after failure: ...") and runs again as the
next attempt; past the budget it finishes with that state. Preemptions do not use the budget.

Enforcement (`apply_action`). Every action is audited (`enforcement.<kind>`, quota_change as
`enforcement.quota_proposal`) and answered with an `ActionResult`:
remind (audit only), reclaim (the job finishes CANCELLED, reason `reclaimed: <reason>`), preempt
(the preempt + requeue path, at once), cap_runtime (a shorter cap for the running attempt; if it
is already past, the job ends TIMEOUT now), quota_change (a proposal `qp-...`, applied by
`approve`). Inference is refused for reclaim, preempt and cap_runtime; preempt is refused for a
non-preemptible queue. A dry run reports `dry_run` (or `refused`) and changes nothing. An action
that was applied or proposed is remembered by its idempotency key: the same key again answers
`already_done` with the first answer's effects (a key reused for another action or target is
refused). A refused action is not remembered, so it can be retried once the reason is gone.

State. `state_dict()` returns a JSON-serialisable dict of everything needed to resume (queues,
jobs with their engine bookkeeping, idempotency keys and results, proposals, id counters, the
groups due for a look, reservation boundaries passed); `Engine.from_state(pool, state, sink)`
rebuilds an engine that behaves identically from there on (timers and indexes are rebuilt from
the jobs). `dirty_jobs` collects the ids of jobs changed since the caller last cleared it, so a
store can save only those (`job_state(job_id)` gives the same dict as `state_dict()["jobs"]`).
"""
from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from allocator import records
from allocator.model import (
    GPU_MODELS,
    MIG_PROFILES,
    Action,
    ActionKind,
    ActionResult,
    AdmissionError,
    Job,
    JobSpec,
    JobState,
    Outcome,
    PoolConfig,
    QueueSpec,
    Reservation,
    ShareMode,
    Slot,
    Template,
)
from allocator.placement import Request, place, plan_preemption

STATE_VERSION = 1
EPS = 1e-6
RETRYABLE = frozenset({JobState.FAILED, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL})
NO_CHECKPOINT = frozenset({"", "none", "never", "false", "no"})
EDITABLE_QUEUE_FIELDS = ("quota", "priority", "preemptible", "max_gpus_per_request", "max_runtime_s",
                         "retry_budget", "templates", "gpu_models", "can_borrow", "shared_with")
_CAP, _GRACE = 0, 1  # timer kinds, in the order tick handles timers due at the same instant
_EPOCH = dt.datetime(1970, 1, 1)
_NONE: frozenset[str] = frozenset()


def job_key(spec: JobSpec) -> str:
    """The group of slots a job can use: `H100/whole`, `A100/mig/1g.10gb`, `reservation/<name>`."""
    if spec.reservation:
        return f"reservation/{spec.reservation}"
    if spec.share_mode == ShareMode.MIG:
        return f"{spec.gpu_model}/mig/{spec.mig_profile}"
    return f"{spec.gpu_model}/{ShareMode(spec.share_mode).value}"


@dataclass
class _Track:
    """The engine's bookkeeping for a job that has not ended."""

    seq: int  # submission order: a requeued job keeps its place at the front of its queue
    key: str
    queued_at: dt.datetime  # submit or last requeue
    claim: tuple[str, ...] = ()  # slot ids admitted to, until the job starts (preemption grace)
    grace_until: dt.datetime | None = None  # as a victim: preempted then unless it ends first
    preempted_by: str | None = None


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


# --- serialisation helpers -------------------------------------------------------------------


def _iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def _time(text: str | None) -> dt.datetime | None:
    return None if text is None else dt.datetime.fromisoformat(text)


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(JobSpec))


def spec_to_dict(spec: JobSpec) -> dict:
    out = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    out["template"] = Template(spec.template).value
    out["share_mode"] = ShareMode(spec.share_mode).value
    return out


def spec_from_dict(data: Mapping) -> JobSpec:
    return JobSpec(**{**data, "template": Template(data["template"]), "share_mode": ShareMode(data["share_mode"])})


def queue_to_dict(queue: QueueSpec) -> dict:
    out = dataclasses.asdict(queue)
    out["gpu_models"] = list(queue.gpu_models)
    out["templates"] = [Template(t).value for t in queue.templates]
    out["shared_with"] = list(queue.shared_with)
    out["quota"] = dict(queue.quota)
    return out


def queue_from_dict(data: Mapping) -> QueueSpec:
    return QueueSpec(**{**data, "gpu_models": tuple(data["gpu_models"]), "quota": dict(data["quota"]),
                        "templates": tuple(Template(t) for t in data["templates"]),
                        "shared_with": tuple(data.get("shared_with", ()))})


def job_to_dict(job: Job) -> dict:
    return {
        "job_id": job.job_id, "spec": spec_to_dict(job.spec), "state": job.state.value, "attempt": job.attempt,
        "submitted_at": _iso(job.submitted_at), "admitted_at": _iso(job.admitted_at),
        "started_at": _iso(job.started_at), "first_started_at": _iso(job.first_started_at),
        "ended_at": _iso(job.ended_at), "slots": [s.slot_id for s in job.slots], "borrowed": job.borrowed,
        "retries_used": job.retries_used, "runtime_cap_s": job.runtime_cap_s, "priority": job.priority,
    }


def job_from_dict(data: Mapping, slots: Mapping[str, Slot]) -> Job:
    return Job(
        job_id=data["job_id"], spec=spec_from_dict(data["spec"]), state=JobState(data["state"]),
        attempt=data["attempt"], submitted_at=_time(data["submitted_at"]), admitted_at=_time(data["admitted_at"]),
        started_at=_time(data["started_at"]), first_started_at=_time(data["first_started_at"]),
        ended_at=_time(data["ended_at"]), slots=tuple(slots[s] for s in data["slots"]), borrowed=data["borrowed"],
        retries_used=data["retries_used"], runtime_cap_s=data["runtime_cap_s"], priority=data["priority"],
    )


def _seconds(delta: dt.timedelta) -> int:
    return int(delta.total_seconds())


# --- the engine ------------------------------------------------------------------------------


class Engine:
    """The pool's scheduler and enforcement point (see the module docstring for the rules)."""

    def __init__(self, pool: PoolConfig, sink: records.RecordSink) -> None:
        self.pool = pool
        self.sink = sink
        self.queues: dict[str, QueueSpec] = {q.name: q for q in pool.queues}
        self.jobs: dict[str, Job] = {}
        self.dirty_jobs: set[str] = set()
        self._slots: dict[str, Slot] = {s.slot_id: s for s in pool.slots()}
        self._kind_of: dict[str, tuple[str, str]] = {
            sid: (s.gpu_model, ShareMode(s.share_mode).value) for sid, s in self._slots.items()}
        self._free: dict[tuple[str, str], set[str]] = defaultdict(set)
        for sid, kind in self._kind_of.items():
            self._free[kind].add(sid)
        self._holder: dict[str, str] = {}
        self._claimed: dict[str, str] = {}
        self._running: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._models = {s.gpu_model for s in self._slots.values()}
        self._node_size: dict[str, int] = defaultdict(int)
        per_host: dict[tuple[str, str, str, str | None], int] = defaultdict(int)
        self._kind_count: dict[tuple[str, str, str | None], int] = defaultdict(int)
        self._ts_fraction: dict[str, float] = {}
        for s in self._slots.values():
            mode = ShareMode(s.share_mode).value
            per_host[(s.host, s.gpu_model, mode, s.profile)] += 1
            self._kind_count[(s.gpu_model, mode, s.profile)] += 1
            if mode == ShareMode.TIMESLICE:
                self._ts_fraction[s.gpu_model] = max(self._ts_fraction.get(s.gpu_model, 0.0), s.fraction)
        self._host_max: dict[tuple[str, str, str | None], int] = defaultdict(int)
        for (_, model, mode, profile), n in per_host.items():
            self._host_max[(model, mode, profile)] = max(self._host_max[(model, mode, profile)], n)
            if mode == ShareMode.WHOLE:
                self._node_size[model] = max(self._node_size[model], n)
        self._reservations: dict[str, Reservation] = {r.name: r for r in pool.reservations}
        self._boundaries = sorted((t, r.name) for r in pool.reservations for t in (r.start, r.end))
        self._boundaries_done = 0
        self._track: dict[str, _Track] = {}
        self._pending: dict[str, dict[str, list[tuple[int, str]]]] = defaultdict(dict)
        self._keys_by_model: dict[str, set[str]] = defaultdict(set)
        self._dirty_keys: set[str] = set()
        self._active: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._usage: dict[tuple[str, str], float] = defaultdict(float)
        self._charge: dict[str, float] = {}
        self._timers: list[tuple[dt.datetime, int, str, int]] = []
        self._counters = {"event": 0, "audit": 0, "job": 0, "seq": 0, "proposal": 0, "request": 0}
        self._actions: dict[str, dict] = {}
        self._proposals: dict[str, dict] = {}
        self._started: list[Job] = []

    # --- read access ----------------------------------------------------------------------

    def holders(self) -> dict[str, Job]:
        """Slot id → the running job holding it."""
        return {sid: self.jobs[jid] for sid, jid in self._holder.items()}

    def quota(self, queue: str) -> dict[str, float]:
        """The queue's quota in force (GPUs per model)."""
        return dict(self.queues[queue].quota)

    def quotas(self) -> dict[str, dict[str, float]]:
        return {name: dict(q.quota) for name, q in self.queues.items()}

    def usage(self, queue: str) -> dict[str, float]:
        """In-quota GPUs per model of the queue's admitted jobs (started or claiming)."""
        return {m: round(u, 6) for (q, m), u in self._usage.items() if q == queue and u > EPS}

    def borrowed(self, queue: str) -> dict[str, float]:
        """GPUs per model the queue's admitted jobs run on beyond its quota."""
        out: dict[str, float] = defaultdict(float)
        for (q, m), ids in self._active.items():
            if q == queue:
                for jid in ids:
                    if self.jobs[jid].borrowed:
                        out[m] += self._charge[jid]
        return {m: round(v, 6) for m, v in out.items() if v > EPS}

    def pending(self) -> list[Job]:
        """Jobs waiting (not yet started), in submission order."""
        return sorted((self.jobs[j] for j, t in self._track.items() if self.jobs[j].state == JobState.PENDING),
                      key=lambda job: self._track[job.job_id].seq)

    def current_pool(self) -> PoolConfig:
        """The pool with the queue settings in force (for `records.pool_snapshot`)."""
        return dataclasses.replace(self.pool, queues=tuple(self.queues[q.name] for q in self.pool.queues))

    def proposals(self) -> dict[str, dict]:
        return {pid: dict(p) for pid, p in self._proposals.items()}

    # --- ids and records --------------------------------------------------------------------

    def _next(self, counter: str) -> int:
        self._counters[counter] += 1
        return self._counters[counter]

    def _emit(self, event_type: str, job: Job, now: dt.datetime, **fields: object) -> None:
        record = records.job_event(f"ev-{self._next('event'):09d}", now, event_type, job.job_id, job.attempt, **fields)
        self.dirty_jobs.add(job.job_id)
        self.sink.event(record)

    def _audit(self, now: dt.datetime, actor: str, action: str, object_kind: str, object_name: str, decision: str,
               **fields: object) -> None:
        self.sink.audit(records.audit_record(f"au-{self._next('audit'):09d}", now, actor, action, object_kind,
                                             object_name, decision, **fields))

    # --- admission ------------------------------------------------------------------------

    def _weight(self, spec: JobSpec) -> float:
        """Fraction-weighted GPUs a request counts against quota (time-sliced: the largest share)."""
        if spec.share_mode == ShareMode.MIG:
            slices = MIG_PROFILES[spec.gpu_model][spec.mig_profile][0]
            return spec.gpus * slices / (GPU_MODELS[spec.gpu_model].compute_slices or 7)
        if spec.share_mode == ShareMode.TIMESLICE:
            return spec.gpus * self._ts_fraction.get(spec.gpu_model, 1.0)
        return float(spec.gpus)

    def admission_error(self, spec: JobSpec, now: dt.datetime) -> AdmissionError | None:
        """The first rule `spec` breaks, or None (what `submit` would refuse, without submitting)."""
        if spec.tenant not in self.pool.tenants:
            return AdmissionError("request.tenant", f"tenant {spec.tenant!r} is not one of the pool's tenants")
        queue = self.queues.get(spec.queue)
        if queue is None:
            return AdmissionError("queue.unknown", f"queue {spec.queue!r} does not exist")
        if spec.tenant != queue.tenant and "*" not in queue.shared_with and spec.tenant not in queue.shared_with:
            return AdmissionError("queue.tenant", f"tenant {spec.tenant} may not submit to queue {queue.name} "
                                                  f"of tenant {queue.tenant}")
        try:
            template = Template(spec.template)
            mode = ShareMode(spec.share_mode)
        except ValueError as error:
            return AdmissionError("request.template", str(error))
        if template not in queue.templates:
            return AdmissionError("queue.template", f"queue {queue.name} takes {[t.value for t in queue.templates]}, "
                                                    f"not {template.value}")
        model = spec.gpu_model
        if model not in self._models:
            return AdmissionError("pool.gpu_model", f"the pool has no {model} GPUs (has {sorted(self._models)})")
        if model not in queue.gpu_models:
            return AdmissionError("queue.gpu_model", f"queue {queue.name} runs {list(queue.gpu_models)}, not {model}")
        if not isinstance(spec.gpus, int) or spec.gpus < 1:
            return AdmissionError("request.gpus", f"gpus is {spec.gpus!r}, expected at least 1")
        profile = spec.mig_profile if mode == ShareMode.MIG else None
        if mode == ShareMode.MIG:
            known = MIG_PROFILES.get(model, {})
            if spec.mig_profile not in known:
                return AdmissionError("share_mode.mig_profile", f"MIG profile {spec.mig_profile!r} is not one of "
                                                                f"{model}'s {sorted(known)}")
            if not self._kind_count.get((model, mode.value, profile)):
                return AdmissionError("share_mode.mig_profile", f"the pool has no {model} MIG instance of profile "
                                                                f"{spec.mig_profile}")
        elif spec.mig_profile:
            return AdmissionError("share_mode.mig_profile", f"mig_profile {spec.mig_profile} given with share_mode "
                                                            f"{mode.value}; use share_mode mig")
        elif not self._kind_count.get((model, mode.value, None)):
            return AdmissionError("pool.share_mode", f"the pool has no {model} GPUs shared as {mode.value}")
        if spec.gpus > queue.max_gpus_per_request:
            return AdmissionError("queue.max_gpus_per_request", f"{spec.gpus} asked, queue {queue.name} allows at most "
                                                                f"{queue.max_gpus_per_request}")
        error = self._template_error(spec, template, queue)
        if error is not None:
            return error
        if spec.reservation:
            return self._reservation_error(spec, mode, profile, now)
        if mode == ShareMode.WHOLE and spec.gpus > self._node_size[model]:
            size = self._node_size[model]
            if spec.gpus % size:
                return AdmissionError("request.whole_nodes", f"{spec.gpus} {model} GPUs is more than a node ({size}) "
                                                             f"but not whole nodes: ask for a multiple of {size}")
            if spec.gpus > self._kind_count[(model, mode.value, None)]:
                return AdmissionError("pool.capacity", f"{spec.gpus} {model} GPUs asked, the pool has "
                                                       f"{self._kind_count[(model, mode.value, None)]}")
        elif mode != ShareMode.WHOLE and spec.gpus > self._host_max[(model, mode.value, profile)]:
            return AdmissionError("pool.capacity", f"{spec.gpus} {mode.value} slots asked; they go on one node and a "
                                                   f"node has at most {self._host_max[(model, mode.value, profile)]}")
        return None

    @staticmethod
    def _template_error(spec: JobSpec, template: Template, queue: QueueSpec) -> AdmissionError | None:
        if template == Template.TRAINING:
            if spec.expected_runtime_s is None or spec.expected_runtime_s < 1:
                return AdmissionError("template.training.expected_runtime_s",
                                      "a training job declares its expected run time in seconds")
            if (spec.checkpoint_policy or "").strip().lower() in NO_CHECKPOINT:
                return AdmissionError("template.training.checkpoint_policy",
                                      f"a training job declares a checkpoint policy (got {spec.checkpoint_policy!r})")
        elif template == Template.INFERENCE:
            if spec.min_replicas is None or spec.min_replicas < 1:
                return AdmissionError("template.inference.min_replicas",
                                      "an inference service declares its minimum replica count (>= 1)")
            if not (spec.rollback or "").strip():
                return AdmissionError("template.inference.rollback", "an inference service declares a rollback method")
        elif template == Template.EXPERIMENT:
            if not queue.low_priority and not spec.reservation:
                return AdmissionError("template.experiment.queue",
                                      f"an experiment runs in a low-priority queue or on a reservation, not in "
                                      f"{queue.name}")
        elif template == Template.INTERACTIVE and spec.idle_reminder_s is not None and spec.idle_reminder_s < 1:
            return AdmissionError("template.interactive.idle_reminder_s", "an idle reminder is at least 1 s")
        if spec.time_limit_s is not None and spec.time_limit_s < 1:
            return AdmissionError("request.time_limit_s", f"time_limit_s is {spec.time_limit_s}, expected >= 1")
        cap = queue.max_runtime_s
        if cap is not None:
            if spec.time_limit_s is not None and spec.time_limit_s > cap:
                return AdmissionError("queue.max_runtime_s", f"time_limit_s {spec.time_limit_s} is above queue "
                                                             f"{queue.name}'s cap of {cap} s")
            if template == Template.TRAINING and spec.expected_runtime_s > cap:
                return AdmissionError("queue.max_runtime_s", f"expected_runtime_s {spec.expected_runtime_s} is above "
                                                             f"queue {queue.name}'s cap of {cap} s")
        return None

    def _reservation_error(self, spec: JobSpec, mode: ShareMode, profile: str | None,
                           now: dt.datetime) -> AdmissionError | None:
        r = self._reservations.get(spec.reservation)
        if r is None:
            return AdmissionError("reservation.unknown", f"no reservation {spec.reservation!r}")
        if r.tenant != spec.tenant:
            return AdmissionError("reservation.tenant", f"reservation {r.name} belongs to tenant {r.tenant}")
        if now >= r.end:
            return AdmissionError("reservation.ended", f"reservation {r.name} ended at {records.rfc3339(r.end)}")
        request = Request(spec.gpu_model, mode, spec.gpus, profile)
        mine = [self._slots[s] for s in r.slot_ids if request.matches(self._slots[s])]
        if not mine:
            return AdmissionError("reservation.gpu_model", f"reservation {r.name} has no {spec.gpu_model} "
                                                           f"{profile or mode.value} slots")
        if place(request, mine, self._node_size[spec.gpu_model]) is None:
            return AdmissionError("reservation.capacity", f"{spec.gpus} slots asked do not fit reservation {r.name}")
        return None

    def submit(self, spec: JobSpec, now: dt.datetime, actor: str, job_id: str | None = None) -> Job:
        """Admits the request to its queue (PENDING) or raises AdmissionError naming the rule broken.

        `actor` is who submitted (the service's authenticated caller); the event log records
        `spec.user`, the job's owner."""
        error = self.admission_error(spec, now)
        if error is not None:
            raise error
        if job_id is None:
            job_id = f"j-{self._next('job'):06d}"
            while job_id in self.jobs:
                job_id = f"j-{self._next('job'):06d}"
        elif job_id in self.jobs:
            raise AdmissionError("request.job_id", f"job id {job_id} is already taken")
        queue = self.queues[spec.queue]
        job = Job(job_id, spec, submitted_at=now, priority=queue.priority)
        self.jobs[job_id] = job
        mode = ShareMode(spec.share_mode)
        self._emit("submit", job, now, tenant=spec.tenant, queue=spec.queue, user=spec.user,
                   job_name=spec.job_name or job_id, template=Template(spec.template).value, gpu_model=spec.gpu_model,
                   gpus=spec.gpus, share_mode=mode.value, mig_profile=spec.mig_profile if mode == ShareMode.MIG else None,
                   priority=job.priority, spec=spec.spec_fields() or None)
        self._track[job_id] = _Track(self._next("seq"), job_key(spec), now)
        self._enqueue(job)
        return job

    # --- queues of pending work -----------------------------------------------------------

    def _enqueue(self, job: Job) -> None:
        track = self._track[job.job_id]
        bisect.insort(self._pending[track.key].setdefault(job.spec.queue, []), (track.seq, job.job_id))
        self._keys_by_model[job.spec.gpu_model].add(track.key)
        self._dirty_keys.add(track.key)

    def _dequeue(self, job: Job) -> None:
        track = self._track[job.job_id]
        queues = self._pending.get(track.key, {})
        entries = queues.get(job.spec.queue, [])
        i = bisect.bisect_left(entries, (track.seq, job.job_id))
        if i < len(entries) and entries[i] == (track.seq, job.job_id):
            entries.pop(i)
        if not entries:
            queues.pop(job.spec.queue, None)

    def _touch_model(self, model: str) -> None:
        self._dirty_keys.update(self._keys_by_model.get(model, ()))

    # --- quota ----------------------------------------------------------------------------

    def _entitled(self, job: Job) -> bool:
        queue = self.queues[job.spec.queue]
        if queue.low_priority or job.spec.reservation:
            return False
        quota = queue.quota.get(job.spec.gpu_model, 0.0)
        return self._usage[(queue.name, job.spec.gpu_model)] + self._weight(job.spec) <= quota + EPS

    def _may_borrow(self, job: Job) -> bool:
        queue = self.queues[job.spec.queue]
        return queue.low_priority or (queue.can_borrow and queue.preemptible and not job.protected)

    def _rebalance(self, queue_name: str, model: str) -> None:
        """Quota in force for a queue and model: demote the newest in-quota jobs while over quota,
        then promote borrowed jobs, oldest first, while they fit."""
        queue = self.queues[queue_name]
        quota = 0.0 if queue.low_priority else queue.quota.get(model, 0.0)
        jobs = sorted((self.jobs[j] for j in self._active.get((queue_name, model), ())),
                      key=lambda job: (job.admitted_at, self._track_seq(job.job_id)))
        in_quota = [j for j in jobs if not j.borrowed]
        used = sum(self._charge[j.job_id] for j in in_quota)
        while in_quota and used > quota + EPS:
            job = in_quota.pop()
            job.borrowed = True
            used -= self._charge[job.job_id]
            self.dirty_jobs.add(job.job_id)
        for job in jobs:
            if job.borrowed and used + self._charge[job.job_id] <= quota + EPS:
                job.borrowed = False
                used += self._charge[job.job_id]
                self.dirty_jobs.add(job.job_id)
        self._usage[(queue_name, model)] = sum(self._charge[j.job_id] for j in jobs if not j.borrowed)

    def _track_seq(self, job_id: str) -> int:
        track = self._track.get(job_id)
        return track.seq if track else 0

    # --- scheduling -----------------------------------------------------------------------

    def schedule(self, now: dt.datetime) -> list[Job]:
        """Admits and starts what can run now, preempting where the rules allow. Returns every job
        started since the previous call: by this one, and preemptors that started when their
        victims let go (in `tick` at the end of the grace, or in `finish`/`cancel`/`apply_action`)."""
        for _ in range(8):  # preemption without grace requeues victims: their group is looked at again
            if not self._dirty_keys:
                break
            keys = sorted(self._dirty_keys)
            self._dirty_keys.clear()
            for key in keys:
                self._schedule_key(key, now)
        started, self._started = self._started, []
        return started

    def _head(self, queue_name: str, entries: list[tuple[int, str]]) -> tuple[int, int, str]:
        seq, job_id = entries[0]
        return (-self.jobs[job_id].priority, seq, queue_name)

    def _schedule_key(self, key: str, now: dt.datetime) -> None:
        queues = self._pending.get(key)
        if not queues:
            self._pending.pop(key, None)
            return
        blockers: list[tuple[Job, bool]] = []
        heap = [self._head(q, entries) for q, entries in queues.items() if entries]
        heapq.heapify(heap)
        deferred: list[tuple[int, int, str]] = []
        for phase in ("in_quota", "borrowing"):
            if phase == "borrowing":
                heap = deferred
                heapq.heapify(heap)
            while heap:
                head = heapq.heappop(heap)
                entries = queues.get(head[2])
                if not entries:
                    continue
                job = self.jobs[entries[0][1]]
                entitled = self._entitled(job)
                if phase == "in_quota" and not entitled:
                    deferred.append(head)
                    continue
                if not self._try(job, key, entitled, blockers, now):
                    continue  # admitting dequeues the job
                if entries:
                    heapq.heappush(heap, self._head(head[2], entries))
        for name in [q for q, entries in queues.items() if not entries]:
            del queues[name]
        if not queues:
            self._pending.pop(key, None)

    def _try(self, job: Job, key: str, entitled: bool, blockers: list[tuple[Job, bool]], now: dt.datetime) -> bool:
        """Admits the job if it may run now (True); False leaves it waiting."""
        if job.spec.reservation:
            return self._try_reservation(job, now)
        if not entitled and not self._may_borrow(job):
            return False  # quota-bound
        for blocker, blocker_entitled in blockers:
            if not self._may_pass(job, entitled, blocker, blocker_entitled):
                return False
        request = Request.of(job.spec)
        excluded = self._excluded(job, now)
        kind = (job.spec.gpu_model, ShareMode(job.spec.share_mode).value)
        free = [self._slots[s] for s in self._free[kind] if s not in excluded]
        size = self._node_size[job.spec.gpu_model]
        slots = place(request, free, size)
        victims: tuple[str, ...] = ()
        if slots is None:
            plan = self._plan(job, entitled, request, free, excluded, kind)
            if plan is None:
                blockers.append((job, entitled))
                return False
            slots, victims = plan
        self._admit(job, slots, not entitled, now, victims)
        return True

    def _try_reservation(self, job: Job, now: dt.datetime) -> bool:
        r = self._reservations[job.spec.reservation]
        if not r.start <= now < r.end:
            return False
        free = [self._slots[s] for s in r.slot_ids if s in self._free[self._kind_of[s]]]
        slots = place(Request.of(job.spec), free, self._node_size[job.spec.gpu_model])
        if slots is None:
            return False
        self._admit(job, slots, False, now, ())
        return True

    def _victim_class(self, queue: QueueSpec, borrowed: bool, protected: bool, priority: int, reservation: bool,
                      by_priority: int, by_entitled: bool) -> int | None:
        """0: borrowed backfill, 1: other borrowed, 2: in quota; None: may not be preempted by this job."""
        if protected or reservation or not (queue.preemptible or queue.low_priority):
            return None
        if borrowed:
            if by_entitled or priority < by_priority:
                return 0 if queue.low_priority else 1
            return None
        if by_entitled and priority < by_priority:
            return 2
        return None

    def _may_pass(self, job: Job, entitled: bool, blocker: Job, blocker_entitled: bool) -> bool:
        """May `job` start ahead of the blocked `blocker` (whom it cannot delay)?"""
        if entitled and not blocker_entitled:
            return True
        queue = self.queues[job.spec.queue]
        return self._victim_class(queue, not entitled, job.protected, job.priority, False, blocker.priority,
                                  blocker_entitled) is not None

    def _plan(self, job: Job, entitled: bool, request: Request, free: list[Slot], excluded: frozenset[str] | set[str],
              kind: tuple[str, str]) -> tuple[tuple[Slot, ...], tuple[str, ...]] | None:
        candidates = []
        for vid in self._running[kind]:
            victim = self.jobs[vid]
            track = self._track[vid]
            if track.grace_until is not None or (excluded and any(s.slot_id in excluded for s in victim.slots)):
                continue
            cls = self._victim_class(self.queues[victim.spec.queue], victim.borrowed, victim.protected,
                                     victim.priority, bool(victim.spec.reservation), job.priority, entitled)
            if cls is None:
                continue
            started = (victim.started_at - _EPOCH).total_seconds()
            candidates.append(((cls, victim.priority, -started, -track.seq), vid, victim.slots))
        if not candidates:
            return None
        candidates.sort()
        return plan_preemption(request, free, [(vid, slots) for _, vid, slots in candidates],
                               self._node_size[job.spec.gpu_model])

    def _base_cap(self, job: Job, now: dt.datetime) -> int | None:
        caps = [c for c in (job.spec.time_limit_s, self.queues[job.spec.queue].max_runtime_s) if c]
        if job.spec.reservation:
            caps.append(max(1, _seconds(self._reservations[job.spec.reservation].end - now)))
        return min(caps) if caps else None

    def _excluded(self, job: Job, now: dt.datetime) -> frozenset[str] | set[str]:
        """Reserved slots this (non-reservation) job may not take: those of a reservation that has
        not ended, unless the job's cap ends it before the reservation starts."""
        if not self._reservations:
            return _NONE
        cap = self._base_cap(job, now)
        out: set[str] = set()
        for r in self._reservations.values():
            if r.end <= now or (cap is not None and now + dt.timedelta(seconds=cap) <= r.start):
                continue
            out.update(r.slot_ids)
        return out

    def _admit(self, job: Job, slots: tuple[Slot, ...], borrowed: bool, now: dt.datetime,
               victims: tuple[str, ...]) -> None:
        track = self._track[job.job_id]
        self._dequeue(job)
        job.admitted_at = now
        job.borrowed = borrowed
        track.claim = tuple(s.slot_id for s in slots)
        kind = (job.spec.gpu_model, ShareMode(job.spec.share_mode).value)
        for sid in track.claim:
            self._claimed[sid] = job.job_id
            self._free[kind].discard(sid)
        self._charge[job.job_id] = sum(s.fraction for s in slots)
        if job.spec.reservation:
            reason = f"reservation {job.spec.reservation}"
        else:
            self._active[(job.spec.queue, job.spec.gpu_model)].add(job.job_id)
            self._rebalance(job.spec.queue, job.spec.gpu_model)
            reason = "borrowing idle capacity" if job.borrowed else "within quota"
        if victims:
            reason += f"; preempting {', '.join(victims)}"
        self._emit("admit", job, now, reason=reason)
        grace = self.pool.preemption_grace_s
        for vid in victims:
            victim = self.jobs[vid]
            if grace > 0:
                vtrack = self._track[vid]
                vtrack.grace_until = now + dt.timedelta(seconds=grace)
                vtrack.preempted_by = job.job_id
                heapq.heappush(self._timers, (vtrack.grace_until, _GRACE, vid, victim.attempt))
                self.dirty_jobs.add(vid)
            else:
                self._preempt(victim, now, f"preempted by job {job.job_id}")
        self._maybe_start(job, now)

    def _maybe_start(self, job: Job, now: dt.datetime) -> None:
        track = self._track.get(job.job_id)
        if job.state != JobState.PENDING or track is None or not track.claim:
            return
        if any(sid in self._holder for sid in track.claim):
            return
        slots = tuple(self._slots[sid] for sid in track.claim)
        for sid in track.claim:
            del self._claimed[sid]
            self._holder[sid] = job.job_id
        track.claim = ()
        job.state = JobState.RUNNING
        job.started_at = now
        job.first_started_at = job.first_started_at or now
        job.slots = slots
        self._running[(job.spec.gpu_model, ShareMode(job.spec.share_mode).value)].add(job.job_id)
        job.runtime_cap_s = self._base_cap(job, now)
        if job.runtime_cap_s is not None:
            heapq.heappush(self._timers, (now + dt.timedelta(seconds=job.runtime_cap_s), _CAP, job.job_id, job.attempt))
        self._emit("start", job, now, gpus=[s.placement() for s in slots])
        self._started.append(job)

    # --- ending attempts --------------------------------------------------------------------

    def _unadmit(self, job: Job) -> None:
        self._charge.pop(job.job_id, None)
        if job.spec.reservation:
            return
        active = self._active.get((job.spec.queue, job.spec.gpu_model))
        if active is not None and job.job_id in active:
            active.discard(job.job_id)
            self._rebalance(job.spec.queue, job.spec.gpu_model)

    def _release(self, job: Job, now: dt.datetime) -> list[str]:
        """Frees the running job's slots (to a claimant if one waits for them); returns the slot ids."""
        kind = (job.spec.gpu_model, ShareMode(job.spec.share_mode).value)
        claimants = set()
        released = [s.slot_id for s in job.slots]
        for sid in released:
            self._holder.pop(sid, None)
            claimant = self._claimed.get(sid)
            if claimant is None:
                self._free[kind].add(sid)
            else:
                claimants.add(claimant)
        self._running[kind].discard(job.job_id)
        job.slots = ()
        self._unadmit(job)
        self._touch_model(job.spec.gpu_model)
        for claimant in sorted(claimants):
            self._maybe_start(self.jobs[claimant], now)
        return released

    def _drop_claim(self, job: Job) -> None:
        """A job admitted but not started goes away: its claim is freed and its victims are spared."""
        track = self._track[job.job_id]
        kind = (job.spec.gpu_model, ShareMode(job.spec.share_mode).value)
        for sid in track.claim:
            self._claimed.pop(sid, None)
            holder = self._holder.get(sid)
            if holder is None:
                self._free[kind].add(sid)
            elif self._track[holder].preempted_by == job.job_id:
                self._track[holder].grace_until = None
                self._track[holder].preempted_by = None
                self.dirty_jobs.add(holder)
        track.claim = ()
        self._unadmit(job)
        self._touch_model(job.spec.gpu_model)

    def _requeue(self, job: Job, now: dt.datetime) -> None:
        job.attempt += 1
        job.state = JobState.PENDING
        job.admitted_at = job.started_at = None
        job.borrowed = False
        job.runtime_cap_s = None
        track = self._track[job.job_id]
        track.queued_at = now
        track.grace_until = track.preempted_by = None
        self.dirty_jobs.add(job.job_id)
        self._enqueue(job)

    def _preempt(self, job: Job, now: dt.datetime, reason: str) -> list[str]:
        self._emit("preempt", job, now, reason=reason)
        if job.spec.template == Template.TRAINING:
            again = f"requeued after preemption: resumes from its checkpoint ({job.spec.checkpoint_policy})"
        else:
            again = "requeued after preemption: restarts from the beginning"
        self._emit("requeue", job, now, reason=again)
        released = self._release(job, now)
        self._requeue(job, now)
        return released

    def _end(self, job: Job, now: dt.datetime, state: JobState, reason: str | None,
             exit_code: int | None) -> list[str]:
        """Finishes the job for good, running or pending."""
        self._emit("finish", job, now, state=state.value, reason=reason or None, exit_code=exit_code)
        released: list[str] = []
        if job.state == JobState.RUNNING:
            released = self._release(job, now)
        else:
            self._dequeue(job)
            if self._track[job.job_id].claim:
                self._drop_claim(job)
        job.state = state
        job.ended_at = now
        self._track.pop(job.job_id, None)
        self.dirty_jobs.add(job.job_id)
        return released

    def _job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(f"no job {job_id!r}")
        return job

    def finish(self, job_id: str, now: dt.datetime, state: JobState = JobState.COMPLETED, exit_code: int | None = 0,
               reason: str | None = None) -> Job:
        """The running work ended by itself. A failure (FAILED, OUT_OF_MEMORY, NODE_FAIL) with retry
        budget left is requeued as the next attempt; anything else finishes the job."""
        job = self._job(job_id)
        state = JobState(state)
        if job.state != JobState.RUNNING:
            raise ValueError(f"job {job_id} is {job.state.value}: only a running job can finish by itself")
        if not state.is_final:
            raise ValueError(f"job {job_id}: {state.value} is not a final state")
        queue = self.queues[job.spec.queue]
        if state in RETRYABLE and job.retries_used < queue.retry_budget:
            text = "retry after failure" + (f": {reason}" if reason else "")
            self._emit("requeue", job, now, state=state.value, reason=text, exit_code=exit_code)
            self._release(job, now)
            job.retries_used += 1
            self._requeue(job, now)
            return job
        if state in RETRYABLE and queue.retry_budget:
            reason = f"{reason or state.value.lower()} (retry budget of {queue.retry_budget} used)"
        self._end(job, now, state, reason, exit_code)
        return job

    def cancel(self, job_id: str, now: dt.datetime, actor: str, reason: str = "") -> Job:
        """The owner or an admin ends a pending or running job (finish CANCELLED)."""
        job = self._job(job_id)
        if job.state.is_final:
            raise ValueError(f"job {job_id} already ended ({job.state.value})")
        self._end(job, now, JobState.CANCELLED, f"cancelled by {actor}" + (f": {reason}" if reason else ""), None)
        return job

    # --- timers ---------------------------------------------------------------------------

    def _timer_valid(self, timer: tuple[dt.datetime, int, str, int]) -> bool:
        at, kind, job_id, attempt = timer
        job = self.jobs.get(job_id)
        if job is None or job.state != JobState.RUNNING or job.attempt != attempt:
            return False
        if kind == _CAP:
            return job.runtime_cap_s is not None and job.started_at + dt.timedelta(seconds=job.runtime_cap_s) == at
        return self._track[job_id].grace_until == at

    def next_timer(self) -> dt.datetime | None:
        """The earliest pending timer (run-time cap, preemption grace, reservation boundary)."""
        while self._timers and not self._timer_valid(self._timers[0]):
            heapq.heappop(self._timers)
        due = [self._timers[0][0]] if self._timers else []
        if self._boundaries_done < len(self._boundaries):
            due.append(self._boundaries[self._boundaries_done][0])
        return min(due) if due else None

    def tick(self, now: dt.datetime) -> list[Job]:
        """Fires the timers due at `now`: jobs past their cap end TIMEOUT, victims whose grace is
        over are preempted (their preemptor starts; `schedule` reports it), a reservation that ends
        cancels its jobs that never started. Returns the jobs whose attempt ended. Call
        `schedule(now)` after it."""
        changed: list[Job] = []
        while self._boundaries_done < len(self._boundaries) and self._boundaries[self._boundaries_done][0] <= now:
            at, name = self._boundaries[self._boundaries_done]
            self._boundaries_done += 1
            r = self._reservations[name]
            self._dirty_keys.add(f"reservation/{name}")
            for model in sorted({self._slots[s].gpu_model for s in r.slot_ids}):
                self._touch_model(model)
            if at == r.end:
                for queue_entries in list(self._pending.get(f"reservation/{name}", {}).values()):
                    for _, job_id in list(queue_entries):
                        job = self.jobs[job_id]
                        self._end(job, now, JobState.CANCELLED, f"reservation {name} ended before the job started", None)
                        changed.append(job)
        due = []
        while self._timers and self._timers[0][0] <= now:
            due.append(heapq.heappop(self._timers))
        for timer in sorted(due):
            if not self._timer_valid(timer):
                continue
            job = self.jobs[timer[2]]
            if timer[1] == _CAP:
                self._end(job, now, JobState.TIMEOUT, f"run time cap of {job.runtime_cap_s} s reached", None)
            else:
                self._preempt(job, now, f"preempted by job {self._track[job.job_id].preempted_by}")
            changed.append(job)
        return changed

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

    def _cap(self, job: Job, runtime_s: int, now: dt.datetime) -> dict:
        job.runtime_cap_s = runtime_s
        self.dirty_jobs.add(job.job_id)
        at = job.started_at + dt.timedelta(seconds=runtime_s)
        if at <= now:
            self._end(job, now, JobState.TIMEOUT, f"run time cap of {runtime_s} s reached", None)
        else:
            heapq.heappush(self._timers, (at, _CAP, job.job_id, job.attempt))
        return {}

    def _quota_problem(self, queue: QueueSpec, quota: object) -> str | None:
        """Why `quota` cannot be the queue's quota, or None."""
        if not isinstance(quota, Mapping) or not quota:
            return "a quota change needs quota: {GPU model: GPUs}"
        for model, gpus in quota.items():
            if model not in queue.gpu_models:
                return f"queue {queue.name} does not run {model} (runs {list(queue.gpu_models)})"
            if not isinstance(gpus, int | float) or isinstance(gpus, bool) or gpus < 0:
                return f"quota {model} is {gpus!r}, expected GPUs >= 0"
            if queue.low_priority and gpus > 0:
                return f"queue {queue.name} is low-priority and holds no quota"
        capacity: dict[str, float] = defaultdict(float)
        for s in self._slots.values():
            capacity[s.gpu_model] += s.fraction
        for model, gpus in quota.items():
            total = gpus + sum(q.quota.get(model, 0.0) for q in self.queues.values() if q.name != queue.name)
            if total > capacity[model] + EPS:
                return f"quotas for {model} would add up to {total:g} GPUs; the pool has {capacity[model]:g}"
        return None

    def _decide_quota_change(self, action: Action) -> _Decision:
        queue = self.queues.get(action.target)
        if queue is None:
            return _Decision(Outcome.REFUSED, f"no queue {action.target}", "queue", action.target)
        base = {"object_kind": "queue", "object_name": queue.name, "object_namespace": queue.tenant}
        problem = self._quota_problem(queue, action.quota)
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
        problem = self._quota_problem(queue, proposal["quota"])
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

    def _queue_changes(self, queue: QueueSpec, changes: Mapping) -> dict:
        """Validated, typed field values; ValueError naming the field otherwise."""
        unknown = sorted(set(changes) - set(EDITABLE_QUEUE_FIELDS))
        if unknown:
            raise ValueError(f"fields {unknown} cannot be changed; editable: {list(EDITABLE_QUEUE_FIELDS)}")
        out: dict = {}
        for name, value in changes.items():
            if name in ("priority", "retry_budget", "max_gpus_per_request"):
                low = 1 if name == "max_gpus_per_request" else 0
                if not isinstance(value, int) or isinstance(value, bool) or value < low:
                    raise ValueError(f"{name} is {value!r}, expected an integer >= {low}")
            elif name == "max_runtime_s":
                if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                    raise ValueError(f"max_runtime_s is {value!r}, expected seconds >= 1 or null")
            elif name in ("preemptible", "can_borrow"):
                if not isinstance(value, bool):
                    raise ValueError(f"{name} is {value!r}, expected true or false")
            elif name == "templates":
                try:
                    value = tuple(Template(t) for t in value)
                except ValueError as error:
                    raise ValueError(f"templates: {error}") from None
            elif name == "gpu_models":
                value = tuple(value)
                bad = [m for m in value if m not in self._models]
                if bad:
                    raise ValueError(f"gpu_models {bad} are not in the pool")
            elif name == "shared_with":
                value = tuple(value)
                bad = [t for t in value if t != "*" and t not in self.pool.tenants]
                if bad:
                    raise ValueError(f"shared_with names unknown tenants {bad}")
            out[name] = value
        if "quota" in out:
            candidate = dataclasses.replace(queue, gpu_models=out.get("gpu_models", queue.gpu_models))
            problem = self._quota_problem(candidate, out["quota"])
            if problem is not None:
                raise ValueError(f"quota: {problem}")
            out["quota"] = {m: float(v) for m, v in out["quota"].items()}
        return out

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
            typed = self._queue_changes(old, changes)
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
        job = self.jobs[job_id]
        out = job_to_dict(job)
        track = self._track.get(job_id)
        if track is not None:
            out["track"] = {"seq": track.seq, "key": track.key, "queued_at": _iso(track.queued_at),
                            "claim": list(track.claim), "grace_until": _iso(track.grace_until),
                            "preempted_by": track.preempted_by}
        return out

    def state_dict(self) -> dict:
        """Everything needed to resume, JSON-serialisable (see the module docstring)."""
        return {
            "version": STATE_VERSION,
            "queues": [queue_to_dict(self.queues[q.name]) for q in self.pool.queues],
            "jobs": [self.job_state(job_id) for job_id in self.jobs],
            "counters": dict(self._counters),
            "actions": {k: dict(v) for k, v in self._actions.items()},
            "proposals": {k: dict(v) for k, v in self._proposals.items()},
            "dirty_keys": sorted(self._dirty_keys),
            "boundaries_done": self._boundaries_done,
            "started_unreported": [j.job_id for j in self._started],
        }

    @classmethod
    def from_state(cls, pool: PoolConfig, state: Mapping, sink: records.RecordSink) -> Engine:
        """An engine that continues exactly where the one that made `state` stood."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"engine state version {state.get('version')!r}, expected {STATE_VERSION}")
        engine = cls(pool, sink)
        for data in state["queues"]:
            queue = queue_from_dict(data)
            if queue.name not in engine.queues:
                raise ValueError(f"engine state has queue {queue.name!r}, which the pool does not")
            engine.queues[queue.name] = queue
        engine._counters.update(state["counters"])
        for data in state["jobs"]:
            try:
                job = job_from_dict(data, engine._slots)
            except KeyError as error:
                raise ValueError(f"engine state: job {data.get('job_id')} holds slot {error}, not in the pool") from None
            engine.jobs[job.job_id] = job
            track_data = data.get("track")
            if track_data is None:
                continue
            track = _Track(track_data["seq"], track_data["key"], _time(track_data["queued_at"]),
                           tuple(track_data["claim"]), _time(track_data["grace_until"]), track_data["preempted_by"])
            engine._track[job.job_id] = track
            engine._restore(job, track)
        for queue_name, model in sorted(engine._active):
            engine._rebalance(queue_name, model)
        engine._actions = {k: dict(v) for k, v in state["actions"].items()}
        engine._proposals = {k: dict(v) for k, v in state["proposals"].items()}
        engine._dirty_keys = set(state["dirty_keys"])
        engine._boundaries_done = state["boundaries_done"]
        engine._started = [engine.jobs[j] for j in state.get("started_unreported", [])]
        engine.dirty_jobs.clear()
        return engine

    def _restore(self, job: Job, track: _Track) -> None:
        kind = (job.spec.gpu_model, ShareMode(job.spec.share_mode).value)
        slots: Iterable[Slot] = ()
        if job.state == JobState.RUNNING:
            slots = job.slots
            for s in job.slots:
                self._holder[s.slot_id] = job.job_id
                self._free[kind].discard(s.slot_id)
            self._running[kind].add(job.job_id)
            if job.runtime_cap_s is not None:
                heapq.heappush(self._timers, (job.started_at + dt.timedelta(seconds=job.runtime_cap_s), _CAP,
                                              job.job_id, job.attempt))
            if track.grace_until is not None:
                heapq.heappush(self._timers, (track.grace_until, _GRACE, job.job_id, job.attempt))
        elif track.claim:
            slots = [self._slots[sid] for sid in track.claim]
            for sid in track.claim:
                self._claimed[sid] = job.job_id
                self._free[kind].discard(sid)
        else:
            bisect.insort(self._pending[track.key].setdefault(job.spec.queue, []), (track.seq, job.job_id))
        self._keys_by_model[job.spec.gpu_model].add(track.key)
        if job.state == JobState.RUNNING or track.claim:
            self._charge[job.job_id] = sum(s.fraction for s in slots)
            if not job.spec.reservation:
                self._active[(job.spec.queue, job.spec.gpu_model)].add(job.job_id)
