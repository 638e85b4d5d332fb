"""The replay's input: a window's demand and pool, read back from the warehouse.

`load_demand` turns every job the warehouse saw submitted in the window into a `PlannedJob` with the
behaviour it showed (per attempt: how long it ran and how it ended; how long its user waited before
giving up; how busy its GPUs were and when they went idle), and the pool as it was on the window's
first day (GPUs, queues, quotas; the quota changes made during the window are replayed at the
midnight they appear). Reads only; `pipelines/capacity/replay.py` runs it through the simulator.

Assumptions (docs/whatif.md): a job reclaimed by governance would have run until the reclaim ledger's
`would_end_at` (run-time limit, else declared end, else +24 h); a job its user gave up on before it
started gets the median run of its template's completed jobs; a job that started gets a patience drawn
from the month's (`PatienceCurve`) beyond the wait it had; jobs submitted before the window and
reservations are not replayed.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from allocator.model import (
    GpuSpec,
    JobSpec,
    JobState,
    NodeSpec,
    PoolConfig,
    QueueSpec,
    ShareMode,
    Template,
)
from allocator.pool import default_pool, validate_pool
from allocator.sim.workload import Behaviour, PlannedJob, Waste, Workload
from allocator.telemetry import ActivityProfile, typical_profile
from pipelines.draws import unit_of

_DAY = dt.timedelta(days=1)
_RESUBMIT = re.compile(r"^(?P<root>.+)-r(?P<n>\d+)$")
_BUDGET_NOTE = re.compile(r"\s*\(retry budget of \d+ used\)$")
_STATES = {s.value: s for s in JobState}


@dataclass(frozen=True)
class Demand:
    """A window's demand and pool, read back from a warehouse."""

    start: dt.datetime
    days: int
    pool: PoolConfig
    workload: Workload
    quota_changes: tuple[tuple[dt.datetime, str, dict[str, float]], ...]  # (midnight, queue, quota)
    governed: bool  # the observed window had governance decisions: the baseline replays with policies on
    notes: Mapping[str, int]  # how many jobs each assumption touched


def _month_window(con: duckdb.DuckDBPyConnection, month: str | None, days: int | None) -> tuple[dt.date, int]:
    if month is None:
        last = con.execute("select max(submitted_at) from marts.dim_jobs").fetchone()[0]
        if last is None:
            raise ValueError("warehouse: marts.dim_jobs holds no jobs; load a month first (gpupool demo)")
        first = dt.date(last.year, last.month, 1)
    else:
        try:
            first = dt.date.fromisoformat(f"{month}-01")
        except ValueError:
            raise ValueError(f"--month {month!r}: expected YYYY-MM") from None
    following = dt.date(first.year + first.month // 12, first.month % 12 + 1, 1)
    loaded = con.execute(
        "select min(day), max(day) from metrics.pool_daily where day >= ? and day < ?", [first, following]
    ).fetchone()
    if loaded[0] is None:
        raise ValueError(f"month {first:%Y-%m}: no days loaded in metrics.pool_daily")
    first = loaded[0]
    window = (loaded[1] - first).days + 1
    if days is not None:
        if days < 1:
            raise ValueError(f"--days {days}: expected at least 1")
        window = min(days, window)
    return first, window


def _pool(con: duckdb.DuckDBPyConnection, day: dt.date) -> tuple[PoolConfig, list[tuple[dt.datetime, str, dict]]]:
    """The pool of the day's first snapshot (inventory and quotas); queue rules the warehouse does not
    keep (templates, backfill, borrowing, sharing) come from the snapshot file when it is readable,
    else from the default pool's queue of that name, else the allocator's defaults."""
    snap = con.execute(
        "select min(snapshot_at) from staging.stg_pool__gpu_inventory where snapshot_at >= ? and snapshot_at < ?",
        [day, day + _DAY],
    ).fetchone()[0]
    if snap is None:
        snap = con.execute(
            "select max(snapshot_at) from staging.stg_pool__gpu_inventory where snapshot_at < ?", [day + _DAY]
        ).fetchone()[0]
    if snap is None:
        raise ValueError(f"warehouse: no GPU inventory snapshot on or before {day}")
    rows = con.execute(
        """select host, gpu, gpu_model, share_mode, gpu_instance_id, gpu_instance_profile, node_pool
           from staging.stg_pool__gpu_inventory where snapshot_at = ? order by host, gpu, gpu_instance_id""",
        [snap],
    ).fetchall()
    gpus: dict[tuple[str, int], list] = {}
    node_pools: dict[str, str | None] = {}
    for host, gpu, model, mode, instance, profile, node_pool in rows:
        entry = gpus.setdefault((host, gpu), [model, ShareMode(mode), [], 0])
        if entry[1] == ShareMode.MIG and profile:
            entry[2].append((instance, profile))
        entry[3] += 1
        node_pools[host] = node_pool
    by_host: dict[str, list[GpuSpec]] = defaultdict(list)
    for (host, gpu), (model, mode, instances, count) in sorted(gpus.items()):
        layout = tuple(p for _, p in sorted(instances)) if mode == ShareMode.MIG else ()
        replicas = count if mode == ShareMode.TIMESLICE else 1
        by_host[host].append(GpuSpec(host, gpu, model, mode, layout, replicas))
    nodes = tuple(NodeSpec(h, tuple(g), node_pools[h]) for h, g in by_host.items())

    quota_rows = con.execute(
        """select snapshot_at, queue, tenant, gpu_model, quota_gpus, priority, preemptible, max_gpus_per_request,
                  max_runtime_s, retry_budget, source_file
           from staging.stg_pool__queue_quotas where snapshot_at >= ? order by snapshot_at, queue, gpu_model""",
        [snap],
    ).fetchall()
    first_rows = [r for r in quota_rows if r[0] == snap]
    rules = _snapshot_rules(first_rows[0][10] if first_rows else None)
    known = {q.name: q for q in default_pool().queues}
    queues: dict[str, QueueSpec] = {}
    for _, queue, tenant, model, quota, priority, preemptible, max_gpus, max_runtime, retry, _ in first_rows:
        q = queues.get(queue)
        if q is None:
            base = rules.get(queue) or known.get(queue)
            q = QueueSpec(queue, tenant, (), {}, priority, preemptible, max_gpus,
                          int(max_runtime) if max_runtime is not None else None, retry)
            if base is not None:
                q = dataclasses.replace(q, templates=base.templates, low_priority=base.low_priority,
                                        can_borrow=base.can_borrow, shared_with=base.shared_with)
        quotas = dict(q.quota)
        if quota and not q.low_priority:
            quotas[model] = float(quota)
        queues[queue] = dataclasses.replace(q, gpu_models=(*q.gpu_models, model), quota=quotas)
    tenants = tuple(dict.fromkeys(q.tenant for q in queues.values()))
    pool = PoolConfig(nodes, tuple(queues.values()), tenants, (), dict(default_pool().prices_per_gpu_hour))
    validate_pool(pool, "warehouse pool: ")
    # quota changes at later midnights: (when, queue, full quota after)
    current = {q.name: dict(q.quota) for q in pool.queues}
    changes: list[tuple[dt.datetime, str, dict]] = []
    later: dict[tuple[dt.datetime, str], dict[str, float]] = defaultdict(dict)
    for at, queue, _, model, quota, *_ in quota_rows:
        if at > snap and queue in current and not queues[queue].low_priority:
            later[(at, queue)][model] = float(quota or 0.0)
    for (at, queue), quota in sorted(later.items()):
        after = {m: v for m, v in quota.items() if v or m in current[queue]}
        if after != current[queue]:
            changes.append((at, queue, after))
            current[queue] = after
    return pool, changes


def _audited_quota_changes(con: duckdb.DuckDBPyConnection, pool: PoolConfig,
                           window: Mapping[str, dt.datetime]) -> list[tuple[dt.datetime, str, dict]]:
    """Quota changes at the moment they were applied, from the audit log (`quota.update` applied, the
    quota after); empty when the audit log has none (the daily snapshots' changes are used then)."""
    rows = con.execute(
        """select occurred_at, object_name, after_json from marts.fct_audit_events
           where action = 'quota.update' and decision = 'applied' and occurred_at >= $start and occurred_at < $end
           order by occurred_at, audit_id""",
        dict(window),
    ).fetchall()
    names = {q.name for q in pool.queues}
    out = []
    for at, queue, after in rows:
        try:
            quota = {str(m): float(v) for m, v in (json.loads(after or "{}").get("quota") or {}).items()}
        except (ValueError, AttributeError):
            continue
        if queue in names and quota:
            out.append((at, queue, quota))
    return out


def _snapshot_rules(source_file: str | None) -> dict[str, QueueSpec]:
    """Queue rules from a gpupool.pool/v1 snapshot file, when it is still there."""
    if not source_file:
        return {}
    try:
        doc = json.loads(Path(source_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for q in doc.get("queues") or []:
        try:
            out[q["queue"]] = QueueSpec(
                q["queue"], q["tenant"], (), {}, templates=tuple(Template(t) for t in q.get("templates") or Template),
                low_priority=bool(q.get("low_priority", False)), can_borrow=bool(q.get("can_borrow", True)),
                shared_with=tuple(q.get("shared_with") or ()),
            )
        except (KeyError, ValueError):
            continue
    return out


_JOBS_SQL = """
select
  job_id, submitted_at, tenant, queue, user_name, job_name, template, gpu_model, gpus_requested, share_mode,
  mig_profile, spec_json, expected_runtime_s, has_checkpoint_policy, first_started_at, finished_at, final_state,
  final_reason, exit_code
from marts.dim_jobs
where submitted_at >= $start and submitted_at < $end
order by submitted_at, job_id
"""

_ATTEMPTS_SQL = """
select a.job_id, a.attempt, a.started_at, a.ended_at, a.end_event_type, a.end_state, a.end_reason, a.exit_code,
       a.run_time_s
from marts.fct_job_attempts a
join marts.dim_jobs j using (source, job_id)
where j.submitted_at >= $start and j.submitted_at < $end and a.started_at is not null
order by a.job_id, a.attempt
"""

# per job: how busy its working GPUs were, when they went idle for good, how many never worked
# the activity sums are exact (decimals): a parallel sum of doubles differs between runs in its last
# bits, and the same warehouse must give the same demand (a replay is kept by it: replay_cache.py)
_ACTIVITY_SQL = """
with jobs as (
  select source, job_id from marts.dim_jobs where submitted_at >= $start and submitted_at < $end
),
alloc as (
  select a.allocation_id, a.job_id, a.attempt, a.started_at, a.effective_ended_at
  from marts.fct_allocations a join jobs using (source, job_id)
),
trailing_idle as (
  select w.allocation_id, min(w.window_start_at) as idle_from, avg(w.mean_activity::decimal(18, 9)) as idle_activity
  from marts.fct_idle_windows w join alloc a using (allocation_id)
  where w.window_end_at >= a.effective_ended_at - interval 2 minute
  group by w.allocation_id
),
minutes as (
  select m.allocation_id,
    sum(m.activity::decimal(18, 9)) filter (where t.idle_from is null or m.minute_at < t.idle_from) as busy_total,
    count(*) filter (where t.idle_from is null or m.minute_at < t.idle_from) as busy_minutes
  from marts.fct_allocation_activity m join alloc a using (allocation_id) left join trailing_idle t using (allocation_id)
  group by m.allocation_id
),
per_alloc as (
  select a.job_id, a.attempt, a.started_at, t.idle_from, t.idle_activity, m.busy_total, m.busy_minutes,
    coalesce(t.idle_from <= a.started_at + interval 3 minute, false) as is_idle_throughout
  from alloc a left join trailing_idle t using (allocation_id) left join minutes m using (allocation_id)
),
per_attempt as (
  select job_id, attempt,
    count(*) as slots,
    count(*) filter (where not is_idle_throughout) as working,
    case when count(*) filter (where not is_idle_throughout and idle_from is null) = 0
      then max(epoch(idle_from - started_at)) filter (where not is_idle_throughout) end as busy_for_s,
    sum(busy_total) filter (where not is_idle_throughout) as busy_sum,
    sum(busy_minutes) filter (where not is_idle_throughout) as busy_n,
    avg(idle_activity::decimal(18, 9)) as idle_activity
  from per_alloc group by job_id, attempt
)
select job_id,
  min(working) filter (where working < slots and working > 0) as working_gpus,
  bool_and(working = 0) as never_works,
  arg_max(busy_for_s, attempt) filter (where busy_for_s is not null) as busy_for_s,
  sum(busy_sum) / nullif(sum(busy_n), 0) as level,
  avg(idle_activity::decimal(18, 9)) as idle_level
from per_attempt group by job_id
"""

_LEDGER_SQL = """
select job_id, attempt, epoch(max(would_end_at) - min(attempt_started_at)) as would_run_s
from marts.fct_reclaim_ledger
where action_kind in ('reclaim', 'preempt') and attempt_started_at >= $start - interval 7 day
  and attempt_started_at < $end
group by job_id, attempt
"""


def load_demand(
    home: Path | str | duckdb.DuckDBPyConnection, month: str | None = None, days: int | None = None
) -> Demand:
    """The window's jobs as planned jobs with their observed behaviour, and the pool of its first day."""
    if isinstance(home, duckdb.DuckDBPyConnection):
        return _load_demand(home, month, days)
    from pipelines.warehouse import Warehouse

    con = Warehouse(Path(home)).connect(read_only=True)
    try:
        return _load_demand(con, month, days)
    finally:
        con.close()


def _load_demand(con: duckdb.DuckDBPyConnection, month: str | None, days: int | None) -> Demand:
    first, window = _month_window(con, month, days)
    start = dt.datetime.combine(first, dt.time())
    params = {"start": start, "end": start + window * _DAY}
    pool, quota_changes = _pool(con, first)
    quota_changes = _audited_quota_changes(con, pool, params) or [c for c in quota_changes if c[0] < params["end"]]
    jobs = con.execute(_JOBS_SQL, params).fetchall()
    attempts: dict[str, list[tuple]] = defaultdict(list)
    for row in con.execute(_ATTEMPTS_SQL, params).fetchall():
        attempts[row[0]].append(row[1:])
    activity = {r[0]: r[1:] for r in con.execute(_ACTIVITY_SQL, params).fetchall()}
    would_run = {(r[0], r[1]): r[2] for r in con.execute(_LEDGER_SQL, params).fetchall()}
    governed = bool(con.execute("select count(*) > 0 from raw.governance_actions").fetchone()[0])
    builder = _Builder(pool, attempts, activity, would_run)
    planned = [p for p in (builder.job(row) for row in jobs) if p is not None]
    planned = builder.fill_typical(planned)
    planned = builder.patience_beyond_wait(planned, {r[0]: (r[14] - r[1]).total_seconds() for r in jobs if r[14] is not None})
    planned = _chain_resubmissions(planned, {r[0]: r[15] for r in jobs})
    workload = Workload(tuple(planned), (), None, None, {k: () for k in Waste})
    return Demand(start, window, pool, workload, tuple(quota_changes), governed, dict(builder.notes))


class _Builder:
    """Observed job rows -> planned jobs (the simulator's Behaviour model, inverted)."""

    def __init__(self, pool: PoolConfig, attempts: Mapping[str, list[tuple]], activity: Mapping[str, tuple],
                 would_run: Mapping[tuple[str, int], float]):
        self.queues = {q.name: q for q in pool.queues}
        self.attempts, self.activity, self.would_run = attempts, activity, would_run
        self.notes: dict[str, int] = defaultdict(int)
        self.typical_pending: list[int] = []  # indexes of jobs that never ran: work borrowed from their template

    def job(self, row: tuple) -> PlannedJob | None:
        (job_id, submitted_at, tenant, queue, user, name, template, model, gpus, mode, mig, spec_json,
         _expected_s, checkpointed, _first_started, finished_at, final_state, final_reason, exit_code) = row
        if queue not in self.queues or template is None or model is None:
            self.notes["skipped: queue or spec not in the pool"] += 1
            return None
        fields = json.loads(spec_json) if spec_json else {}
        known = {f.name for f in dataclasses.fields(JobSpec)}
        spec = JobSpec(
            tenant=tenant, queue=queue, user=user or f"{tenant}-user", template=Template(template), gpu_model=model,
            gpus=int(gpus or 1), share_mode=ShareMode(mode or "whole"), mig_profile=mig, job_name=name or "",
            **{k: v for k, v in fields.items() if k in known and k not in ("reservation",)},
        )
        runs = self.attempts.get(job_id, [])
        b = self._behaviour(job_id, spec, bool(checkpointed), runs, submitted_at, finished_at, final_state,
                            final_reason, exit_code)
        return PlannedJob(job_id, submitted_at, spec, b)

    def _profile(self, job_id: str, spec: JobSpec) -> ActivityProfile:
        base = typical_profile(spec.template, (0.5, 0.5, 0.5))
        seen = self.activity.get(job_id)
        if seen is None:
            if job_id in self.attempts:
                self.notes["ran without telemetry: typical activity of the template"] += 1
            return base
        working, never_works, busy_for_s, level, idle_level = seen
        if never_works:
            return dataclasses.replace(base, level=0.0, swing=0.0, noise=0.0, busy_for_s=0.0,
                                       idle_level=min(max(idle_level or 0.0, 0.0), 0.04))
        level = base.level if level is None else float(level)
        # the swing and noise of the generated work keep the level's mean (and stay above the idle threshold)
        swing = min(0.05, max(level - 0.08, 0.0) / 2)
        return dataclasses.replace(
            base, level=level, swing=swing, noise=min(0.03, swing), diurnal=False,
            busy_for_s=float(busy_for_s) if busy_for_s is not None else None,
            idle_level=min(max(float(idle_level or 0.0) - 0.002, 0.0), 0.04),
            working_gpus=int(working) if working else None,
        )

    def _behaviour(self, job_id: str, spec: JobSpec, checkpointed: bool, runs: list[tuple],
                   submitted_at: dt.datetime, finished_at: dt.datetime | None, final_state: str | None,
                   final_reason: str | None, exit_code: int | None) -> Behaviour:
        profile = self._profile(job_id, spec)
        if not runs:
            b = Behaviour(work_s=None, outcome=JobState.COMPLETED, exit_code=0, reason=None, profile=profile,
                          checkpointed=checkpointed)
            if final_state == JobState.CANCELLED and finished_at is not None:
                self.notes["gave up waiting: patience observed, work of the template"] += 1
                b = dataclasses.replace(b, patience_s=max(int((finished_at - submitted_at).total_seconds()), 1))
            else:
                self.notes["never started: work of the template"] += 1
            return b
        failing = [r for r in runs if r[3] == "requeue" and r[4]]
        progress = 0.0
        for r in runs[:-1]:
            if r[3] == "preempt" and checkpointed:
                progress += (r[7] or 0) // 3600 * 3600
        last = runs[-1]
        last_run = float(last[7] or 0)
        b = Behaviour(
            work_s=max(round(progress + last_run), 1), outcome=JobState.COMPLETED, exit_code=0, reason=None,
            profile=profile, checkpointed=checkpointed,
            failing_attempts=len(failing),
            fail_after_s=round(np.mean([r[7] or 0 for r in failing])) if failing else 0,
        )
        state = last[4] if last[3] == "finish" else None
        reason = _BUDGET_NOTE.sub("", last[5] or "") or None
        if last[3] is None:  # still running when the window ends: it had not finished by then
            self.notes["running at the end: runs on"] += 1
            return dataclasses.replace(b, work_s=None)
        if state == JobState.CANCELLED:
            natural = self.would_run.get((job_id, last[0]))
            if natural is not None or (reason or "").startswith("reclaimed"):
                self.notes["reclaimed: runs to the ledger's would_end_at"] += 1
                run = natural if natural is not None else last_run + 24 * 3600
                return dataclasses.replace(b, work_s=max(round(progress + run), 1))
            self.notes["cancelled while running: cancel after the observed run"] += 1
            return dataclasses.replace(b, work_s=None, cancel_after_run_s=max(round(last_run), 1))
        if state == JobState.TIMEOUT:
            return dataclasses.replace(b, work_s=None)  # its run-time limit ends it
        if state in _STATES and state != JobState.COMPLETED:
            if failing and last[3] == "finish":
                # every attempt failed: the failing ones were the retries of the same failure
                b = dataclasses.replace(b, failing_attempts=0, fail_after_s=0)
            return dataclasses.replace(b, outcome=_STATES[state], exit_code=int(exit_code if exit_code is not None
                                                                                 else last[6] or 1), reason=reason)
        return b

    def fill_typical(self, jobs: list[PlannedJob]) -> list[PlannedJob]:
        """Jobs that never ran get the median work of their template's completed jobs."""
        done: dict[Template, list[int]] = defaultdict(list)
        for j in jobs:
            b = j.behaviour
            if b.work_s is not None and b.outcome == JobState.COMPLETED and b.cancel_after_run_s is None:
                done[j.spec.template].append(b.work_s)
        out = []
        for j in jobs:
            if j.job_id not in self.attempts and j.behaviour.work_s is None:
                work = done.get(j.spec.template) or [3600]
                j = dataclasses.replace(j, behaviour=dataclasses.replace(j.behaviour, work_s=int(np.median(work))))
            out.append(j)
        return out

    def patience_beyond_wait(self, jobs: list[PlannedJob], waits: Mapping[str, float]) -> list[PlannedJob]:
        """Jobs that started get a patience too: one drawn from the month's patience beyond the wait they had
        (`PatienceCurve.beyond`), so that a replay where they wait longer may see their users give up, as one
        where a job that gave up starts sooner sees it start. Without it, drift could only add starts."""
        given_up = [j.behaviour.patience_s for j in jobs if j.behaviour.patience_s is not None]
        curve = PatienceCurve.estimate(given_up, list(waits.values()))
        out = []
        for j in jobs:
            wait = waits.get(j.job_id)
            if wait is not None and j.behaviour.patience_s is None:
                patience = curve.beyond(wait, unit_of(j.job_id))  # its own point: the same on every read
                if patience is not None:
                    self.notes["started: patience drawn beyond its wait"] += 1
                    j = dataclasses.replace(j, behaviour=dataclasses.replace(j.behaviour, patience_s=patience))
            out.append(j)
        return out


@dataclass(frozen=True)
class PatienceCurve:
    """How long users wait before giving up, as the month shows it: a Kaplan-Meier survival curve of the
    waits that ended in a give-up (events) and of those that ended in a start (censored: that user would
    have waited at least so long). `times` ascending, `surviving[i]`: the share still waiting after
    times[i]."""

    times: np.ndarray
    surviving: np.ndarray

    @classmethod
    def estimate(cls, given_up_s: list[float], started_after_s: list[float]) -> PatienceCurve:
        waits = np.concatenate([np.asarray(given_up_s, float), np.asarray(started_after_s, float)])
        gave_up = np.concatenate([np.ones(len(given_up_s), bool), np.zeros(len(started_after_s), bool)])
        order = np.lexsort((~gave_up, waits))  # at a tie the give-up counts first, as Kaplan-Meier's convention
        waits, gave_up = waits[order], gave_up[order]
        at_risk = len(waits) - np.arange(len(waits))
        factors = np.where(gave_up, 1.0 - 1.0 / np.maximum(at_risk, 1), 1.0)
        surviving = np.cumprod(factors)
        return cls(waits[gave_up], surviving[gave_up])

    def beyond(self, wait_s: float, unit: float) -> int | None:
        """A patience longer than `wait_s`, at `unit` (0..1) along what the curve says of the users still
        waiting then: the first give-up time where the share still waiting falls to (1 - unit) of its share at
        `wait_s`. None where the curve ends first (the month never saw anyone give up that late)."""
        later = int(np.searchsorted(self.times, wait_s, side="right"))
        share = self.surviving[later - 1] if later > 0 else 1.0
        # the curve never rises: the first point at or below the share sought, by a search on its negation
        falls = max(int(np.searchsorted(-self.surviving, -share * (1.0 - unit), side="left")), later)
        return None if falls >= len(self.times) else max(int(self.times[falls]), int(wait_s) + 1)


def _chain_resubmissions(jobs: list[PlannedJob], finished: Mapping[str, dt.datetime | None]) -> list[PlannedJob]:
    """`X-r1`, `X-r2`... (a user resubmitting a failed job) become X's resubmissions, which the simulator
    submits after each final failure with the observed delay, instead of at their observed times."""
    by_id = {j.job_id: j for j in jobs}
    chains: dict[str, list[str]] = defaultdict(list)
    for j in jobs:
        m = _RESUBMIT.match(j.job_id)
        if m and m.group("root") in by_id:
            chains[m.group("root")].append(j.job_id)
    if not chains:
        return jobs
    dropped = {r for rs in chains.values() for r in rs}
    out = []
    for j in jobs:
        if j.job_id in dropped:
            continue
        if j.job_id in chains:
            ids = [j.job_id, *sorted(chains[j.job_id], key=lambda r: int(_RESUBMIT.match(r).group("n")))]
            delays = [
                (by_id[b].submit_at - finished[a]).total_seconds()
                for a, b in itertools.pairwise(ids)
                if finished.get(a) is not None
            ]
            j = dataclasses.replace(j, behaviour=dataclasses.replace(
                j.behaviour, resubmits=len(ids) - 1, resubmit_delay_s=int(max(np.median(delays), 0)) if delays else 60))
        out.append(j)
    return out
