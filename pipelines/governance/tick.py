"""One evaluation of the live idle policies against the running work of every engine: the body of
the `idle_reclaim` sensor (pipelines/assets/reclaim.py is the thin Dagster wrapper). Not pure: it calls
the engines (the allocator's API, Slurm's squeue, the Kubernetes API), appends the pulled logs to the
landing zone, records and delivers through the outbox (SQLite) and flushes the decision log; the rules
it calls (pipelines/policies/) are the pure part.

A tick, at `now` (UTC, naive):

1. pulls the allocator's event and audit logs into the landing zone (`AllocatorClient.pull`), when
   the pool runs the allocator: the engine's answers to earlier actions come back into the
   warehouse this way, closing the loop;
2. lists the running jobs and the queues of every engine it is given, through one interface
   (`pipelines.governance.running.RunningWorkReader`: the allocator, Slurm, Kueue); each engine's
   allocations carry its name (`source`), and so do their findings and actions;
3. builds the policies' inputs from the freshest data there is: the telemetry of the last
   `lookback`, from the scrape rounds the `dcgm_scrape` sensor landed or from the pool's Prometheus
   (pipelines/governance/telemetry.py; per-GPU minutes kept from earlier ticks plus those of the
   new rounds or samples -> per-allocation minutes), the running jobs' allocations, and their progress
   signals (every event and checkpoint/artifact report of the attempt in the pulled logs, its ok
   checkpoints of the last day, and the attempt's start; an engine without such logs, Slurm, gives
   the start only);
4. evaluates the live kinds (idle allocation, zombie, idle interactive, overrun);
5. plans the due steps (`plan`), where an attempt with an open finding that no longer runs in its
   engine has ended (its next step is dropped, never sent);
6. records the decisions in the outbox, delivers what is due (a remind step the engine accepted is
   also sent to the job's owner by email or chat, with `reminders`: pipelines/notify/), and flushes
   the decision log;
7. counts itself in the outbox (`Outbox.record_tick`: when, how long, a failure if anything went
   wrong), which the metrics exporter reads (pipelines/selfmetrics.py).

When an engine cannot be read (the allocator down, a refused token, squeue failing), nothing is
planned for its jobs: an empty list of running jobs would otherwise read as "every job ended"; its
open findings are left as they are, and the other engines' work is planned as usual. When the
telemetry cannot be read (Prometheus down or refusing), nothing is evaluated or planned at all:
missing minutes are no evidence that a GPU is idle, and no open finding ends for want of them. Queued actions
are still offered to the enforcers, which keep them queued with a backoff while the engine is away;
they go out, once each, when it is back. The tick never raises for a transport problem: the report
says what failed. Jobs an engine lists but that cannot be read are left out and counted in the
report (`skipped`).
"""
from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import polars as pl

from pipelines.clock import parse_utc, utc_naive
from pipelines.connectors.allocator import LANDING
from pipelines.enforcement.base import Enforcer
from pipelines.governance.live import allocation_minutes, allocations_from_jobs, recent_gpu_minutes
from pipelines.governance.outbox import DeliveryReport, Outbox
from pipelines.governance.running import AllocatorWork, RunningWork, RunningWorkReader
from pipelines.governance.telemetry import ScrapeRounds, Telemetry, TelemetryUnavailable
from pipelines.notify.reminders import Reminders
from pipelines.policies.catalog import PolicyCatalog, default_lookback
from pipelines.policies.evaluate import evaluate
from pipelines.policies.inputs import PROGRESS_SCHEMA, PolicyInputs
from pipelines.policies.model import LIVE_KINDS, empty_findings
from pipelines.policies.planner import OPEN_FINDING_LOOKBACK, DeliveredStep, PlannedAction, plan


class AllocatorReader(Protocol):
    """What the tick needs of `pipelines.connectors.allocator.AllocatorClient`."""

    def pull(self, landing: Path, source: str, max_pages: int | None = None): ...

    def running_jobs(self) -> list[dict]: ...

    def queues(self) -> list[dict]: ...


@dataclass
class TickReport:
    """What one tick saw and did; `summary()` is the sensor's tick message."""

    at: dt.datetime
    pulled: dict[str, int] = field(default_factory=dict)  # events / audit records appended
    running_jobs: int | None = None  # None: no engine could be read
    running_by_source: dict[str, int | None] = field(default_factory=dict)  # None: that engine could not be read
    skipped: Counter = field(default_factory=Counter)  # "<engine>: <reason>" -> jobs left out unread,
    # "<telemetry>: samples left out: <reason>" -> samples its answers held that could not be read
    findings: pl.DataFrame = field(default_factory=empty_findings)
    decisions: Counter = field(default_factory=Counter)  # "<action> <status>" of the decisions recorded now
    delivery: DeliveryReport = field(default_factory=DeliveryReport)
    log_lines: int = 0  # decision-log lines flushed by the tick itself
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def findings_by_policy(self) -> dict[str, int]:
        if self.findings.is_empty():
            return {}
        return dict(self.findings.group_by("policy").len().sort("policy").iter_rows())

    @property
    def decisions_by_status(self) -> dict[str, int]:
        out: Counter = Counter()
        for key, n in self.decisions.items():
            out[key.rsplit(" ", 1)[-1]] += n
        return dict(sorted(out.items()))

    @property
    def ok(self) -> bool:
        return not self.errors and not self.delivery.errors

    def summary(self) -> str:
        jobs = _running_text(self.running_jobs, self.running_by_source)
        found = ", ".join(f"{p} {n}" for p, n in self.findings_by_policy.items()) or "none"
        decided = ", ".join(f"{n} {k}" for k, n in sorted(self.decisions.items())) or "none"
        pulled = ", ".join(f"{n} {s}" for s, n in sorted(self.pulled.items())) or "nothing"
        text = (f"tick at {self.at:%Y-%m-%d %H:%M:%S}: {jobs}; findings: {found}; decisions: {decided}; "
                f"delivery: {self.delivery.summary()}; pulled: {pulled} ({self.duration_s:.2f} s)")
        problems = [*self.errors, *self.delivery.errors]
        if problems:
            text += "; problems: " + "; ".join(problems)
        if self.skipped:
            text += "; skipped: " + "; ".join(f"{n} {k}" for k, n in sorted(self.skipped.items()))
        return text

    __str__ = summary


CHECKPOINT_LOOKBACK = dt.timedelta(days=1)  # how far back a tick looks for an attempt's last ok checkpoint


def recent_progress(landing: Path, jobs: list[dict], now: dt.datetime, lookback: dt.timedelta) -> pl.DataFrame:
    """PROGRESS_SCHEMA rows of the running attempts: each one's start, every event and every checkpoint or
    artifact report of it in the pulled logs within [now - lookback, now), and its ok checkpoints of the
    last `CHECKPOINT_LOOKBACK` (is_checkpoint: the zombie policy's staleness reaches back that far)."""
    wanted = {(j["job_id"], j["attempt"]) for j in jobs}
    rows = _starts(jobs)
    since = now - lookback
    for source, reach in (("events", since), ("artifacts", min(since, now - CHECKPOINT_LOOKBACK))):
        for record in _records(landing, source, reach, now):
            try:
                key = (record["job_id"], int(record["attempt"]))
                at = parse_utc(record["ts"])
            except (ValueError, KeyError, TypeError):
                continue  # a record without a job or attempt (an MLflow one): not a progress signal here
            ok_checkpoint = record.get("kind") == "checkpoint" and record.get("status") == "ok"
            if key in wanted and (since <= at < now or (ok_checkpoint and reach <= at < now)):
                rows.append((*key, at, ok_checkpoint))
    if not rows:
        return pl.DataFrame(schema=PROGRESS_SCHEMA)
    return pl.DataFrame(rows, schema=PROGRESS_SCHEMA, orient="row").unique()


def _starts(jobs: list[dict]) -> list[tuple]:
    """PROGRESS_SCHEMA rows of the running attempts' starts."""
    return [(job["job_id"], job["attempt"], parse_utc(job["started_at"]), False) for job in jobs if job.get("started_at")]


def _records(landing: Path, source: str, since: dt.datetime, now: dt.datetime):
    """The pulled JSON records of a source in the day folders from `since` to `now` (half lines skipped)."""
    day = since.date()
    while day <= now.date():
        for path in sorted((Path(landing) / LANDING[source] / day.isoformat()).glob("*.jsonl")):
            with open(path, encoding="utf-8") as lines:
                for line in lines:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # a half line
                    if isinstance(record, dict):
                        yield record
        day += dt.timedelta(days=1)


def work_inputs(landing: Path, work: Sequence[RunningWork], now: dt.datetime,
                lookback: dt.timedelta, gpu_minutes: pl.DataFrame | None = None) -> PolicyInputs:
    """The live kinds' inputs from the landing zone and the running work of every engine read: each
    engine's allocations under its own `source`; progress from the allocator's pulled logs for its
    jobs, the attempt's start for the other engines' (they land no such logs). `gpu_minutes`: the
    telemetry's per-GPU minutes (pipelines/governance/telemetry.py; default: the landed scrape rounds')."""
    allocations = pl.concat([allocations_from_jobs(w.jobs, {q["name"]: q for q in w.queues}, source=w.source)
                             for w in work]) if work else allocations_from_jobs([])
    if gpu_minutes is None:
        gpu_minutes = recent_gpu_minutes(landing, now, lookback)
    minutes = allocation_minutes(allocations, gpu_minutes)
    logged = [j for w in work if w.source == AllocatorWork.source for j in w.jobs]
    started = [j for w in work if w.source != AllocatorWork.source for j in w.jobs]
    progress = recent_progress(landing, logged, now, lookback)
    if started:
        progress = pl.concat([progress, pl.DataFrame(_starts(started), schema=PROGRESS_SCHEMA, orient="row")]).unique()
    return PolicyInputs(allocations=allocations, minutes=minutes, progress=progress)


def live_inputs(landing: Path, jobs: list[dict], queues: list[dict], now: dt.datetime,
                lookback: dt.timedelta) -> PolicyInputs:
    """The live kinds' inputs from the landing zone and the allocator's running jobs."""
    return work_inputs(landing, [RunningWork(AllocatorWork.source, jobs, queues)], now, lookback)


class _ReadEngines:
    """The outbox as the planner's history, without the open findings of engines not read this tick:
    their work was not evaluated, so their findings neither ended nor vanished."""

    def __init__(self, outbox: Outbox, engines: set[str]):
        self.outbox = outbox
        self.engines = engines
        self._open: dict[dt.datetime, list[PlannedAction]] = {}

    def open_findings(self, since: dt.datetime) -> list[PlannedAction]:
        # read once per tick: plan_live and plan both ask, and nothing is recorded in between
        if since not in self._open:
            self._open[since] = [p for p in self.outbox.open_findings(since) if p.engine in self.engines]
        return self._open[since]

    def steps(self, finding_id: str) -> list[DeliveredStep]:
        return self.outbox.steps(finding_id)

    def steps_of(self, finding_ids) -> dict[str, list[DeliveredStep]]:
        return self.outbox.steps_of(finding_ids)

    def reclaims_since(self, since: dt.datetime) -> list[str]:
        return self.outbox.reclaims_since(since)

    def drains_since(self, since: dt.datetime) -> int:
        return self.outbox.drains_since(since)


def read_work(readers: Sequence[RunningWorkReader], report: TickReport) -> list[RunningWork]:
    """Each engine's running work, counted in `report`; an engine that cannot be read is reported and
    left out (None in `running_by_source`)."""
    read: list[RunningWork] = []
    for reader in readers:
        try:
            got = reader.read()
        except Exception as exc:  # noqa: BLE001 - nothing is planned for an engine without its running jobs
            report.errors.append(f"running jobs ({reader.source}): {_describe(exc)}; "
                                 f"nothing planned this tick for {reader.source}")
            report.running_by_source[reader.source] = None
            continue
        read.append(got)
        report.running_by_source[got.source] = len(got.jobs)
        report.skipped.update({f"{got.source}: {reason}": n for reason, n in got.skipped.items()})
    if read:
        report.running_jobs = sum(len(w.jobs) for w in read)
    return read


def read_telemetry(telemetry: Telemetry, now: dt.datetime, lookback: dt.timedelta,
                   report: TickReport) -> pl.DataFrame | None:
    """The per-GPU minutes of the lookback; None, reported, when the telemetry cannot be read: missing
    telemetry is no evidence of idleness, so nothing is evaluated or planned."""
    try:
        sampled = telemetry.read(now, lookback)
    except TelemetryUnavailable as exc:
        report.errors.append(f"telemetry ({telemetry.source}): {_describe(exc)}; nothing evaluated or planned this tick")
        return None
    report.skipped.update({f"{telemetry.source}: {reason}": n for reason, n in sampled.skipped.items()})
    return sampled.minutes


def plan_live(findings: pl.DataFrame, catalog: PolicyCatalog, outbox: Outbox, read: Sequence[RunningWork],
              now: dt.datetime) -> list[PlannedAction]:
    """The live kinds' steps due now, with the outbox as history: an attempt with an open finding
    that no longer runs in an engine read now has ended; the open findings of engines not read are
    left as they are."""
    running = {(w.source, j["job_id"], j["attempt"]) for w in read for j in w.jobs}
    history = _ReadEngines(outbox, {w.source for w in read})
    live = {k.value for k in LIVE_KINDS}
    ended = {
        (p.engine, p.job_id, p.attempt) for p in history.open_findings(now - OPEN_FINDING_LOOKBACK)
        if p.kind.value in live and (p.engine, p.job_id, p.attempt) not in running
    }
    return plan(findings, catalog, history, now, jobs_ended=ended, evaluated_kinds=LIVE_KINDS)


def governance_tick(
    now: dt.datetime,
    *,
    landing: Path,
    catalog: PolicyCatalog,
    outbox: Outbox,
    client: AllocatorReader | None,
    enforcers: Mapping[str, Enforcer],
    lookback: dt.timedelta | None = None,
    work: Sequence[RunningWorkReader] | None = None,
    reminders: Reminders | None = None,
    telemetry: Telemetry | None = None,
) -> TickReport:
    """One evaluation of the live policies at `now`; see the module docstring. `client`: the
    allocator's, whose logs are pulled (None: the pool runs no allocator); `work`: the engines whose
    running work is read (default: the allocator's, through `client`); `reminders`: how a delivered
    remind step reaches the job's owner (None: the engine's remind only); `telemetry`: where the
    per-GPU minutes come from (default: the scrape rounds in `landing`)."""
    started = time.perf_counter()
    now = utc_naive(now)
    report = TickReport(at=now)
    lookback = lookback or default_lookback(catalog)
    if client is not None:
        for source in ("events", "audit", "artifacts"):
            try:
                report.pulled[source] = client.pull(landing, source).records
            except Exception as exc:  # noqa: BLE001 - reported; the pull resumes from its cursor next tick
                report.errors.append(f"pull {source}: {_describe(exc)}")
    readers = list(work) if work is not None else [AllocatorWork(client)] if client is not None else []
    read = read_work(readers, report)
    gpu_minutes = read_telemetry(telemetry or ScrapeRounds(landing), now, lookback, report) if read else None
    if gpu_minutes is not None:
        inputs = work_inputs(landing, read, now, lookback, gpu_minutes)
        report.findings = evaluate(inputs, catalog, now, kinds=LIVE_KINDS)
        recorded = outbox.record(plan_live(report.findings, catalog, outbox, read, now), now)
        report.decisions.update(f"{p.action.value} {p.status.value}" for p in recorded)
    report.delivery = outbox.deliver(enforcers, now, reminders=reminders)
    report.log_lines = outbox.flush_log()
    report.duration_s = time.perf_counter() - started
    outbox.record_tick(now, report.duration_s, [*report.errors, *report.delivery.errors])
    return report


def _running_text(total: int | None, by_source: dict[str, int | None]) -> str:
    """`3 running jobs`, `3 running jobs (allocator 1, slurm 2)`, `allocator unreadable`."""
    if total is None:
        return f"{', '.join(by_source) or 'allocator'} unreadable"
    if len(by_source) <= 1:
        return f"{total} running jobs"
    parts = ", ".join(f"{s} {'unreadable' if n is None else n}" for s, n in by_source.items())
    return f"{total} running jobs ({parts})"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"
