"""The simulator: the allocator engine in virtual time, fed by the workload generator.

`simulate(out, days, gpus, seed, start)` writes the pipeline's landing layout under `out`: the
engine's records (`allocator_events/`, `allocator_audit/`, through `records.JsonlDaySink`), the pool
and quotas at 00:00 (`allocator_pool/`), DCGM telemetry in the `raw.dcgm_samples` contract
(`dcgm_parquet/`, at `interval_s`, with the health series of faults) and host telemetry in the
`raw.host_samples` contract (`node_exporter_parquet/`), one folder per day.

The loop is discrete-event: the next moment is the earliest of the next submission, the next
planned end of work (completion, failure, a user's cancel, a user giving up waiting, a
resubmission), a fault (`allocator.sim.faults`), the engine's next timer (run-time caps, preemption
grace) and the next midnight. At each moment it applies what is due, calls `engine.tick` if a timer
is due and then `engine.schedule`. It learns what the engine did from the records themselves (a
tee on the sink): a `start` opens the attempt's telemetry and plans how it ends; `preempt`,
`requeue` and `finish` close it; training attempts report their checkpoints and models through the
engine (`allocator.sim.checkpoints`). At each midnight it writes the day's telemetry and drops the
attempts that are over, so memory holds one day. The same seed writes the same bytes.

A platform team acts too (`allocator.sim.admin.AdminActivity`): permission grants and revokes,
quota changes, a quota proposal and its approval, through the engine's API. Idle-reclaim and drains
come from outside: a `Governance` (`pipelines.governance.simulated`) sees each attempt start and each
fault, reads the telemetry as the exporter would serve it, and acts through the same engine API.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from allocator import records
from allocator.engine import Engine
from allocator.model import (
    FINAL_FAILURES,
    Action,
    ActionKind,
    ActionResult,
    AdmissionError,
    Job,
    JobState,
    PoolConfig,
    ShareMode,
)
from allocator.pool import default_pool, pool_capacity
from allocator.sim.admin import ADMIN_ACTIVITY, Admin, AdminActivity
from allocator.sim.checkpoints import Checkpoints
from allocator.sim.faults import HOST_REPAIR_S, NODE_HEALTH_ROLE, Fault, host_action, plan_faults
from allocator.sim.health import HealthEvent, HealthSeries
from allocator.sim.hosts import HOST_SOURCE, HostTelemetry, down_steps, host_load
from allocator.sim.scaling import scale_pool
from allocator.sim.workload import (
    CALIBRATION,
    Calibration,
    PlannedJob,
    RogueProcess,
    Waste,
    Workload,
    generate_workload,
)
from allocator.telemetry import (
    ActivityProfile,
    BulkTelemetry,
    TelemetryUnit,
    Work,
    day_figures,
    epoch_seconds,
)

DEFAULT_START = dt.date(2026, 11, 1)
TELEMETRY_SOURCE = "dcgm_parquet"
_DAY = dt.timedelta(days=1)
# what happens first at the same instant: midnight, work ending, users cancelling, new work, admins
_MIDNIGHT, _END, _CANCEL, _GIVE_UP, _SUBMIT, _ADMIN, _FAULT = range(7)
_FAILED = frozenset(s.value for s in FINAL_FAILURES)
_OOM_RAMP_S = 180  # an attempt that runs out of memory holds its GPUs' memory full this long before it ends


# --- what policies acting on the simulated pool see ---------------------------------------------


class Governance(Protocol):
    """Policies acting on the simulated pool in virtual time (`pipelines.governance.simulated`)."""

    def attach(self, pool: SimulatedPool) -> None:
        """Called once before the run."""

    def job_started(self, job: Job, profile: ActivityProfile, now: dt.datetime) -> None:
        """An attempt started; `profile` is how its work will load its GPUs (when to look again)."""

    def health_event(self, event: HealthEvent, now: dt.datetime) -> None:
        """A GPU fault or an application XID happened (optional: a Governance without it ignores faults)."""


class SimulatedPool:
    """The simulation as a live pool looks to the pipeline: its engine (read it, act through it), its
    clock (ask to be called back), and each running attempt's telemetry as the exporters serve it."""

    def __init__(self, sim: _Simulation):
        self._sim = sim
        self.engine = sim.engine
        self.pool = sim.pool
        self.out = sim.out
        self.start, self.end = sim.start, sim.end
        self.interval_s = sim.bulk.interval_s  # telemetry steps: a health event shows at the next one

    def at(self, when: dt.datetime, step: Callable[..., None], *args: object) -> None:
        if when < self.end:
            self._sim.at(when, step, *args)

    def running(self, job_id: str, attempt: int) -> Job | None:
        job = self.engine.jobs.get(job_id)
        return job if job is not None and job.state == JobState.RUNNING and job.attempt == attempt else None

    def works_seen(self, job_id: str, since: dt.datetime) -> tuple[Work, ...]:
        """Every work open after `since` on the units of the job's running attempt (a shared unit's series
        sums every work on it): what `minutes(job_id, since, until)` reads, so equal works give equal
        minutes, whenever asked."""
        run = self._sim.running.get(job_id)
        if run is None:
            return ()
        sim = self._sim
        on_units = sorted(set().union(*(sim.unit_works[sim.works[wid][0].unit] for wid in run.works)))
        # in the works' order (their ids), as a unit's series sums them
        return tuple(w for w in (sim.works[wid][0] for wid in on_units) if w.end is None or w.end > since)

    def last_checkpoint(self, job: Job, at: dt.datetime) -> dt.datetime | None:
        """The running attempt's last ok checkpoint as it will stand at `at` if the attempt runs on: its
        last one reported, or a write of its plan due before `at` (a write due at `at` may come after a
        look then: not counted). At the moment being simulated, the engine's."""
        planned = self._sim.checkpoints.due_before(job.job_id, job.attempt, at)
        return job.last_checkpoint_at if planned is None else max(filter(None, (job.last_checkpoint_at, planned)))

    def act(self, action: Action, now: dt.datetime, role: str = "governance_bot") -> ActionResult:
        result = self.engine.apply_action(action, now, actor_role=role)
        self._sim.drain(now)
        return result

    def minutes(self, job_id: str, since: dt.datetime, until: dt.datetime) -> list[dict]:
        """Per telemetry step in [since, until) and per slot of the job's running attempt: slot_id,
        minute_at, activity (0..1), fb_used_mib — what its exporter would have served."""
        run = self._sim.running.get(job_id)
        if run is None:
            return []
        sim = self._sim
        mine = [sim.works[wid][0] for wid in run.works]
        open_works = self.works_seen(job_id, since)
        job = self.engine.jobs[job_id]
        slot_of_unit = {sim.bulk.unit_of(slot.slot_id): slot.slot_id for slot in job.slots}
        ordered = [w.unit for w in mine]
        stamps, activity, fb = sim.bulk.series(open_works, ordered, max(since, run.started_at), until)
        return [
            {"slot_id": slot_of_unit.get(unit, str(unit)), "minute_at": stamps, "activity": activity[i],
             "fb_used_mib": fb[i]}
            for i, unit in enumerate(ordered)
        ]


# --- the report ----------------------------------------------------------------------------------


@dataclass
class SimulationReport:
    """What was simulated and written, and figures from the simulation's own state (to cross-check
    the warehouse's metric views)."""

    start: dt.date
    days: int
    seed: int
    gpus: int  # physical GPUs
    nodes: int
    interval_s: int
    jobs_submitted: int = 0
    jobs_rejected: dict[str, int] = field(default_factory=dict)  # admission rule -> count
    events: int = 0
    audit_records: int = 0
    audit_kinds: dict[str, int] = field(default_factory=dict)  # "action decision" -> records
    samples: int = 0
    files: list[str] = field(default_factory=list)  # relative to out
    capacity_gpu_hours: float = 0.0
    allocated_gpu_hours: float = 0.0
    active_gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0  # allocated time in runs below 5% activity lasting 30 min or more
    rogue_busy_gpu_hours: float = 0.0  # unallocated GPUs at or above 5% activity
    jobs_started: int = 0
    mean_wait_s: float = 0.0  # first start - submit, over the jobs that started
    p50_wait_s: float = 0.0
    p95_wait_s: float = 0.0
    mean_wait_by_model_s: dict[str, float] = field(default_factory=dict)
    p95_wait_by_model_s: dict[str, float] = field(default_factory=dict)
    final_states: dict[str, int] = field(default_factory=dict)
    failure_rate: float = 0.0  # FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL over jobs that ended
    preemptions: int = 0
    retries: int = 0  # requeues after a failure
    planted: dict[str, int] = field(default_factory=dict)  # waste kind -> cases planted
    planted_examples: dict[str, list[str]] = field(default_factory=dict)
    borrowing_tenant: str | None = None
    borrowed_starts: int = 0  # starts of the over-using tenant's jobs on borrowed quota
    scarce_model: str | None = None
    faults: dict[str, int] = field(default_factory=dict)  # fault kind -> faults injected
    fault_kills: int = 0  # attempts a fault ended
    app_xids: int = 0  # user-code failures that raised an application XID
    host_samples: int = 0
    artifacts: dict[str, int] = field(default_factory=dict)  # "kind status" -> reports of training jobs
    preemption_lost_gpu_hours: float = 0.0  # victims' GPUs x time since their last ok checkpoint (or start)

    @property
    def allocation_rate(self) -> float:
        return self.allocated_gpu_hours / self.capacity_gpu_hours if self.capacity_gpu_hours else 0.0

    @property
    def utilisation_of_allocated(self) -> float:
        return self.active_gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours else 0.0

    @property
    def pool_utilisation(self) -> float:
        return self.active_gpu_hours / self.capacity_gpu_hours if self.capacity_gpu_hours else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["start"] = self.start.isoformat()
        out.update(allocation_rate=self.allocation_rate, utilisation_of_allocated=self.utilisation_of_allocated,
                   pool_utilisation=self.pool_utilisation)
        return out

    def summary(self) -> str:
        """A few lines for a terminal."""
        waits = ", ".join(f"{m} {s / 60:.0f} min" for m, s in sorted(self.mean_wait_by_model_s.items()))
        planted = ", ".join(f"{k} {v}" for k, v in self.planted.items())
        by_action: Counter[str] = Counter()
        for kind, n in self.audit_kinds.items():
            by_action[kind.partition(" ")[0]] += n
        audit = ", ".join(f"{k} {v}" for k, v in sorted(by_action.items()))
        return "\n".join(
            [
                (
                    f"simulated {self.days} days from {self.start} on {self.gpus} GPUs ({self.nodes} nodes), "
                    f"seed {self.seed}"
                ),
                (
                    f"jobs {self.jobs_submitted} submitted ({sum(self.jobs_rejected.values())} refused), "
                    f"{self.events} events, {self.audit_records} audit records, {self.samples} samples"
                ),
                (
                    f"allocation rate {self.allocation_rate:.1%}, utilisation of allocated "
                    f"{self.utilisation_of_allocated:.1%}, idle allocated {self.idle_gpu_hours:.0f} GPU-h"
                ),
                f"wait mean {self.mean_wait_s / 60:.1f} min, p95 {self.p95_wait_s / 60:.1f} min ({waits})",
                (
                    f"failure rate {self.failure_rate:.1%}, preemptions {self.preemptions}, "
                    f"retries {self.retries}"
                ),
                f"planted: {planted}",
                (
                    f"faults: {', '.join(f'{k} {v}' for k, v in self.faults.items()) or 'none'}; "
                    f"attempts killed {self.fault_kills}, application XIDs {self.app_xids}"
                ),
                f"audit: {audit or 'none'}",
            ]
        )


# --- the simulation --------------------------------------------------------------------------


class _Tee:
    """The engine's sink: records go to the files, and the simulator hears about starts and ends."""

    def __init__(self, sink: records.RecordSink):
        self.sink = sink
        self.notes: list[dict] = []
        self.events = 0
        self.audits = 0
        self.audit_kinds: Counter[str] = Counter()  # "action decision" -> records

    def event(self, record: dict) -> None:
        self.sink.event(record)
        self.events += 1
        if record["type"] in ("start", "preempt", "requeue", "finish"):
            self.notes.append(record)

    def audit(self, record: dict) -> None:
        self.sink.audit(record)
        self.audits += 1
        self.audit_kinds[f"{record['action']} {record['decision']}"] += 1

    def artifact(self, record: dict) -> None:
        self.sink.artifact(record)


@dataclass
class _Attempt:
    started_at: dt.datetime
    works: list[int]  # indexes into the simulator's open works


class _Simulation:
    def __init__(
        self,
        pool: PoolConfig,
        workload: Workload,
        out: Path,
        start: dt.datetime,
        days: int,
        interval_s: int,
        report: SimulationReport,
        on_progress: Callable | None,
        admin: AdminActivity | None = None,
        governance: Governance | None = None,
        write: bool = True,
        fault_scale: float | None = 1.0,
    ):
        self.pool, self.workload, self.out, self.start, self.days = pool, workload, out, start, days
        self.end = start + days * _DAY
        self.report, self.on_progress = report, on_progress
        self.write = write
        self.files = records.JsonlDaySink(out) if write else _NullSink()
        self.tee = _Tee(self.files)
        self.engine = Engine(pool, self.tee)
        self.bulk = BulkTelemetry(pool, interval_s)
        self.units: tuple[TelemetryUnit, ...] = self.bulk.table.units
        self.slot_fraction = {s.slot_id: s.fraction for s in pool.slots()}
        self.plans: dict[str, PlannedJob] = {}
        self.running: dict[str, _Attempt] = {}
        self.progress: dict[str, float] = defaultdict(float)
        self.failures: Counter[str] = Counter()
        self.works: dict[int, tuple[Work, float]] = {}  # open or ended today: work, slot fraction
        self.unit_works: defaultdict[int, set[int]] = defaultdict(set)  # the works' ids by unit
        self.work_ids = itertools.count()
        self.rogue_unit: dict[str, int] = {}
        self.heap: list[tuple] = []
        self.seq = itertools.count()
        self.rejected: Counter[str] = Counter()
        self.borrowed_starts = 0
        self.admin = None if admin is None else Admin(self, admin, report.seed)
        self.governance = governance
        self.faults = () if fault_scale is None else plan_faults(pool, start, days, report.seed, fault_scale)
        self.health: list[HealthEvent] = []  # health events not yet written (today's)
        self.health_series = HealthSeries(self.bulk.table, interval_s)
        self.hosts = HostTelemetry(pool, interval_s, start)
        self.down: dict[str, dt.datetime] = {}  # host -> when it went down, while it is down
        self.outages: list[tuple[str, dt.datetime, dt.datetime]] = []  # host, down at, back at
        self.checkpoints = Checkpoints(self, report.seed)  # training jobs' checkpoints and models

    def push(self, at: dt.datetime, kind: int, *payload: object) -> None:
        heapq.heappush(self.heap, (at, kind, next(self.seq), payload))

    def at(self, when: dt.datetime, step: Callable[..., None], *args: object) -> None:
        """Call `step(now, *args)` at `when` (after what users and their work do at that instant)."""
        self.push(when, _ADMIN, step, *args)

    def run(self) -> None:
        for plan in self.workload.jobs:
            self.push(plan.submit_at, _SUBMIT, plan)
        for k in range(self.days + 1):
            self.push(self.start + k * _DAY, _MIDNIGHT, k)
        for fault in self.faults:
            self.push(fault.at, _FAULT, fault)
        if self.admin is not None:
            self.admin.plan()
        if self.governance is not None:
            self.governance.attach(SimulatedPool(self))
        while self.heap:
            timer = self.engine.next_timer()
            now = self.heap[0][0] if timer is None else min(timer, self.heap[0][0])
            while self.heap and self.heap[0][0] == now:
                _, kind, _, payload = heapq.heappop(self.heap)
                if kind == _MIDNIGHT:
                    self.midnight(now, payload[0])
                    if now >= self.end:
                        return
                else:
                    self.handle(now, kind, payload)
            if timer is not None and timer <= now:
                self.engine.tick(now)
                self.drain(now)
            self.engine.schedule(now)
            self.drain(now)

    # --- what users and their work do ------------------------------------------------------

    def handle(self, now: dt.datetime, kind: int, payload: tuple) -> None:
        if kind == _ADMIN:
            step, *args = payload
            step(now, *args)
            return
        if kind == _FAULT:
            self.fault(now, payload[0])
            return
        if kind == _SUBMIT:
            plan: PlannedJob = payload[0]
            try:
                self.engine.submit(plan.spec, now, actor=plan.spec.user, job_id=plan.job_id)
            except AdmissionError as error:
                self.rejected[error.rule] += 1
                return
            self.plans[plan.job_id] = plan
            self.report.jobs_submitted += 1
            if plan.behaviour.patience_s is not None:
                self.push(now + dt.timedelta(seconds=plan.behaviour.patience_s), _GIVE_UP, plan.job_id)
            return
        job = self.engine.jobs.get(payload[0])
        if job is None or job.state.is_final:
            return
        if kind == _GIVE_UP:
            if job.state == JobState.PENDING and job.first_started_at is None:
                waited = (now - job.submitted_at).total_seconds() / 3600
                self.engine.cancel(job.job_id, now, job.spec.user, f"gave up waiting after {waited:.1f} h")
                self.drain(now)
            return
        _, attempt, action = payload
        if job.state != JobState.RUNNING or job.attempt != attempt:
            return
        if kind == _CANCEL:
            self.engine.cancel(job.job_id, now, job.spec.user, action)
        else:
            state, exit_code, reason, xid = action
            if xid is not None:  # user code crashed on the GPU: the driver logs it on each of the job's GPUs
                self.report.app_xids += 1
                events = [HealthEvent(h, g, now, xid) for h, g in self.physical_gpus(job.job_id)]
                self.health.extend(events)
                self.notify_health(events, now)
            self.engine.finish(job.job_id, now, state, exit_code, reason)
        self.drain(now)

    def notify_health(self, events: list[HealthEvent], now: dt.datetime) -> None:
        hook = getattr(self.governance, "health_event", None)  # optional in the protocol
        for event in events if hook is not None else ():
            hook(event, now)

    def physical_gpus(self, job_id: str) -> list[tuple[str, int]]:
        """The physical GPUs (host, index) of the job's running attempt."""
        run = self.running.get(job_id)
        if run is None:
            return []
        units = {self.units[self.works[wid][0].unit] for wid in run.works}
        return sorted({(u.host, u.gpu) for u in units})

    def fault(self, now: dt.datetime, fault: Fault) -> None:
        """A GPU fails (its health series show it) or a host goes down; the attempts on it end as the
        scheduler records them. A host that is down has nothing left to fail."""
        if fault.host in self.down:
            return
        self.report.faults[fault.kind] = self.report.faults.get(fault.kind, 0) + 1
        if fault.gpu is not None:
            event = HealthEvent(fault.host, fault.gpu, now, fault.xid, fault.dbe, fault.remap_failure)
            self.health.append(event)
            self.notify_health([event], now)
        state, exit_code, reason = fault.end
        for job_id in sorted(self.running):
            gpus = self.physical_gpus(job_id)
            hit = any(h == fault.host and (fault.gpu is None or g == fault.gpu) for h, g in gpus)
            job = self.engine.jobs[job_id]
            if hit and job.state == JobState.RUNNING:
                self.report.fault_kills += 1
                self.engine.finish(job_id, now, state, exit_code, reason)
        if fault.gpu is None:  # down until repaired; the platform's node health checker drains it meanwhile
            self.down[fault.host] = now
            if self.admin is not None:
                self.engine.apply_action(host_action(ActionKind.DRAIN, fault.host, now), now, NODE_HEALTH_ROLE)
            back = now + dt.timedelta(seconds=HOST_REPAIR_S)
            self.outages.append((fault.host, now, back))
            self.at(back, self.host_back, fault.host)
        self.drain(now)

    def host_back(self, now: dt.datetime, host: str) -> None:
        down_at = self.down.pop(host)
        if self.admin is not None:
            self.engine.apply_action(host_action(ActionKind.UNDRAIN, host, down_at), now, NODE_HEALTH_ROLE)

    def drain(self, now: dt.datetime) -> None:
        """Follow what the engine just recorded: open and close attempts."""
        notes, self.tee.notes = self.tee.notes, []
        for record in notes:
            job_id = record["job_id"]
            kind = record["type"]
            self.checkpoints.note(record, now)  # before a finished job's plan is forgotten
            if kind == "start":
                self.started(job_id, record, now)
            else:
                self.stopped(job_id, kind, record, now)

    def started(self, job_id: str, record: dict, now: dt.datetime) -> None:
        plan = self.plans[job_id]
        b = plan.behaviour
        job = self.engine.jobs[job_id]
        attempt = record["attempt"]
        ids = []
        for rank, gpu in enumerate(record["gpus"]):
            slot_id = f"{gpu['host']}/{gpu['gpu']}" + (
                f"/{gpu['gpu_instance_id']}" if gpu.get("gpu_instance_id") is not None else ""
            )
            wid, unit = next(self.work_ids), self.bulk.unit_of(slot_id)
            self.works[wid] = (Work(unit, job_id, rank, now, None, b.profile), self.slot_fraction[slot_id])
            self.unit_works[unit].add(wid)
            ids.append(wid)
        self.running[job_id] = _Attempt(now, ids)
        if attempt == 1:
            self.report.jobs_started += 1
        if job.borrowed and job.spec.tenant == self.workload.borrowing_tenant:
            self.borrowed_starts += 1
        # how this attempt ends, if nothing else ends it first
        ends: list[tuple[float, int, object]] = []
        if self.failures[job_id] < b.failing_attempts:
            ends.append((b.fail_after_s, _END, (JobState.FAILED, b.exit_code or 1, b.reason, None)))
        elif b.work_s is not None:
            ends.append(
                (max(b.work_s - self.progress[job_id], 1.0), _END, (b.outcome, b.exit_code, b.reason, b.xid))
            )
        if b.cancel_after_run_s is not None:
            ends.append((b.cancel_after_run_s, _CANCEL, _cancel_reason(b.waste)))
        if ends:
            after, kind, action = min(ends, key=lambda e: (e[0], e[1]))
            self.push(now + dt.timedelta(seconds=round(after)), kind, job_id, attempt, action)
            if kind == _END and action[0] == JobState.OUT_OF_MEMORY:
                # it fills its GPUs' memory in the last minutes before it is killed
                full = max(round(after) - _OOM_RAMP_S, 0)
                for wid in ids:
                    work, fraction = self.works[wid]
                    self.works[wid] = (
                        replace(work, profile=replace(work.profile, mem_full_after_s=full)),
                        fraction,
                    )
        if self.governance is not None:
            self.governance.job_started(job, b.profile, now)

    def stopped(self, job_id: str, kind: str, record: dict, now: dt.datetime) -> None:
        run = self.running.pop(job_id, None)
        if run is not None:
            for wid in run.works:
                work, fraction = self.works[wid]
                self.works[wid] = (replace(work, end=now), fraction)
            if kind == "preempt":  # it resumes from its last ok checkpoint; the rest is lost
                gpus = sum(self.works[wid][1] for wid in run.works)
                self.progress[job_id] += self.checkpoints.preempted(job_id, record["attempt"], run.started_at, gpus, now)
            elif kind == "requeue" and record.get("state"):
                self.failures[job_id] += 1
                self.report.retries += 1
        if kind == "preempt":
            self.report.preemptions += 1
        if kind == "finish" and record["state"] in _FAILED:
            plan = self.plans[job_id]
            if plan.behaviour.resubmits > 0:
                b = plan.behaviour
                again = replace(
                    plan,
                    job_id=_resubmitted_id(job_id),
                    submit_at=now + dt.timedelta(seconds=b.resubmit_delay_s),
                    behaviour=replace(b, resubmits=b.resubmits - 1),
                )
                self.push(again.submit_at, _SUBMIT, again)
        if kind == "finish":  # the job ended for good: no later day reads its plan or its attempts' count
            self.plans.pop(job_id, None)
            self.progress.pop(job_id, None)
            self.failures.pop(job_id, None)

    # --- each midnight: the day's telemetry, the pool snapshot --------------------------------

    def midnight(self, now: dt.datetime, k: int) -> None:
        if k > 0:
            self.files.flush()  # the finished day's records go to disk with its telemetry, not later
            self.write_day(now - _DAY)
        if k < self.days and self.write:
            snapshot = records.pool_snapshot(self.engine.current_pool(), self.engine.quotas(), now)
            self.report.files.append(
                str(records.write_pool_snapshot(self.out, snapshot).relative_to(self.out))
            )
        if k > 0 and self.on_progress is not None:
            self.on_progress(k, self.days, (now - _DAY).date())

    def write_day(self, day_start: dt.datetime) -> None:
        day_end = day_start + _DAY
        items = sorted(self.works.items())
        works = [w for _, (w, _) in items]
        fractions = [f for _, (_, f) in items]
        for rogue in self.workload.rogues:
            rogue_end = rogue.start + dt.timedelta(seconds=rogue.duration_s)
            if rogue.start < day_end and rogue_end > day_start:
                unit = self.rogue_unit.get(rogue.rogue_id)
                if unit is None:
                    unit = self.rogue_unit[rogue.rogue_id] = self.free_unit(rogue, works, rogue_end)
                works.append(Work(unit, None, 0, rogue.start, rogue_end, rogue.profile))
                fractions.append(0.0)
        health = [e for e in self.health if e.at < day_end]
        self.health = [e for e in self.health if e.at >= day_end] + HealthSeries.carry(health, day_end)
        if self.write:
            relative = Path(TELEMETRY_SOURCE) / day_start.date().isoformat() / "samples.parquet"
            times = epoch_seconds(day_start) + np.arange(0, 86400, self.bulk.interval_s, dtype=np.float64)
            down = down_steps(self.hosts.hosts, self.outages, times)  # down hosts report nothing
            by_host = {h: down[i] for i, h in enumerate(self.hosts.hosts) if down[i].any()}
            extra = [self.health_series.table(health, times, relative.as_posix(), by_host)] if health else []
            absent = down[[self.hosts.hosts.index(u.host) for u in self.units]]
            day = self.bulk.day(
                day_start.date(), works, relative.as_posix(), fractions, path=self.out / relative, extra=extra,
                load=True, absent=absent,
            )
            self.report.files.append(relative.as_posix())
            host_file = Path(HOST_SOURCE) / day_start.date().isoformat() / "samples.parquet"
            self.report.host_samples += self.hosts.day(
                day_start, host_load(self.hosts.hosts, self.bulk.table, day.work_load), self.out / host_file,
                host_file.as_posix(), down
            )
            self.report.files.append(host_file.as_posix())
            self.report.samples += day.samples
            figures = (day.allocated_gpu_hours, day.active_gpu_hours, day.idle_gpu_hours, day.rogue_busy_gpu_hours)
        else:
            figures = day_figures(self.bulk, day_start, works, fractions)
        self.report.allocated_gpu_hours += figures[0]
        self.report.active_gpu_hours += figures[1]
        self.report.idle_gpu_hours += figures[2]
        self.report.rogue_busy_gpu_hours += figures[3]
        # what ended by midnight is written: keep only the open attempts
        for wid in [wid for wid, (w, _) in self.works.items() if w.end is not None and w.end <= day_end]:
            self.unit_works[self.works.pop(wid)[0].unit].discard(wid)

    def free_unit(self, rogue: RogueProcess, works: list[Work], rogue_end: dt.datetime) -> int:
        """The whole GPU of the rogue's model that jobs hold least during its window (ties: first)."""
        candidates = [
            i
            for i, u in enumerate(self.units)
            if u.gpu_model == rogue.gpu_model and u.share_mode == ShareMode.WHOLE
        ]
        held: dict[int, float] = defaultdict(float)
        for w in works:
            if w.job_id is None:
                continue
            lo, hi = max(w.start, rogue.start), min(w.end or rogue_end, rogue_end)
            if hi > lo:
                held[w.unit] += (hi - lo).total_seconds()
        return min(candidates, key=lambda i: (held[i], i))


class _NullSink:
    """Records go nowhere (a replay that needs only the report's figures)."""

    paths: frozenset[Path] = frozenset()

    def event(self, record: dict) -> None:
        pass

    def audit(self, record: dict) -> None:
        pass

    def artifact(self, record: dict) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _cancel_reason(waste: Waste | None) -> str:
    match waste:
        case Waste.ZOMBIE:
            return "killed a job that hung"
        case Waste.FORGOTTEN_INTERACTIVE:
            return "closed a forgotten session"
    return "no longer needed"


def _resubmitted_id(job_id: str) -> str:
    root, _, n = job_id.partition("-r")
    return f"{root}-r{int(n) + 1 if n else 1}"


def _clear(out: Path, start: dt.date, days: int) -> None:
    """The sink appends: remove what an earlier run wrote for these days so the output is this run's."""
    names = {
        records.EVENTS_SOURCE: "events.jsonl",
        records.AUDIT_SOURCE: "audit.jsonl",
        records.ARTIFACTS_SOURCE: "artifacts.jsonl",
        records.POOL_SOURCE: "pool.json",
        TELEMETRY_SOURCE: "samples.parquet",
        HOST_SOURCE: "samples.parquet",
    }
    for k in range(days):
        day = (start + dt.timedelta(days=k)).isoformat()
        for source, name in names.items():
            (out / source / day / name).unlink(missing_ok=True)


def simulate(
    out: Path,
    days: int,
    gpus: int | None = None,
    seed: int = 7,
    start: dt.date = DEFAULT_START,
    on_progress: Callable[[int, int, dt.date], None] | None = None,
    *,
    interval_s: int = 60,
    pool: PoolConfig | None = None,
    calibration: Calibration = CALIBRATION,
    admin: AdminActivity | None = ADMIN_ACTIVITY,
    governance: Governance | None = None,
    workload: Workload | None = None,
    write: bool = True,
    fault_scale: float | None = 1.0,
) -> SimulationReport:
    """Simulate `days` days of the pool from `start` and write the landing layout under `out`.

    gpus: scale the pool (default pool, or `pool`) to about this many GPUs (None: as it is).
    on_progress(done_days, days, day) is called after each day is written.
    admin: what the platform team does (permissions, quotas); None: nothing.
    governance: policies acting on idle and runaway work (None: no idle-reclaim; with neither, the
    audit log stays empty).
    workload: run these jobs (e.g. a month's demand read back from a warehouse) instead of generating them.
    write: False writes nothing under `out` (no records, pool snapshots or telemetry files; a governance
    keeps its own state): the report's figures are still computed, from the same telemetry values.
    fault_scale: multiplies the published fault rates (`allocator.sim.faults`; 0 keeps the faults every
    run has); None: no fault at all (a what-if replay: faults drawn per pool shape would be noise).
    """
    if days < 1:
        raise ValueError(f"days {days}: expected at least 1")
    if interval_s <= 0 or 86400 % interval_s:
        raise ValueError(f"interval_s {interval_s}: must divide a day into whole steps")
    out = Path(out)
    pool = pool or default_pool()
    if gpus is not None:
        pool = scale_pool(pool, gpus)
    begin = dt.datetime.combine(start, dt.time())
    if workload is None:
        workload = generate_workload(pool, begin, days, seed, calibration)
    if write:
        _clear(out, start, days)
    report = SimulationReport(
        start=start,
        days=days,
        seed=seed,
        gpus=sum(len(n.gpus) for n in pool.nodes),
        nodes=len(pool.nodes),
        interval_s=interval_s,
    )
    sim = _Simulation(
        pool, workload, out, begin, days, interval_s, report, on_progress, admin, governance, write, fault_scale
    )
    try:
        sim.run()
    finally:
        sim.files.close()
    report.files = sorted(set(report.files) | {str(p.relative_to(out)) for p in sim.files.paths})
    _figures(report, sim, pool, workload)
    return report


def _figures(report: SimulationReport, sim: _Simulation, pool: PoolConfig, workload: Workload) -> None:
    report.events, report.audit_records = sim.tee.events, sim.tee.audits
    report.audit_kinds = dict(sorted(sim.tee.audit_kinds.items()))
    report.jobs_rejected = dict(sorted(sim.rejected.items()))
    report.artifacts = dict(sorted(sim.checkpoints.written.items()))
    report.preemption_lost_gpu_hours = sim.checkpoints.lost_gpu_s / 3600
    report.capacity_gpu_hours = sum(pool_capacity(pool).values()) * 24 * report.days
    jobs = list(sim.engine.jobs.values())
    waits = [
        (j.spec.gpu_model, (j.first_started_at - j.submitted_at).total_seconds())
        for j in jobs
        if j.first_started_at is not None
    ]
    if waits:
        values = np.array([w for _, w in waits])
        report.mean_wait_s = float(values.mean())
        report.p50_wait_s = float(np.percentile(values, 50))
        report.p95_wait_s = float(np.percentile(values, 95))
        by_model: dict[str, list[float]] = defaultdict(list)
        for model, w in waits:
            by_model[model].append(w)
        report.mean_wait_by_model_s = {m: float(np.mean(v)) for m, v in sorted(by_model.items())}
        report.p95_wait_by_model_s = {m: float(np.percentile(v, 95)) for m, v in sorted(by_model.items())}
    ended = Counter(j.state.value for j in jobs if j.state.is_final)
    report.final_states = dict(sorted(ended.items()))
    finished = sum(ended.values())
    failed = sum(n for s, n in ended.items() if JobState(s) in FINAL_FAILURES)
    report.failure_rate = failed / finished if finished else 0.0
    report.planted = {str(k): len(v) for k, v in workload.planted.items()}
    report.planted_examples = {str(k): list(v[:5]) for k, v in workload.planted.items()}
    report.borrowing_tenant = workload.borrowing_tenant
    report.borrowed_starts = sim.borrowed_starts
    report.scarce_model = workload.scarce_model
