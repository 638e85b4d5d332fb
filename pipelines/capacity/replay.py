"""The what-if replay: a month's demand, read back from the warehouse, through the allocator again.

`replay` runs a `Demand` (`pipelines/capacity/demand.py`: the window's jobs with their observed
behaviour, and its pool) through `allocator.sim.simulator.simulate` in virtual time, on the observed
pool or one changed by a `Change`, with the idle-reclaim policies acting when the observed month had
governance decisions. `whatif(home, change)` replays the baseline and the changed pool and returns
both next to the observed month's figures (the metric views' definitions): queue wait p50/p95, pool
utilisation, allocation rate, idle allocated GPU-hours.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from allocator.model import NodeSpec, PoolConfig, ShareMode
from allocator.pool import pool_capacity, validate_pool
from allocator.sim.simulator import Governance, SimulatedPool, SimulationReport, simulate
from allocator.telemetry import ActivityProfile
from pipelines.capacity.demand import Demand, load_demand
from pipelines.capacity.replay_cache import ReplayCache, demand_digest, replay_key
from pipelines.contracts import Mode, PolicyKind, StepAction
from pipelines.policies.catalog import PolicyCatalog, load_catalog

Progress = Callable[[str], None]
_DAY = dt.timedelta(days=1)
# tolerance the baseline replay is held to against the observed month (docs/whatif.md)
TOLERANCE_WAIT_P95 = 0.10  # relative
TOLERANCE_POINTS = 2.0  # percentage points of utilisation and allocation rate


# --- the change -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """A proposed change to the pool or its rules."""

    add_nodes: Mapping[str, int] = field(default_factory=dict)  # GPU model -> nodes to add (negative: remove)
    quotas: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (queue, model) -> GPUs
    idle_window_minutes: int | None = None  # idle-allocation policy's window
    idle_threshold: float | None = None  # idle-allocation policy's activity threshold

    @property
    def is_empty(self) -> bool:
        return not (self.add_nodes or self.quotas or self.idle_window_minutes or self.idle_threshold is not None)

    def describe(self) -> str:
        parts = [f"{'+' if n >= 0 else ''}{n} {m} node{'s' if abs(n) != 1 else ''}" for m, n in self.add_nodes.items()]
        parts += [f"quota {q}:{m}={v:g}" for (q, m), v in self.quotas.items()]
        if self.idle_window_minutes:
            parts.append(f"idle window {self.idle_window_minutes} min")
        if self.idle_threshold is not None:
            parts.append(f"idle threshold {self.idle_threshold:g}")
        return ", ".join(parts) or "no change"

    @classmethod
    def parse(
        cls,
        add_nodes: Sequence[str] = (),
        quotas: Sequence[str] = (),
        idle_window: int | None = None,
        idle_threshold: float | None = None,
    ) -> Change:
        """From command-line texts: `H100=2` (nodes per model), `nlp-train:H100=40` (quota)."""
        nodes: dict[str, int] = {}
        for text in add_nodes:
            model, sep, n = text.partition("=")
            if not sep or not model or not re.fullmatch(r"[+-]?\d+", n.strip()):
                raise ValueError(f"--add-nodes {text!r}: expected MODEL=N, e.g. H100=2")
            nodes[model.strip()] = nodes.get(model.strip(), 0) + int(n)
        quota: dict[tuple[str, str], float] = {}
        for text in quotas:
            m = re.fullmatch(r"\s*([^:=\s]+):([^:=\s]+)\s*=\s*([0-9.]+)\s*", text)
            if m is None:
                raise ValueError(f"--quota {text!r}: expected QUEUE:MODEL=N, e.g. nlp-train:H100=40")
            quota[(m.group(1), m.group(2))] = float(m.group(3))
        if idle_window is not None and idle_window < 1:
            raise ValueError(f"--idle-window {idle_window}: expected minutes >= 1")
        if idle_threshold is not None and not 0 <= idle_threshold <= 1:
            raise ValueError(f"--idle-threshold {idle_threshold}: expected a number between 0 and 1")
        return cls(nodes, quota, idle_window, idle_threshold)


# --- the changed pool and policies ---------------------------------------------------------------


class ChangeRejected(ValueError):
    """A change that does not fit the month's pool (a GPU model or queue it has not, more nodes removed than
    it has); the message names what the pool has."""


def changed_pool(pool: PoolConfig, change: Change) -> PoolConfig:
    """The pool with nodes added (copies of an existing whole-GPU node of the model, numbered on) or removed
    (the last ones of the model) and queue quotas set. Removing capacity below the quotas scales that
    model's quotas down, as `scale_pool` does."""
    nodes = list(pool.nodes)
    before = pool_capacity(pool)
    for model, n in change.add_nodes.items():
        of_model = [x for x in nodes if x.gpus and all(g.gpu_model == model for g in x.gpus)]
        whole = [x for x in of_model if all(g.share_mode == ShareMode.WHOLE for g in x.gpus)] or of_model
        if not whole:
            raise ValueError(f"--add-nodes {model}: no node of that model in the pool (has {sorted(before)})")
        if n >= 0:
            template = whole[0]
            prefix, width = _host_prefix(template.host)
            taken = {x.host for x in nodes}
            number = max((_host_number(x.host) for x in nodes if x.host.startswith(prefix)), default=0)
            for _ in range(n):
                number += 1
                while f"{prefix}{number:0{width}d}" in taken:
                    number += 1
                host = f"{prefix}{number:0{width}d}"
                taken.add(host)
                nodes.append(NodeSpec(host, tuple(dataclasses.replace(g, host=host) for g in template.gpus),
                                      template.node_pool))
        else:
            if -n >= len(of_model):
                raise ValueError(f"--add-nodes {model}={n}: the pool has {len(of_model)} such nodes; keep at least one")
            for x in whole[::-1][:-n]:
                nodes.remove(x)
    out = dataclasses.replace(pool, nodes=tuple(nodes))
    after = pool_capacity(out)
    queues = []
    for q in pool.queues:
        quota = dict(q.quota)
        for m, v in quota.items():
            if after.get(m, 0) < before.get(m, 0):
                quota[m] = float(math.floor(v * after[m] / before[m] + 1e-9))
        for (queue, m), v in change.quotas.items():
            if queue == q.name:
                if m not in q.gpu_models:
                    raise ValueError(f"--quota {queue}:{m}: queue {queue} takes {list(q.gpu_models)}")
                quota[m] = float(v)
        queues.append(dataclasses.replace(q, quota=quota))
    unknown = sorted({queue for queue, _ in change.quotas} - {q.name for q in pool.queues})
    if unknown:
        raise ValueError(f"--quota: no queue {unknown[0]!r}; queues: {[q.name for q in pool.queues]}")
    out = dataclasses.replace(out, queues=tuple(queues))
    validate_pool(out, "changed pool: ")
    return out


def _host_prefix(host: str) -> tuple[str, int]:
    digits = len(host) - len(host.rstrip("0123456789"))
    return (host[:-digits], digits) if digits else (f"{host}-", 2)


def _host_number(host: str) -> int:
    digits = len(host) - len(host.rstrip("0123456789"))
    return int(host[-digits:]) if digits else 0


def changed_catalog(catalog: PolicyCatalog, change: Change) -> PolicyCatalog:
    """The catalog with the idle-allocation window and/or threshold changed (its default scope, and
    every override that sets its own)."""
    params: dict[str, object] = {}
    if change.idle_window_minutes:
        params["window_minutes"] = int(change.idle_window_minutes)
    if change.idle_threshold is not None:
        params["activity_threshold"] = float(change.idle_threshold)
    if not params:
        return catalog
    policies = dict(catalog.policies)
    for name in catalog.policies_of(PolicyKind.IDLE_ALLOCATION):
        p = policies[name]
        overrides = tuple(
            dataclasses.replace(o, params={**o.params, **{k: v for k, v in params.items() if k in o.params}})
            for o in p.overrides
        )
        policies[name] = dataclasses.replace(p, params={**p.params, **params}, overrides=overrides)
    return dataclasses.replace(catalog, policies=policies)


_EFFECTIVE = frozenset({StepAction.RECLAIM, StepAction.PREEMPT, StepAction.CAP_RUNTIME})


def acting_catalog(catalog: PolicyCatalog) -> PolicyCatalog:
    """Only what can change the pool: shadow-mode policies, and scopes whose steps only remind or
    recommend, are switched off (a reminder changes nothing in the replay: no simulated user answers it),
    so the replay does not spend time on checks whose outcome cannot move a figure."""
    policies = {}
    for name, p in catalog.policies.items():
        if p.mode == Mode.SHADOW:
            continue
        acts = bool(_EFFECTIVE & {s.action for s in p.steps})
        overrides = tuple(
            o if o.steps is None or _EFFECTIVE & {s.action for s in o.steps}
            else dataclasses.replace(o, params={**o.params, "enabled": False})
            for o in p.overrides
        )
        params = p.params if acts else {**p.params, "enabled": False}
        policies[name] = dataclasses.replace(p, params=params, overrides=overrides)
    return dataclasses.replace(catalog, policies=policies)


# --- one replay ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """A month's figures, with the definitions of metrics.job_period and metrics.pool_period."""

    jobs: int
    jobs_started: int
    wait_p50_s: float  # first start - submit, over the jobs that started
    wait_p95_s: float
    wait_p95_by_model_s: Mapping[str, float]
    capacity_gpu_hours: float
    allocated_gpu_hours: float
    active_gpu_hours: float
    idle_gpu_hours: float  # allocated time in runs below 5% activity lasting 30 min or more
    seconds: float = 0.0  # wall time of the replay (0 for the observed month and a replay kept from a run before)
    kept: bool = False  # taken from a replay run before (pipelines/capacity/replay_cache.py), not run now

    @property
    def allocation_rate_pct(self) -> float:
        return 100.0 * self.allocated_gpu_hours / self.capacity_gpu_hours if self.capacity_gpu_hours else 0.0

    @property
    def pool_utilisation_pct(self) -> float:
        return 100.0 * self.active_gpu_hours / self.capacity_gpu_hours if self.capacity_gpu_hours else 0.0


class _Actors:
    """What acts on the replayed pool besides its users: the observed quota changes at their midnights and,
    when the month was governed, the idle-reclaim policies."""

    def __init__(self, inner: Governance | None, quota_changes: Sequence[tuple[dt.datetime, str, dict]]):
        self.inner, self.quota_changes = inner, quota_changes

    def attach(self, pool: SimulatedPool) -> None:
        self.pool = pool
        if self.inner is not None:
            self.inner.attach(pool)
        for at, queue, quota in self.quota_changes:
            pool.at(at, self._quota, queue, quota)

    def job_started(self, job, profile: ActivityProfile, now: dt.datetime) -> None:
        if self.inner is not None:
            self.inner.job_started(job, profile, now)

    def _quota(self, now: dt.datetime, queue: str, quota: dict[str, float]) -> None:
        try:
            self.pool.engine.update_queue(queue, {"quota": quota}, now, actor="replay", reason="observed quota change")
        except (KeyError, ValueError):
            pass  # the changed pool cannot hold it (fewer GPUs): the quota stays


def replay(
    demand: Demand,
    change: Change | None = None,
    *,
    policies: bool | None = None,
    catalog: PolicyCatalog | None = None,
    on_progress: Callable[[int, int, dt.date], None] | None = None,
) -> tuple[Figures, SimulationReport]:
    """Replay the demand on the observed pool (or the changed one). policies: None follows the observed month
    (on when it had governance decisions); a change of the idle window or threshold turns them on."""
    from pipelines.governance.simulated import SimulatedGovernance

    change = change or Change()
    pool = changed_pool(demand.pool, change)
    overridden = set(change.quotas)
    quota_changes = []
    for at, queue, quota in demand.quota_changes:
        fixed = {m: v for m, v in quota.items() if (queue, m) not in overridden}
        fixed.update({m: v for (q, m), v in change.quotas.items() if q == queue})
        quota_changes.append((at, queue, fixed))
    rules = acting_rules(demand, change, policies, catalog)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpupool-replay-") as tmp:
        governance = None
        if rules is not None:
            governance = SimulatedGovernance(rules, Path(tmp) / "governance", lose_answers=0.0)
        report = simulate(
            Path(tmp), days=demand.days, start=demand.start.date(), pool=pool, workload=demand.workload,
            admin=None, governance=_Actors(governance, quota_changes), write=False, on_progress=on_progress,
            fault_scale=None,  # the same demand on two pool shapes: no fault drawn for one and not the other
        )
        figures = _figures(report, time.monotonic() - began)
    return figures, report


def acting_rules(demand: Demand, change: Change, policies: bool | None,
                 catalog: PolicyCatalog | None = None) -> PolicyCatalog | None:
    """The catalog the policies act with in `replay` (None: they do not act)."""
    on = demand.governed if policies is None else policies
    on = on or change.idle_window_minutes is not None or change.idle_threshold is not None
    return acting_catalog(changed_catalog(catalog or load_catalog(), change)) if on else None


def kept_replay_key(demand_key: str, demand: Demand, change: Change | None, policies: bool | None) -> str:
    """The key of `replay(demand, change, policies=policies)` in the replays kept (replay_cache.py);
    `demand_key`: replay_cache.demand_digest(demand), computed once per demand."""
    change = change or Change()
    rules = acting_rules(demand, change, policies)
    return replay_key(demand_key, repr(change), rules is not None, rules)


def kept_figures(cache: ReplayCache, key: str) -> Figures | None:
    """A kept replay's figures, marked kept (no seconds of this run), or None."""
    fields = cache.get(key)
    if fields is None:
        return None
    try:
        return Figures(**{**fields, "seconds": 0.0, "kept": True})
    except TypeError:  # not this code's fields (the key digests the code, so only a hand-made file)
        return None


def _figures(report: SimulationReport, seconds: float) -> Figures:
    return Figures(
        jobs=report.jobs_submitted,
        jobs_started=report.jobs_started,
        wait_p50_s=report.p50_wait_s,
        wait_p95_s=report.p95_wait_s,
        wait_p95_by_model_s=dict(report.p95_wait_by_model_s),
        capacity_gpu_hours=report.capacity_gpu_hours,
        allocated_gpu_hours=report.allocated_gpu_hours,
        active_gpu_hours=report.active_gpu_hours,
        idle_gpu_hours=report.idle_gpu_hours,
        seconds=seconds,
    )


def observed(con: duckdb.DuckDBPyConnection, start: dt.datetime, days: int) -> Figures:
    """The observed window's figures from the warehouse: waits as metrics.job_period computes them (from
    marts.dim_jobs: the jobs submitted in the window that started, here before the window's end, as in the
    replay), GPU-hours summed from metrics.pool_daily as metrics.pool_period does."""
    end = start + days * _DAY
    jobs, started, p50, p95 = con.execute(
        """select count(*), count(first_started_at) filter (where first_started_at < $end),
                  quantile_cont(queue_wait_s, 0.5) filter (where first_started_at < $end),
                  quantile_cont(queue_wait_s, 0.95) filter (where first_started_at < $end)
           from marts.dim_jobs where submitted_at >= $start and submitted_at < $end""",
        {"start": start, "end": end},
    ).fetchone()
    by_model = dict(con.execute(
        """select gpu_model, quantile_cont(queue_wait_s, 0.95) from marts.dim_jobs
           where submitted_at >= $start and submitted_at < $end and first_started_at < $end group by gpu_model""",
        {"start": start, "end": end},
    ).fetchall())
    cap, alloc, active, idle = con.execute(
        """select sum(capacity_gpu_hours), sum(allocated_gpu_hours), sum(active_gpu_hours), sum(idle_allocated_gpu_hours)
           from metrics.pool_daily where day >= ? and day < ?""",
        [start.date(), end.date()],
    ).fetchone()
    return Figures(int(jobs), int(started), float(p50 or 0), float(p95 or 0), by_model, float(cap or 0),
                   float(alloc or 0), float(active or 0), float(idle or 0))


# --- the what-if -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WhatIfResult:
    """Observed vs baseline replay vs the replay with the change."""

    month_start: dt.date
    days: int
    change: Change
    policies: bool  # the baseline replayed with the idle-reclaim policies acting
    observed: Figures
    baseline: Figures
    changed: Figures | None  # None when the change is empty
    notes: Mapping[str, int]

    @property
    def within_tolerance(self) -> bool:
        """The baseline reproduces the observed wait p95 (relative) and utilisation (points)."""
        o, b = self.observed, self.baseline
        wait_ok = abs(b.wait_p95_s - o.wait_p95_s) <= TOLERANCE_WAIT_P95 * max(o.wait_p95_s, 60.0)
        return (wait_ok and abs(b.pool_utilisation_pct - o.pool_utilisation_pct) <= TOLERANCE_POINTS
                and abs(b.allocation_rate_pct - o.allocation_rate_pct) <= TOLERANCE_POINTS)

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        def minutes(s: float) -> str:
            return f"{s / 60:,.1f} min"

        def pct(v: float) -> str:
            return f"{v:.1f}%"

        def gpu_h(v: float) -> str:
            return f"{v:,.0f}"

        lines: list[tuple[str, Callable[[Figures], float], Callable[[float], str], str]] = [
            ("wait p50", lambda f: f.wait_p50_s, minutes, "min"),
            ("wait p95", lambda f: f.wait_p95_s, minutes, "min"),
        ]
        models = sorted(set(self.baseline.wait_p95_by_model_s) | set(self.observed.wait_p95_by_model_s))
        for m in models:
            lines.append((f"wait p95 {m}", lambda f, m=m: f.wait_p95_by_model_s.get(m, 0.0), minutes, "min"))
        lines += [
            ("pool utilisation", lambda f: f.pool_utilisation_pct, pct, "pts"),
            ("allocation rate", lambda f: f.allocation_rate_pct, pct, "pts"),
            ("idle allocated GPU-h", lambda f: f.idle_gpu_hours, gpu_h, "gpu_h"),
            ("capacity GPU-h", lambda f: f.capacity_gpu_hours, gpu_h, "gpu_h"),
            ("jobs started", lambda f: float(f.jobs_started), lambda v: f"{v:,.0f}", "n"),
        ]
        out = []
        for label, get, fmt, unit in lines:
            o, b = get(self.observed), get(self.baseline)
            c = get(self.changed) if self.changed is not None else None
            delta = ""
            if c is not None:
                d = c - b
                delta = (f"{d / 60:+,.1f} min" if unit == "min" else f"{d:+.1f} pts" if unit == "pts"
                         else f"{d:+,.0f}")
            out.append((label, fmt(o), fmt(b), fmt(c) if c is not None else "-", delta))
        return out

    def table(self) -> str:
        head = ("", "observed", "baseline replay", f"with: {self.change.describe()}", "change")
        rows = [head, *self.rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        text = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                for r in rows]
        text.insert(1, "  ".join("-" * w for w in widths))
        verdict = "within" if self.within_tolerance else "OUTSIDE"
        text.append("")
        text.append(
            f"baseline vs observed: {verdict} tolerance (wait p95 ±{TOLERANCE_WAIT_P95:.0%}, utilisation and "
            f"allocation rate ±{TOLERANCE_POINTS:g} pts); policies {'on' if self.policies else 'off'}; "
            + ", ".join(f"{name} {_took(f)}" for name, f in (("baseline", self.baseline), ("change", self.changed))
                        if f is not None)
        )
        return "\n".join(text)


def _took(figures: Figures) -> str:
    return "kept from an earlier replay" if figures.kept else f"replayed in {figures.seconds:.0f} s"


def _replay_job(args: tuple) -> Figures:
    demand, change, policies = args
    return replay(demand, change, policies=policies)[0]


def whatif(
    home: Path | str,
    change: Change | None = None,
    *,
    month: str | None = None,
    days: int | None = None,
    policies: bool | None = None,
    parallel: bool = True,
    on_step: Progress | None = None,
    on_progress: Callable[[int, int, dt.date], None] | None = None,
) -> WhatIfResult:
    """Replay the month's demand on the observed pool and with `change`; compare with the observed month.
    The two replays run side by side (two processes) when `parallel`; on_progress follows the baseline."""
    from pipelines.warehouse import Warehouse

    change = change or Change()
    step = on_step or (lambda _message: None)
    con = Warehouse(Path(home)).connect(read_only=True)
    try:
        step("reading the month's demand from the warehouse")
        demand = load_demand(con, month, days)
        seen = observed(con, demand.start, demand.days)
    finally:
        con.close()
    try:  # every option checked against the month's pool now, not after the baseline's minutes of replay
        changed_pool(demand.pool, change)
    except ValueError as error:
        raise ChangeRejected(str(error)) from None
    on = demand.governed if policies is None else policies
    step(f"{len(demand.workload.jobs):,} jobs from {demand.start:%Y-%m-%d}, {demand.days} days; "
         f"replaying with the idle-reclaim policies {'on' if on else 'off'}")
    cache, demand_key = ReplayCache(home), demand_digest(demand)
    base_key = kept_replay_key(demand_key, demand, None, on)
    change_key = None if change.is_empty else kept_replay_key(demand_key, demand, change, on)
    baseline = kept_figures(cache, base_key)
    changed = None if change_key is None else kept_figures(cache, change_key)
    if baseline is not None:
        step("baseline: kept from an earlier replay of this demand")
    if changed is not None:
        step(f"with the change ({change.describe()}): kept from an earlier replay")
    if baseline is None and change_key is not None and changed is None and parallel:
        with ProcessPoolExecutor(max_workers=1) as pool:
            future = pool.submit(_replay_job, (demand, change, on))
            baseline = replay(demand, policies=on, on_progress=on_progress)[0]
            step("baseline done; waiting for the replay with the change")
            changed = future.result()
    if baseline is None:
        baseline = replay(demand, policies=on, on_progress=on_progress)[0]
    if change_key is not None and changed is None:
        step(f"replaying with the change: {change.describe()}")
        changed = replay(demand, change, policies=on, on_progress=on_progress)[0]
    for key, figures in ((base_key, baseline), (change_key, changed)):
        if key is not None and figures is not None and not figures.kept:
            cache.put(key, figures)
    return WhatIfResult(demand.start.date(), demand.days, change, on, seen, baseline, changed, demand.notes)
