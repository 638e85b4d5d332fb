"""The pool's scheduling rules, pure and clock-free (every call takes `now`): `Scheduler` keeps
the pool's jobs, queues of pending work, quota usage, slots and timers, and writes its records
to a `RecordSink`. `allocator.engine.Engine` is the scheduler with enforcement actions, admin
changes and state save/restore on top; callers use that.

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
  in-quota work; within a class the lowest priority, then the least work lost (`work_at_risk`:
  GPUs x time since the attempt's last ok checkpoint, or since its start without one), then the
  most recently started. `prefer_fresh_checkpoints = False` drops the work-lost step (to measure it);
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

Drained nodes and GPUs (`drain`/`undrain`, enforcement actions of `allocator.engine`). A slot of a
drained node or GPU takes no new work: placement, preemption plans (a job holding a drained slot
is no victim: its slots could not be given away) and reservations all skip it, as they skip
reserved slots. What runs there, and a job already admitted there waiting for its victims' grace,
keeps going. Node and GPU drains are separate: undraining a node leaves its drained GPUs drained.

Run-time caps and retries. A started attempt's cap is the smallest of the job's `time_limit_s`,
the queue's `max_runtime_s` and, on a reservation, the time left in it; `cap_runtime` shortens it
for the current attempt. At the cap, `tick` ends the job TIMEOUT (not retried). A job that ends
FAILED, OUT_OF_MEMORY or NODE_FAIL with retries left in its queue's `retry_budget` is requeued
(`requeue` with the state, exit code and reason "retry after failure: ...") and runs again as the
next attempt; past the budget it finishes with that state. Preemptions do not use the budget.
"""
from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import heapq
from collections import defaultdict
from collections.abc import Iterable

from allocator import records
from allocator.admission import EPS, PoolShape, admission_error
from allocator.model import (
    AdmissionError,
    Job,
    JobSpec,
    JobState,
    PoolConfig,
    QueueSpec,
    ShareMode,
    Slot,
    Template,
)
from allocator.placement import Request, place, plan_preemption
from allocator.state import Track

RETRYABLE = frozenset({JobState.FAILED, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL})
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


def _seconds(delta: dt.timedelta) -> int:
    return int(delta.total_seconds())


def work_at_risk(job: Job, now: dt.datetime) -> float:
    """The GPU-seconds a preemption of the running `job` at `now` would lose: its GPUs (fraction-weighted)
    x the time since its current attempt's last ok checkpoint, or since its start when it has none."""
    since = job.last_checkpoint_at or job.started_at or now
    return sum(s.fraction for s in job.slots) * max((now - since).total_seconds(), 0.0)


# --- the scheduler ----------------------------------------------------------------------------


class Scheduler:
    """The pool's state and scheduling rules (see the module docstring)."""

    def __init__(self, pool: PoolConfig, sink: records.RecordSink) -> None:
        self.pool = pool
        self.sink = sink
        self.queues: dict[str, QueueSpec] = {q.name: q for q in pool.queues}
        self.jobs: dict[str, Job] = {}
        self.dirty_jobs: set[str] = set()
        self.prefer_fresh_checkpoints = True  # equal victims: the least work lost first (module docstring)
        self._shape = shape = PoolShape.of(pool)
        self._kind_of: dict[str, tuple[str, str]] = {
            sid: (s.gpu_model, ShareMode(s.share_mode).value) for sid, s in shape.slots.items()}
        self._free: dict[tuple[str, str], set[str]] = defaultdict(set)
        for sid, kind in self._kind_of.items():
            self._free[kind].add(sid)
        self._holder: dict[str, str] = {}
        self._claimed: dict[str, str] = {}
        self._running: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._boundaries = sorted((t, r.name) for r in pool.reservations for t in (r.start, r.end))
        self._boundaries_done = 0
        self._track: dict[str, Track] = {}
        self._pending: dict[str, dict[str, list[tuple[int, str]]]] = defaultdict(dict)
        self._keys_by_model: dict[str, set[str]] = defaultdict(set)
        self._dirty_keys: set[str] = set()
        self._active: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._usage: dict[tuple[str, str], float] = defaultdict(float)
        self._charge: dict[str, float] = {}
        self._timers: list[tuple[dt.datetime, int, str, int]] = []
        self._counters = {"event": 0, "audit": 0, "job": 0, "seq": 0, "proposal": 0, "request": 0}
        self._started: list[Job] = []
        self._drained: dict[str, dict] = {}  # node or host/gpu -> how it was drained (key, reason, at, actor)
        self._drained_slots: frozenset[str] = _NONE

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

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        """Per queue: (jobs waiting, jobs running). Reads the live jobs only, not every job ever seen."""
        counts = {name: [0, 0] for name in self.queues}
        for job_id in self._track:
            job = self.jobs[job_id]
            counts[job.spec.queue][job.state == JobState.RUNNING] += 1
        return {name: (waiting, running) for name, (waiting, running) in counts.items()}

    def drained(self) -> dict[str, dict]:
        """Drained nodes and GPUs (`host` or `host/gpu`) → how they were drained."""
        return {target: dict(info) for target, info in self._drained.items()}

    def drained_slots(self) -> frozenset[str]:
        """The slot ids that take no new work: those of drained nodes and GPUs."""
        return self._drained_slots

    def target_slots(self, node: str, gpu: int | None) -> list[str]:
        """The slot ids of a node, or of one of its GPUs, in slot order; empty when the pool has none."""
        return [
            sid for sid, s in self._shape.slots.items() if s.host == node and (gpu is None or s.gpu == gpu)
        ]

    def _set_drained(self, drained: dict[str, dict]) -> None:
        """The drained targets in force; work waiting for capacity they give back is looked at again."""
        before = self._drained_slots
        self._drained = drained
        slots: set[str] = set()
        for target in drained:
            node, _, gpu = target.partition("/")
            slots.update(self.target_slots(node, int(gpu) if gpu else None))
        self._drained_slots = frozenset(slots)
        for model in sorted({self._shape.slots[s].gpu_model for s in before - self._drained_slots}):
            self._touch_model(model)  # reservation groups included: they are keyed by their jobs' model

    def current_pool(self) -> PoolConfig:
        """The pool with the queue settings in force (for `records.pool_snapshot`)."""
        return dataclasses.replace(self.pool, queues=tuple(self.queues[q.name] for q in self.pool.queues))

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

    def admission_error(self, spec: JobSpec, now: dt.datetime) -> AdmissionError | None:
        """The first rule `spec` breaks, or None (what `submit` would refuse, without submitting)."""
        return admission_error(spec, now, self.queues, self._shape)

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
        self._track[job_id] = Track(self._next("seq"), job_key(spec), now)
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
        return self._usage[(queue.name, job.spec.gpu_model)] + self._shape.weight(job.spec) <= quota + EPS

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
        free = [self._shape.slots[s] for s in self._free[kind] if s not in excluded]
        size = self._shape.node_size[job.spec.gpu_model]
        slots = place(request, free, size)
        victims: tuple[str, ...] = ()
        if slots is None:
            plan = self._plan(job, entitled, request, free, excluded, kind, now)
            if plan is None:
                blockers.append((job, entitled))
                return False
            slots, victims = plan
        self._admit(job, slots, not entitled, now, victims)
        return True

    def _try_reservation(self, job: Job, now: dt.datetime) -> bool:
        r = self._shape.reservations[job.spec.reservation]
        if not r.start <= now < r.end:
            return False
        free = [
            self._shape.slots[s]
            for s in r.slot_ids
            if s in self._free[self._kind_of[s]] and s not in self._drained_slots
        ]
        slots = place(Request.of(job.spec), free, self._shape.node_size[job.spec.gpu_model])
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
              kind: tuple[str, str], now: dt.datetime) -> tuple[tuple[Slot, ...], tuple[str, ...]] | None:
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
            lost = work_at_risk(victim, now) if self.prefer_fresh_checkpoints else 0.0
            candidates.append(((cls, victim.priority, lost, -started, -track.seq), vid, victim.slots))
        if not candidates:
            return None
        candidates.sort()
        return plan_preemption(request, free, [(vid, slots) for _, vid, slots in candidates],
                               self._shape.node_size[job.spec.gpu_model])

    def _base_cap(self, job: Job, now: dt.datetime) -> int | None:
        caps = [c for c in (job.spec.time_limit_s, self.queues[job.spec.queue].max_runtime_s) if c]
        if job.spec.reservation:
            caps.append(max(1, _seconds(self._shape.reservations[job.spec.reservation].end - now)))
        return min(caps) if caps else None

    def _excluded(self, job: Job, now: dt.datetime) -> frozenset[str] | set[str]:
        """Slots this (non-reservation) job may not take: drained ones, and the reserved ones of a
        reservation that has not ended, unless the job's cap ends it before the reservation starts."""
        if not self._shape.reservations:
            return self._drained_slots
        cap = self._base_cap(job, now)
        out: set[str] = set(self._drained_slots)
        for r in self._shape.reservations.values():
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
        slots = tuple(self._shape.slots[sid] for sid in track.claim)
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
            r = self._shape.reservations[name]
            self._dirty_keys.add(f"reservation/{name}")
            for model in sorted({self._shape.slots[s].gpu_model for s in r.slot_ids}):
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

    def _cap(self, job: Job, runtime_s: int, now: dt.datetime) -> dict:
        """A shorter cap for the running attempt (`cap_runtime`); past already, the job ends TIMEOUT now."""
        job.runtime_cap_s = runtime_s
        self.dirty_jobs.add(job.job_id)
        at = job.started_at + dt.timedelta(seconds=runtime_s)
        if at <= now:
            self._end(job, now, JobState.TIMEOUT, f"run time cap of {runtime_s} s reached", None)
        else:
            heapq.heappush(self._timers, (at, _CAP, job.job_id, job.attempt))
        return {}

    def _restore(self, job: Job, track: Track) -> None:
        """Rebuilds the indexes, claims and timers of a live job read from a saved state."""
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
            slots = [self._shape.slots[sid] for sid in track.claim]
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
