"""The pipeline's live policies acting on the simulated pool, in virtual time.

`SimulatedGovernance` plugs into `allocator.sim.simulator.simulate(governance=...)`. It does what the
`idle_reclaim` sensor does against a live allocator — the same frames, `evaluate`, `plan`, the
outbox and its decision log — with two differences that keep a month fast and exact:

- It looks when a finding is possible rather than every minute: at an attempt's start it reads the
  attempt's activity profile (when the work stops, which GPUs never work, the declared run time)
  and asks to be called back when a live policy's threshold could first be crossed, one telemetry
  minute later (the sensor sees a minute once it is over). Work that keeps its GPUs busy is never
  idle for a window, so it is never looked at. After a decision it comes back when the next step is
  due. The looks due at the same minute are one tick: their attempts' findings come from one
  `evaluate`, then each attempt is planned and recorded in turn, as separate looks would be.
- An evaluation's cost grows with the policies it runs, hardly with the attempts: so a pass also
  evaluates, each at its own moment (the policies' per-attempt `evaluated_at`), the looks of the
  same policies due in the next `ahead_by` (2 hours) not evaluated yet, and the looks each look of
  the pass may ask for next (`_follow_ups`: the next step of its policies, the zombie policy's
  checkpoint falling due). An attempt looked at at several moments is evaluated under another name
  at each (`alias`). The pass keeps the findings with what they read (`_evaluated_on`: the attempt's
  record, its works' telemetry, for the zombie policy its last checkpoint as it will stand then,
  from the simulator's plan of its writes). A look due later takes them when all of that is still
  the same, which gives the findings an evaluation at its minute would; else it is evaluated then.
- Its telemetry is the simulator's own (`SimulatedPool.minutes`), the values the day's Parquet
  file will hold, and actions go to the engine in process (`EngineEnforcer`). A share of answers is
  "lost" on the way back, as on a real network, so the outbox re-sends and the engine answers
  already_done: the ledger shows each action took effect once.
- The gpu-health policy (drains) reads the simulator's health events (`health_event`) as the
  warehouse's metrics.gpu_health_events will hold them: each event in the minute of the first DCGM
  sample that shows it, XIDs classed by models/seeds/xid_codes.csv, and one telemetry row per GPU
  per hour. It looks once a hardware fault's minute is over (a threshold can only be crossed then)
  and when an undrain can become due (healthy_hours after a drain or the last fault). Its telemetry
  rows do not stop while a host is down (the warehouse has none then): an undrain due during an
  outage is decided at once here, after the outage from the warehouse.
"""
from __future__ import annotations

import csv
import datetime as dt
import functools
import json
import math
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl

from allocator.model import Action, ActionResult, Job
from allocator.sim.health import HealthEvent
from allocator.sim.simulator import SimulatedPool
from allocator.store import job_view
from allocator.telemetry import ActivityProfile
from pipelines.clock import parse_utc
from pipelines.contracts import DecisionStatus, PolicyKind, StepAction
from pipelines.draws import unit_of
from pipelines.enforcement.allocator import DeliveryError
from pipelines.governance.live import allocations_from_jobs
from pipelines.governance.outbox import Outbox
from pipelines.paths import MODELS_DIR
from pipelines.policies.catalog import PolicyCatalog, default_lookback
from pipelines.policies.evaluate import evaluate
from pipelines.policies.health import PLATFORM, TELEMETRY_SIGNAL, health_lookback
from pipelines.policies.idle import (
    CHECKPOINT_TOLERANCE,
    IDLE_KINDS,
    STALE_IDLE_MINUTES,
    checkpoint_interval_s,
)
from pipelines.policies.inputs import (
    ALLOCATION_SCHEMA,
    HEALTH_SCHEMA,
    MINUTE_SCHEMA,
    PROGRESS_SCHEMA,
    PolicyInputs,
)
from pipelines.policies.model import PlannedAction, empty_findings
from pipelines.policies.planner import RATE_WINDOW, plan

WRITER = "simulated"
_MINUTE = dt.timedelta(minutes=1)
_HOUR = dt.timedelta(hours=1)
AHEAD = dt.timedelta(hours=2)  # how far ahead a pass evaluates the looks already due
XID_CODES = MODELS_DIR / "seeds" / "xid_codes.csv"


class EngineEnforcer:
    """The simulated engine behind the Enforcer interface. `lose_answers`: the share of first
    deliveries whose answer is lost after the engine applied the action (decided by the key)."""

    engine = "allocator"

    def __init__(self, pool: SimulatedPool, lose_answers: float = 0.0):
        self.pool, self.lose_answers = pool, lose_answers
        self.sent: Counter[str] = Counter()
        self.acted_on: set[str] = set()  # jobs an action reached since the caller last cleared it

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        self.sent[action.idempotency_key] += 1
        self.acted_on.add(action.target)
        result = self.pool.act(action, now)
        if self.sent[action.idempotency_key] == 1 and unit_of(action.idempotency_key) < self.lose_answers:
            raise DeliveryError(f"answer to {action.idempotency_key} lost on the way back (simulated)")
        return result


class _JobHistory:
    """The outbox as history, narrowed to one attempt: a check of one job must not read the absence
    of other jobs' findings as those findings having ended."""

    def __init__(self, outbox: Outbox, job_id: str, attempt: int):
        self.outbox, self.job_id, self.attempt = outbox, job_id, attempt

    def steps(self, finding_id: str):
        return self.outbox.steps(finding_id)

    def steps_of(self, finding_ids):
        return self.outbox.steps_of(finding_ids)

    def reclaims_since(self, since: dt.datetime) -> list[str]:
        return self.outbox.reclaims_since(since)

    def drains_since(self, since: dt.datetime) -> int:
        return self.outbox.drains_since(since)

    def open_findings(self, since: dt.datetime):
        return self.outbox.open_findings(since, self.job_id, self.attempt)


class SimulatedGovernance:
    """Live policies on the simulated pool; decisions land in `<out>/governance_actions/<day>/`."""

    def __init__(self, catalog: PolicyCatalog, state_dir: Path, lose_answers: float = 0.1,
                 ahead_by: dt.timedelta = AHEAD):
        self.catalog, self.state_dir, self.lose_answers, self.ahead_by = catalog, Path(state_dir), lose_answers, ahead_by
        self.checks = 0  # looks
        self.passes = 0  # evaluations, each over one or more looks
        self.reused = 0  # looks that took findings evaluated ahead
        self.decisions: Counter[str] = Counter()

    # -- the Governance protocol ------------------------------------------------------------------

    def attach(self, pool: SimulatedPool) -> None:
        self.pool = pool
        # a run writes its own decisions: an earlier run's outbox and log for these days go
        shutil.rmtree(self.state_dir, ignore_errors=True)
        day = pool.start.date()
        while day < pool.end.date():
            shutil.rmtree(pool.out / "governance_actions" / day.isoformat(), ignore_errors=True)
            day += dt.timedelta(days=1)
        # the decision log is written at the end of the run (_close): nothing reads it before
        self.outbox = Outbox(self.state_dir / "outbox.db", pool.out, writer=WRITER, durable=False, flush_each=False)
        self.with_findings: set[tuple[str, int]] = set()  # attempts with a decision recorded
        self.due: dict[dt.datetime, list[tuple[str, int, tuple[PolicyKind, ...]]]] = {}  # looks per minute
        # looks evaluated ahead, per minute: (job_id, attempt, kinds) -> (what they were evaluated on, findings)
        self.ahead: dict[dt.datetime, dict[tuple[str, int, tuple[PolicyKind, ...]], tuple[tuple, pl.DataFrame]]] = {}
        self.enforcer = EngineEnforcer(pool, self.lose_answers)
        # per running attempt: its API record and queue as last seen, and its allocation rows then
        self.allocation_rows: dict[tuple[str, int], tuple[tuple, _AttemptRows]] = {}
        self.forget_above = 1024
        self.lookback = {kind: default_lookback(self.catalog, (kind,)) for kind in PolicyKind}
        self.health_rows: list[dict] = []  # HEALTH_SCHEMA rows of the events so far (telemetry rows: built per look)
        self.health_looks: set[dt.datetime] = set()
        self.health_lookback = health_lookback(self.catalog)
        pool.at(pool.end - dt.timedelta(seconds=1), self._close)

    def job_started(self, job: Job, profile: ActivityProfile, now: dt.datetime) -> None:
        for at, kind in sorted(set(self._possible_findings(job, profile, now))):
            self._look_at(at, job.job_id, job.attempt, (kind,))

    def health_event(self, event: HealthEvent, now: dt.datetime) -> None:
        """A health signal on a GPU: its rows as metrics.gpu_health_events will hold them, and, for a
        hardware fault, a look once the minute that shows it is over."""
        if not self.catalog.policies_of(PolicyKind.GPU_HEALTH):
            return
        minute = self._shown_at(event.at)
        rows = health_rows(event, minute)
        self.health_rows.extend(rows)
        if any(r["is_hardware_fault"] for r in rows):
            self._health_look_at(minute + _MINUTE)

    def _shown_at(self, at: dt.datetime) -> dt.datetime:
        """The minute of the first telemetry sample at or after `at` (the exporter shows it then)."""
        step = dt.timedelta(seconds=self.pool.interval_s)
        since = at - self.pool.start
        sample = self.pool.start + step * math.ceil(since / step)
        return sample.replace(second=0, microsecond=0)

    def _look_at(self, at: dt.datetime, job_id: str, attempt: int, kinds: tuple[PolicyKind, ...]) -> None:
        """Look at this attempt at `at`, in the tick of every look due then."""
        if at >= self.pool.end:
            return
        due = self.due.setdefault(at, [])
        if not due:
            self.pool.at(at, self._tick)
        due.append((job_id, attempt, kinds))

    # -- when to look -----------------------------------------------------------------------------

    def _rule_minutes(self, policy: str, job: Job, *names: str) -> float | None:
        rule = self.catalog.rule(policy, queue=job.spec.queue, template=job.spec.template.value)
        if rule.params.get("enabled", True) is False:
            return None
        return sum(float(rule.params[n]) for n in names if rule.params.get(n) is not None) or None

    def _possible_findings(self, job: Job, profile: ActivityProfile,
                           now: dt.datetime) -> list[tuple[dt.datetime, PolicyKind]]:
        """(moment, kind): when a live policy could first fire for this attempt, given how its work behaves."""
        idle_since: list[dt.datetime] = []
        if profile.busy_for_s is not None:
            idle_since.append(now + dt.timedelta(seconds=profile.busy_for_s))
        if profile.working_gpus is not None and profile.working_gpus < len(job.slots):
            idle_since.append(now)  # GPUs that never work: idle from the start
        waits: list[tuple[float, PolicyKind]] = []
        for name in self.catalog.policies_of(PolicyKind.IDLE_ALLOCATION):
            waits.append((self._rule_minutes(name, job, "window_minutes") or math.nan, PolicyKind.IDLE_ALLOCATION))
        for name in self.catalog.policies_of(PolicyKind.IDLE_INTERACTIVE):
            reminder = job.spec.idle_reminder_s
            minutes = reminder / 60 if reminder else self._rule_minutes(name, job, "remind_after_minutes")
            if self._rule_minutes(name, job, "remind_after_minutes") is not None:  # enabled for this job
                waits.append((minutes or math.nan, PolicyKind.IDLE_INTERACTIVE))
        for name in self.catalog.policies_of(PolicyKind.ZOMBIE):
            waits.append((self._rule_minutes(name, job, "limit_minutes") or math.nan, PolicyKind.ZOMBIE))
            if self._checkpoint_interval_s(job) is not None and self._rule_minutes(name, job, "limit_minutes"):
                # a training job that stopped checkpointing: idle this long may do (`check` looks again
                # when its checkpoint falls due, if that is later)
                waits.append((float(STALE_IDLE_MINUTES), PolicyKind.ZOMBIE))
        moments = [(start + dt.timedelta(minutes=w), kind) for start in idle_since for w, kind in waits
                   if not math.isnan(w)]
        if job.spec.expected_runtime_s:
            for name in self.catalog.policies_of(PolicyKind.OVERRUN):
                rule = self.catalog.rule(name, queue=job.spec.queue, template=job.spec.template.value)
                factor = rule.params.get("expected_runtime_factor")
                if rule.params.get("enabled", True) is not False and factor:
                    at = now + dt.timedelta(seconds=job.spec.expected_runtime_s * float(factor))
                    moments.append((at, PolicyKind.OVERRUN))
        # the sensor sees a minute once it is over
        return [(_next_minute(m) + _MINUTE, kind) for m, kind in moments]

    @staticmethod
    def _checkpoint_interval_s(job: Job) -> float | None:
        """A training job's declared checkpoint interval (None: not a training job, or no time interval)."""
        return checkpoint_interval_s(job.spec.checkpoint_policy) if job.spec.template.value == "training" else None

    def _checkpoint_due(self, job: Job, at: dt.datetime) -> dt.datetime | None:
        """When a running training job's checkpoint is overdue (the zombie policy's reading), as of its last
        ok checkpoint at `at` (or its start)."""
        interval = self._checkpoint_interval_s(job)
        if interval is None or job.started_at is None:
            return None
        last = self.pool.last_checkpoint(job, at)
        return (last or job.started_at) + dt.timedelta(seconds=interval * CHECKPOINT_TOLERANCE)

    # -- a tick: what the sensor's tick does, for the attempts due now --------------------------------

    def _tick(self, now: dt.datetime) -> None:
        """Every look due now: their running attempts' findings (from a pass ahead whose inputs still
        hold, else from one pass now that also looks ahead), then each look planned, recorded and
        delivered in the order it was asked for. A look whose attempt an earlier look of this tick acted
        on is evaluated again on its own, as it would have been."""
        looks = self.due.pop(now)
        ahead = self.ahead.pop(now, {})
        for at in [at for at in self.ahead if at < now]:  # follow-ups evaluated ahead that never came
            del self.ahead[at]
        batch: dict[tuple[str, int, tuple[PolicyKind, ...]], Job] = {}
        for look in looks:
            job = self.pool.running(*look[:2])
            if job is not None:
                batch[look] = job
        per_look: dict[tuple[str, int, tuple[PolicyKind, ...]], pl.DataFrame] = {}
        for look, job in batch.items():
            seen = ahead.get(look)
            if seen is not None and seen[0] == self._evaluated_on(job, now, look[2]):
                per_look[look] = seen[1]
                self.reused += 1
        missing = [(now, job, look[2]) for look, job in batch.items() if look not in per_look]
        if missing:
            per_look |= self._evaluate_ahead(missing, now)
        self.enforcer.acted_on.clear()
        for look in looks:
            fresh = look in per_look and look[0] not in self.enforcer.acted_on
            self.check(now, *look, per_look[look] if fresh else None)

    def _evaluate_ahead(self, looks: list[tuple[dt.datetime, Job, tuple[PolicyKind, ...]]],
                        now: dt.datetime) -> dict[tuple[str, int, tuple[PolicyKind, ...]], pl.DataFrame]:
        """The findings of these looks due now, from one pass that also evaluates, each at its own
        moment, the looks due within `ahead_by` not evaluated yet and the looks each look of the pass
        may ask for next (`_follow_ups`, unless `ahead_by` is 0). Those are kept with what they were
        evaluated on (`_evaluated_on`): at their tick, a look whose attempt, works and checkpoints are
        still the same takes them instead of a pass of its own."""
        needed = {k for _, _, kinds in looks for k in kinds}  # a pass's cost grows with its policies, not its looks
        horizon = now + self.ahead_by
        planned = {(at, job.job_id, job.attempt, kinds) for at, job, kinds in looks}
        later: list[tuple[dt.datetime, Job, tuple[PolicyKind, ...]]] = []

        def plan_ahead(at: dt.datetime, job: Job, kinds: tuple[PolicyKind, ...]) -> None:
            key = (at, job.job_id, job.attempt, kinds)
            if key not in planned and (job.job_id, job.attempt, kinds) not in self.ahead.get(at, {}):
                planned.add(key)
                later.append((at, job, kinds))

        for at in sorted(at for at in self.due if now < at <= horizon):
            for job_id, attempt, kinds in self.due[at]:
                job = self.pool.running(job_id, attempt)
                if job is not None and needed.issuperset(kinds):
                    plan_ahead(at, job, kinds)
        if self.ahead_by:
            for at, job, kinds in [*looks, *later]:
                for follow_up in self._follow_ups(job, at, kinds):
                    plan_ahead(follow_up, job, kinds)
        found = self._looks_evaluated([*looks, *later])
        for (at, job, kinds), findings in zip(later, found[len(looks):]):
            self.ahead.setdefault(at, {})[(job.job_id, job.attempt, kinds)] = (
                self._evaluated_on(job, at, kinds), findings)
        return {(job.job_id, job.attempt, kinds): findings for (_, job, kinds), findings in zip(looks, found)}

    def _follow_ups(self, job: Job, at: dt.datetime, kinds: tuple[PolicyKind, ...]) -> set[dt.datetime]:
        """When a look at `at` may ask to look again (`check`): a later step of its policies, as due
        after a step decided then; for the zombie policy, when the attempt's checkpoint falls due as of
        `at`. A guess, checked like any look evaluated ahead: one that does not come costs a row."""
        moments = set()
        for kind in kinds:
            for name in self.catalog.policies_of(kind):
                rule = self.catalog.rule(name, queue=job.spec.queue, template=job.spec.template.value)
                moments.update(at + max(dt.timedelta(seconds=step.after_s), _MINUTE) for step in rule.steps[1:])
        due = self._checkpoint_due(job, at) if PolicyKind.ZOMBIE in kinds else None
        if due is not None and due >= at:
            moments.add(_next_minute(due) + _MINUTE)
        return {m for m in moments if at < m < self.pool.end}

    def _evaluated_on(self, job: Job, at: dt.datetime, kinds: tuple[PolicyKind, ...]) -> tuple:
        """All a look at `at` reads of its attempt that can change after it is evaluated: the attempt's
        record and queue; for the zombie policy its last ok checkpoint; for the idle kinds the works on
        its units (its minutes' source)."""
        return (self._record(job), self.pool.last_checkpoint(job, at) if PolicyKind.ZOMBIE in kinds else None,
                self.pool.works_seen(job.job_id, at - self._lookback(job, kinds)) if _reads_minutes(kinds) else ())

    def _looks_evaluated(self, looks: list[tuple[dt.datetime, Job, tuple[PolicyKind, ...]]]) -> list[pl.DataFrame]:
        """Each look's findings of its kinds for its attempt, from one pass, in the order of `looks`. An
        attempt looked at more than once is evaluated at each moment under another name (`alias`):
        the policies judge each attempt on its own rows, so its findings are those of a pass of its own."""
        seen: Counter[tuple[str, int]] = Counter()
        aliases = []
        for _, job, _ in looks:
            aliases.append(alias(job.job_id, seen[(job.job_id, job.attempt)]))
            seen[(job.job_id, job.attempt)] += 1
        found = self._evaluate(looks, aliases)
        if found.is_empty():
            return [found] * len(looks)
        # each look's rows: its alias, attempt and the kinds it asked for, under the job id again
        asked = pl.DataFrame(
            [(name, job.attempt, k.value, i) for i, ((_, job, kinds), name) in enumerate(zip(looks, aliases)) for k in kinds],
            schema={"job_id": pl.String, "attempt": pl.Int64, "kind": pl.String, "look": pl.Int64}, orient="row")
        parts = (found.join(asked, on=["job_id", "attempt", "kind"], maintain_order="left")
                 .with_columns(unaliased_texts())
                 .partition_by("look", as_dict=True, include_key=False))
        return [parts.get((i,), found.clear()) for i in range(len(looks))]

    def _evaluate(self, looks: list[tuple[dt.datetime, Job, tuple[PolicyKind, ...]]], aliases: list[str]) -> pl.DataFrame:
        """Findings of every look's kinds for its attempt, each attempt evaluated at its look's moment
        under its alias (a kind another look asked for may show up for this attempt too; the caller
        keeps the kinds each look asked for)."""
        self.passes += 1
        kinds = tuple(dict.fromkeys(k for _, _, ks in looks for k in ks))
        return evaluate(self._inputs(looks, aliases), self.catalog, max(at for at, _, _ in looks), kinds=kinds)

    def _lookback(self, job: Job, kinds: tuple[PolicyKind, ...]) -> dt.timedelta:
        lookback = max(self.lookback[k] for k in kinds)
        if PolicyKind.IDLE_INTERACTIVE in kinds and job.spec.idle_reminder_s:  # a session's own reminder
            lookback = max(lookback, dt.timedelta(seconds=job.spec.idle_reminder_s + 600))
        return lookback

    def check(self, now: dt.datetime, job_id: str, attempt: int, kinds: tuple[PolicyKind, ...],
              findings: pl.DataFrame | None = None) -> None:
        """What the sensor's tick does, for one attempt and the policy kinds that may fire now.
        `findings`: the attempt's findings of these kinds when the tick's pass already has them."""
        self.checks += 1
        history = _JobHistory(self.outbox, job_id, attempt)
        job = self.pool.running(job_id, attempt)
        if job is None:
            if (job_id, attempt) not in self.with_findings:
                return
            planned = plan(empty_findings(), self.catalog, history, now, jobs_ended=[(EngineEnforcer.engine, job_id, attempt)],
                           evaluated_kinds=kinds)
        else:
            if findings is None:
                [findings] = self._looks_evaluated([(now, job, kinds)])
            planned = plan(findings, self.catalog, history, now, evaluated_kinds=kinds)
        recorded = self.outbox.record(planned, now)
        if recorded:
            self.with_findings.add((job_id, attempt))
        self.decisions.update(f"{p.action.value} {p.status.value}" for p in recorded)
        self._deliver_queued(recorded, now)
        if job is not None:
            for at, kind in self._next_steps_due(job, now, kinds):
                self._look_at(at, job_id, attempt, (kind,))
            due = self._checkpoint_due(job, now) if PolicyKind.ZOMBIE in kinds else None
            if due is not None and due >= now:  # idle, but its checkpoint is not overdue yet: look again then
                self._look_at(_next_minute(due) + _MINUTE, job_id, attempt, (PolicyKind.ZOMBIE,))

    def _deliver(self, now: dt.datetime) -> None:
        report = self.outbox.deliver({"allocator": self.enforcer}, now)
        for retry in report.retried:
            self.pool.at(max(retry.next_attempt_at, now + dt.timedelta(seconds=1)), self._retry)

    def _deliver_queued(self, recorded: list[PlannedAction], now: dt.datetime) -> None:
        """Deliver when these decisions queued an action; nothing else can be due (a retry comes back
        through _retry at its time)."""
        if any(p.status == DecisionStatus.QUEUED for p in recorded):
            self._deliver(now)

    def _retry(self, now: dt.datetime) -> None:
        self._deliver(now)

    def _next_steps_due(self, job: Job, now: dt.datetime,
                        kinds: tuple[PolicyKind, ...]) -> list[tuple[dt.datetime, PolicyKind]]:
        """When the next step of each of the attempt's open findings of these kinds is due (a finding's
        chain of checks is its own: one check per step)."""
        due: list[tuple[dt.datetime, PolicyKind]] = []
        for previous in self.outbox.open_findings(now - dt.timedelta(days=7), job.job_id, job.attempt):
            if previous.kind not in kinds:
                continue
            rule = self.catalog.rule(previous.policy, queue=job.spec.queue, template=job.spec.template.value)
            taken = self.outbox.steps(previous.finding_id)
            following = max(s.step_index for s in taken) + 1 if taken else 0
            if following < len(rule.steps) and previous.step_index == following - 1:
                last = max(s.decided_at for s in taken)
                at = max(last + dt.timedelta(seconds=rule.steps[following].after_s), now + _MINUTE)
                due.append((at, previous.kind))
        return sorted(set(due))

    def _inputs(self, looks: list[tuple[dt.datetime, Job, tuple[PolicyKind, ...]]], aliases: list[str]) -> PolicyInputs:
        """The policies' frames for these running attempts, each at its look's moment (evaluated_at)
        under its alias, with its telemetry over its kinds' lookback before it (none where only overrun
        looks: it reads the run time alone), built from the simulator's arrays in one go."""
        allocations, allocation_of = self._allocations([(job, now, name) for (now, job, _), name in zip(looks, aliases)])
        ids, lengths, stamps, activity, fb = [], [], [], [], []
        # progress: each attempt's start event; its work reports (checkpoints, logs) while it works
        progress = {"job_id": [], "attempt": [], "at": [], "is_checkpoint": []}
        for (now, job, kinds), name in zip(looks, aliases):
            if not _reads_minutes(kinds):
                continue
            lookback = self._lookback(job, kinds)
            progress["job_id"].append(name), progress["attempt"].append(job.attempt)
            progress["at"].append(job.started_at), progress["is_checkpoint"].append(False)
            checkpoint = self.pool.last_checkpoint(job, now)  # its last ok checkpoint report at its moment
            if checkpoint is not None:
                progress["job_id"].append(name), progress["attempt"].append(job.attempt)
                progress["at"].append(checkpoint), progress["is_checkpoint"].append(True)
            busy_until = None
            for s in self.pool.minutes(job.job_id, now - lookback, now):
                ids.append(allocation_of[(name, s["slot_id"])])
                lengths.append(len(s["minute_at"]))
                stamps.append(s["minute_at"]), activity.append(s["activity"]), fb.append(s["fb_used_mib"])
                busy = ~(s["activity"] < 0.05)  # NaN counts as busy, as in Polars' ordering
                if busy.any():
                    last = s["minute_at"][busy].max()
                    busy_until = last if busy_until is None else max(busy_until, last)
            if busy_until is not None:
                progress["job_id"].append(name), progress["attempt"].append(job.attempt)
                progress["at"].append(busy_until.astype(dt.datetime)), progress["is_checkpoint"].append(False)
        minutes = pl.DataFrame({
            "allocation_id": pl.Series(ids, dtype=pl.String).gather(np.repeat(np.arange(len(ids)), lengths)),
            "minute_at": np.concatenate(stamps), "activity": np.concatenate(activity),
            "fb_used_mib": np.concatenate(fb),
        }, schema=MINUTE_SCHEMA) if ids else None
        return PolicyInputs(allocations=allocations, minutes=minutes,
                            progress=pl.DataFrame(progress, schema=PROGRESS_SCHEMA))

    def _record(self, job: Job) -> tuple:
        """Everything the attempt's API record (`job_view`) and queue give its allocation rows, as values
        compared by equality: the spec and slots are frozen dataclasses, the rest plain values."""
        queue = self.pool.engine.queues[job.spec.queue]
        return (job.job_id, job.state, job.attempt, job.priority, job.submitted_at, job.admitted_at,
                job.started_at, job.first_started_at, job.ended_at, job.slots, job.borrowed, job.retries_used,
                job.runtime_cap_s, job.spec, queue.max_runtime_s, queue.low_priority)

    def _allocations(self, looks: list[tuple[Job, dt.datetime, str]]) -> tuple[pl.DataFrame, dict[tuple[str, str], str]]:
        """`allocations_from_jobs` of these attempts, each evaluated at its moment under its alias, and each
        (alias, slot id)'s allocation id. An attempt's rows are built once while its API record and queue
        stay the same (a job's rows do not depend on the other jobs') and kept as values: a pass's frame is
        then one constructor, whatever the number of its looks."""
        jobs = list({(job.job_id, job.attempt): job for job, _, _ in looks}.values())
        seen = {(job.job_id, job.attempt): self._record(job) for job in jobs}
        missing = [job for job in jobs if self.allocation_rows.get((job.job_id, job.attempt), (None,))[0]
                   != seen[(job.job_id, job.attempt)]]
        if missing:
            if len(self.allocation_rows) >= self.forget_above:  # ended attempts are never looked at again
                self.allocation_rows = {k: v for k, v in self.allocation_rows.items() if self.pool.running(*k)}
                self.forget_above = max(1024, 2 * len(self.allocation_rows))
            queues = {q.name: {"max_runtime_s": q.max_runtime_s, "low_priority": q.low_priority}
                      for q in (self.pool.engine.queues[name] for name in {job.spec.queue for job in missing})}
            built = allocations_from_jobs([job_view(job) for job in missing], queues)
            values = {name: built.get_column(name).to_list() for name in _ROW_COLUMNS}
            rows_of: dict[tuple[str, int], list[int]] = {}  # an attempt's rows are consecutive, in the jobs' order
            for i, key in enumerate(zip(values["job_id"], values["attempt"])):
                rows_of.setdefault(key, [i, i])[1] = i + 1
            for job in missing:
                key = (job.job_id, job.attempt)
                first, end = rows_of.get(key, (0, 0))
                self.allocation_rows[key] = (seen[key], _AttemptRows({c: v[first:end] for c, v in values.items()}))
        columns: dict[str, list] = {name: [] for name in ALLOCATION_SCHEMA}
        allocation_of = {}
        for job, now, name in looks:
            rows = self.allocation_rows[(job.job_id, job.attempt)][1]
            aliased = rows.aliased(job.job_id, name)
            for column, values in aliased.items():
                columns[column].extend(values)
            columns["evaluated_at"].extend([now] * rows.height)
            allocation_of.update(zip(zip([name] * rows.height, rows.slot_ids), aliased["allocation_id"]))
        return pl.DataFrame(columns, schema=ALLOCATION_SCHEMA), allocation_of

    # -- gpu-health: drains of GPUs and nodes with repeated hardware faults ---------------------------

    def _health_look_at(self, at: dt.datetime) -> None:
        if at < self.pool.end and at not in self.health_looks:
            self.health_looks.add(at)
            self.pool.at(at, self._health_tick)

    def _health_tick(self, now: dt.datetime) -> None:
        """What the daily run does for gpu_health, at a moment a step can be due: evaluate over the
        health frame, plan against the whole outbox, record, deliver what is queued."""
        self.health_looks.discard(now)
        kinds = (PolicyKind.GPU_HEALTH,)
        found = evaluate(PolicyInputs(allocations=None, minutes=None, health=self._health_frame(now)),
                         self.catalog, now, kinds=kinds)
        recorded = self.outbox.record(plan(found, self.catalog, self.outbox, now, evaluated_kinds=kinds), now)
        self.decisions.update(f"{p.action.value} {p.status.value}" for p in recorded)
        self._deliver_queued(recorded, now)
        if any(p.status == DecisionStatus.RATE_LIMITED for p in recorded):
            self._health_look_at(now + RATE_WINDOW)  # the drains counted now have left the window by then
        for at in sorted(self._undrains_possible(found, now)):
            self._health_look_at(at)

    def _undrains_possible(self, found: pl.DataFrame, now: dt.datetime) -> set[dt.datetime]:
        """When an undrain can become due: healthy_hours after a drain's decision or after a drained
        target's last fault, whichever is later (both are asked for; a look with nothing due records nothing)."""
        moments = set()
        for finding in self.outbox.open_findings(now - self.health_lookback):
            if finding.kind == PolicyKind.GPU_HEALTH and finding.action == StepAction.DRAIN:
                healthy = self._healthy(finding.policy)
                moments.add(self.outbox.steps(finding.finding_id)[-1].decided_at + healthy)
        for policy, evidence in found.select("policy", "evidence").iter_rows():
            last_fault = parse_utc(json.loads(evidence)["last_fault_at"])
            moments.add(last_fault + self._healthy(policy))
        return {m for m in moments if m > now}

    def _healthy(self, policy: str) -> dt.timedelta:
        params = self.catalog.rule(policy, queue=PLATFORM, template=PLATFORM).params
        return dt.timedelta(hours=float(params["healthy_hours"]))

    def _health_frame(self, now: dt.datetime) -> pl.DataFrame:
        """The health events of the lookback before `now`, and one telemetry row per hour before `now`
        (its minutes with telemetry) for every GPU of a host with events."""
        since = now - self.health_lookback
        self.health_rows = [r for r in self.health_rows if r["minute_at"] >= since]
        events = [r for r in self.health_rows if r["minute_at"] < now]
        hosts = {r["host"] for r in events}
        first = max(self.pool.start, _floor_hour(since) + (_HOUR if _floor_hour(since) < since else dt.timedelta()))
        hours = []
        while first < now:
            hours.append((first, min(_HOUR, now - first) // _MINUTE))
            first += _HOUR
        telemetry = [
            {"host": node.host, "gpu": gpu.index, "minute_at": hour, "signal": TELEMETRY_SIGNAL, "xid": None,
             "event_count": float(minutes), "is_hardware_fault": False, "engine": EngineEnforcer.engine}
            for node in self.pool.pool.nodes if node.host in hosts for gpu in node.gpus for hour, minutes in hours
        ]
        return pl.DataFrame(events + telemetry, schema=HEALTH_SCHEMA)

    def _close(self, now: dt.datetime) -> None:
        self._deliver(now)
        self.outbox.flush_log()
        self.outbox.close()


@functools.cache
def xid_faults(path: Path = XID_CODES) -> dict[int, bool]:
    """XID -> is_hardware_fault, as the seed lists them (application-class codes are never faults)."""
    with path.open(newline="") as f:
        return {int(r["xid"]): r["is_hardware_fault"] == "true" and r["class"] != "application"
                for r in csv.DictReader(f)}


def is_hardware_xid(xid: int) -> bool:
    """As marts.fct_gpu_health_events classes it: the seed's is_hardware_fault; a code the seed does not
    list is a non-application XID, a hardware fault."""
    return xid_faults().get(xid, True)


def health_rows(event: HealthEvent, minute: dt.datetime) -> list[dict]:
    """HEALTH_SCHEMA rows of one event, as marts.fct_gpu_health_events writes them from the DCGM
    series: the XID, the double-bit ECC errors with the rows they retire, the row-remap failure."""
    base = {"host": event.host, "gpu": event.gpu, "minute_at": minute, "xid": None, "engine": EngineEnforcer.engine}
    rows = []
    if event.xid is not None:
        rows.append({**base, "signal": "xid", "xid": event.xid, "event_count": 1.0,
                     "is_hardware_fault": is_hardware_xid(event.xid)})
    if event.dbe:
        rows.append({**base, "signal": "ecc_dbe", "event_count": float(event.dbe), "is_hardware_fault": True})
        rows.append({**base, "signal": "remapped_rows", "event_count": float(event.dbe), "is_hardware_fault": False})
    if event.remap_failure:
        rows.append({**base, "signal": "row_remap_failure", "event_count": 1.0, "is_hardware_fault": True})
    return rows


def decision_log(out: Path) -> list[dict]:
    """Every record of the decision logs a run wrote under `out`, in order (compare two with `difference`)."""
    return [json.loads(line) for path in sorted(out.glob("governance_actions/*/*.jsonl"))
            for line in path.read_text().splitlines()]


def difference(a, b, rel: float = 1e-9, path: str = "") -> str | None:
    """Where two values (dicts and lists of them included) first differ, as a path and both values; None
    when they are equal, floats within `rel` of each other: one evaluation pass over more looks may sum a
    finding's GPU-hours or mean activity in another order, which moves the last bits and nothing else."""
    if isinstance(a, float) and isinstance(b, float):
        return None if math.isclose(a, b, rel_tol=rel, abs_tol=1e-12) else f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return next((d for k in a if (d := difference(a[k], b[k], rel, f"{path}.{k}")) is not None), None)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := difference(x, y, rel, f"{path}[{i}]")) is not None),
                    None)
    return None if a == b else f"{path}: {str(a)[:200]} != {str(b)[:200]}"


def alias(job_id: str, n: int) -> str:
    """The name under which a pass evaluates an attempt's n-th look: its job id (n = 0), else the job id
    and a mark of the look (`unaliased_texts` takes the mark out again)."""
    return job_id if n == 0 else f"{job_id}{_mark(n)}"


class _AttemptRows:
    """An attempt's allocation rows (`allocations_from_jobs`) as values per ALLOCATION_SCHEMA column, with each
    row's slot id (host/gpu[/instance], as the simulator's minutes name a slot)."""

    def __init__(self, values: dict[str, list]):
        self.height = len(values["allocation_id"])
        self.columns = {name: values[name] for name in ALLOCATION_SCHEMA if name != "evaluated_at"}
        self.slot_ids = [None if host is None or gpu is None else f"{host}/{gpu}" + ("" if instance is None else f"/{instance}")
                         for host, gpu, instance in zip(values["host"], values["gpu"], values["gpu_instance_id"])]

    def aliased(self, job_id: str, name: str) -> dict[str, list]:
        """The rows under an alias: `aliased_ids` of the allocation ids, the alias for the job id."""
        if name == job_id:
            return self.columns
        return self.columns | {"job_id": [name] * self.height,
                               "allocation_id": aliased_ids(self.columns["allocation_id"], job_id, name)}


_ROW_COLUMNS = [*(name for name in ALLOCATION_SCHEMA if name != "evaluated_at"), "gpu_instance_id"]


def aliased_ids(allocation_ids: list[str], job_id: str, name: str) -> list[str]:
    """An attempt's allocation ids under an alias: the mark after its job id goes before each (before, so
    that the attempt's allocation ids keep their order)."""
    mark = name.removeprefix(job_id)
    return [mark + a for a in allocation_ids]


def unaliased_texts() -> pl.Expr:
    """Every text of findings evaluated under aliases as evaluated under the job id: the look's mark leaves
    every text it entered (the job id, the finding id, the allocation ids in the evidence)."""
    return pl.col(pl.String).str.replace_all(_MARKS, "")


def _mark(n: int) -> str:
    # "|" is in no job id the engine assigns ("j-000123") and JSON writes it as it is
    return f"|look{n}|"


_MARKS = r"\|look[0-9]+\|"  # every `_mark`


def _reads_minutes(kinds: tuple[PolicyKind, ...]) -> bool:
    """Whether a look of these kinds reads its attempt's minutes and progress (the overrun policy does not)."""
    return any(k in IDLE_KINDS for k in kinds)


def _floor_hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _next_minute(t: dt.datetime) -> dt.datetime:
    floor = t.replace(second=0, microsecond=0)
    return floor if floor == t else floor + _MINUTE


