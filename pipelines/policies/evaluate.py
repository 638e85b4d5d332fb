"""Evaluate the catalog's policies over one set of inputs: the single entry point for the sensor
(live kinds, every minute), the daily record and the simulator, so all three find the same things."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

import polars as pl

from pipelines.clock import utc_naive
from pipelines.contracts import FINDING_SCHEMA, PolicyKind
from pipelines.policies import health, idle, jobs
from pipelines.policies.catalog import PolicyCatalog
from pipelines.policies.host import host_bound
from pipelines.policies.inputs import InputError, PolicyInputs, has_own_moments
from pipelines.policies.model import LIVE_KINDS, empty_findings

PolicyFunction = Callable[[PolicyInputs, PolicyCatalog, str, dt.datetime], pl.DataFrame]

FUNCTIONS: dict[PolicyKind, PolicyFunction] = {
    PolicyKind.IDLE_ALLOCATION: idle.idle_allocation,
    PolicyKind.ZOMBIE: idle.zombie,
    PolicyKind.IDLE_INTERACTIVE: idle.idle_interactive,
    PolicyKind.OVERRUN: jobs.overrun,
    PolicyKind.OVERSIZED: jobs.oversized,
    PolicyKind.RETRY_STORM: jobs.retry_storm,
    PolicyKind.TEMPLATE_BREACH: jobs.template_breach,
    PolicyKind.HOST_BOUND: host_bound,
    PolicyKind.GPU_HEALTH: health.gpu_health,
}


def evaluate(
    inputs: PolicyInputs, catalog: PolicyCatalog, now: dt.datetime, kinds: Iterable[PolicyKind] | None = None
) -> pl.DataFrame:
    """Findings (FINDING_SCHEMA) of every catalog policy of the given kinds (default: all), sorted
    by detection time then id. `now`: the data's end (UTC, naive); minutes at or after it are ignored.
    An attempt with its own evaluated_at (at or before `now`) is judged as of that moment: one pass then
    evaluates looks taken at different moments, each as if alone (the live kinds only)."""
    now = utc_naive(now)
    wanted = [PolicyKind(k) for k in (kinds if kinds is not None else PolicyKind)]
    if any(k not in LIVE_KINDS for k in wanted) and has_own_moments(inputs.allocations):
        raise InputError(f"evaluated_at is read by the live kinds only ({', '.join(sorted(k.value for k in LIVE_KINDS))}); "
                         "evaluate the others at one `now`")
    idle_kinds = [kind for kind in wanted if kind in idle.IDLE_KINDS and catalog.policies_of(kind)]
    # the idle policies' rules and windows are found together: one pass over the minutes, not one per policy
    shared = idle.shared_windows(inputs, catalog, idle_kinds, now) if idle_kinds else {}
    frames = [
        FUNCTIONS[kind](inputs, catalog, name, now, **(shared if kind in idle.IDLE_KINDS else {}))
        for kind in wanted
        for name in catalog.policies_of(kind)
    ]
    if not frames:
        return empty_findings()
    return pl.concat(frames).select(FINDING_SCHEMA.keys()).sort("detected_at", "finding_id")
