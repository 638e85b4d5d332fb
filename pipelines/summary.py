"""The short summary `gpupool demo` prints: rows read from the metrics views, formatted here.

Each figure is a `Read`: named columns of one metrics view, filtered and ordered, nothing summed or
weighed; this module only picks what to show and formats it. A figure no view holds gets its view
(or column) first, in models/metrics/; tests/test_summary.py keeps `READS` honest.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import groupby

import click

from pipelines.warehouse import Warehouse

_NAME = re.compile(r"[a-z_][a-z0-9_]*")


@dataclass(frozen=True)
class Read:
    """`select <columns> from metrics.<view> [where ...] [order by ...]`: columns as the view has them."""

    view: str
    columns: tuple[str, ...]
    where: str = ""
    order: str = ""

    def __post_init__(self) -> None:
        bad = [c for c in (self.view, *self.columns) if not _NAME.fullmatch(c)]
        if bad:
            raise ValueError(f"metrics.{self.view}: {bad} are not plain view or column names")

    def sql(self) -> str:
        return (f"select {', '.join(self.columns)} from metrics.{self.view}"
                + (f" where {self.where}" if self.where else "") + (f" order by {self.order}" if self.order else ""))


READS: dict[str, Read] = {
    "pool": Read("pool_period", ("gpu_model", "physical_gpus", "capacity_gpu_hours", "allocated_gpu_hours",
                                 "active_gpu_hours", "idle_allocated_gpu_hours", "allocation_rate_pct",
                                 "utilisation_of_allocated_pct", "pool_utilisation_pct", "first_day", "last_day"),
                 order="gpu_model = 'all', gpu_model"),
    "jobs": Read("job_period", ("jobs", "failed_jobs", "failure_rate_pct", "retries", "preemptions",
                                "queue_wait_p50_s", "queue_wait_p95_s"), "template = 'all'"),
    # the pool's rows of failure_causes (tenant 'all'), one line a month
    "failures": Read("failure_causes", ("month", "failures", "gpu_hours_lost", "not_user_fault_pct"),
                     "tenant = 'all' and cause = 'all' and failures > 0", "month"),
    "causes": Read("failure_causes", ("month", "cause", "failures", "failure_rate_pct"),
                   "tenant = 'all' and cause <> 'all' and failures > 0", "month, failures desc, cause"),
    "faults": Read("gpu_model_reliability", ("gpu_model", "hardware_faults", "gpus_with_faults"),
                   "hardware_faults > 0", "gpu_model"),
    "repeat_offenders": Read("gpu_faults", ("host", "gpu"), "is_repeat_offender", "host, gpu"),
    "quarantined": Read("ingest_freshness", ("ingest_source", "records_quarantined"), "records_quarantined > 0",
                        "ingest_source"),
    "ledger": Read("governance_period", ("reclaims", "pipeline_reclaims", "recovered_gpu_hours", "reused_gpu_hours",
                                         "reuse_share_pct", "false_positives", "false_positive_rate_pct", "reminders",
                                         "released_after_reminder", "self_release_rate_pct", "decided_actions",
                                         "applied", "refused", "exempt", "rate_limited", "shadow"), "tenant = 'all'"),
    "hosts": Read("host_period", ("hosts", "cpu_busy_pct_mean", "cpu_busy_pct_p95_max_day", "busiest_host")),
    "artifacts": Read("artifact_status_period", ("artifact_status", "jobs_share_pct"),
                      order="list_position(['registered', 'logged_only', 'none'], artifact_status)"),
    "checkpoints": Read("checkpoint_period", ("policy_breaches", "policy_breach_rate_pct", "work_lost_gpu_hours")),
    "idle_windows": Read("idle_window_period", ("idle_windows",), "gpu_model = 'all'"),
    "reconciliation": Read("reconciliation_period", ("finding", "findings"), order="finding"),
    "catalog": Read("catalog_version", ("catalog_version",)),
}


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.1f}{unit}"
    return f"{value:,}{unit}"


def _label(name: str) -> str:
    return name.replace("_", " ")


def read_summary(wh: Warehouse) -> dict[str, list[tuple]]:
    """Every figure's rows, as `READS` reads them."""
    with wh.connect(read_only=True) as con:
        return {name: con.execute(read.sql()).fetchall() for name, read in READS.items()}


def print_summary(wh: Warehouse) -> None:
    from pipelines.cli.render import rows as table

    r = read_summary(wh)
    if not r["pool"]:
        click.echo("No data in the warehouse yet.")
        return
    pool = r["pool"]
    click.echo(click.style(f"Pool {pool[0][9]} .. {pool[0][10]}", bold=True))
    click.echo(table(
        ["model", "GPUs", "capacity h", "allocated h", "active h", "idle h", "alloc rate", "util alloc", "pool util"],
        [(model, _fmt(gpus), _fmt(cap), _fmt(alloc), _fmt(active), _fmt(idle_h), _fmt(rate, "%"), _fmt(util, "%"),
          _fmt(pool_util, "%")) for model, gpus, cap, alloc, active, idle_h, rate, util, pool_util, *_ in pool],
        header_rule=False, justify=("left", *["right"] * 8), indent=2, wrap=True))
    hosts = r["hosts"][0]
    if hosts[0]:
        click.echo(f"  hosts (node_exporter): {hosts[0]:,}, CPU busy mean {_fmt(hosts[1], '%')}, "
                   f"busiest day's p95 {_fmt(hosts[2], '%')} ({hosts[3]})")
    _print_jobs(r)
    _print_waste(r)
    _print_ledger(r["ledger"][0] if r["ledger"] else None)
    click.echo(f"  metric catalog version {r['catalog'][0][0] if r['catalog'] else 'unknown'}")


def _print_jobs(r: dict[str, list[tuple]]) -> None:
    total, failed, failure_rate, retries, preemptions, wait_p50, wait_p95 = (
        r["jobs"][0] if r["jobs"] else (0, 0, None, 0, 0, None, None))
    click.echo(click.style("Jobs", bold=True))
    click.echo(f"  {total:,} jobs, {failed or 0:,} failed ({_fmt(failure_rate, '%')} of finished), "
               f"{retries or 0:,} retries, {preemptions or 0:,} preemptions; "
               f"queue wait p50 {_fmt(wait_p50, ' s')}, p95 {_fmt(wait_p95, ' s')}")
    causes = {month: list(rows)[:3] for month, rows in groupby(r["causes"], key=lambda row: row[0])}
    for month, failures, lost, not_user_fault in r["failures"]:
        top = ", ".join(f"{_label(cause)} {rate:.1f}%" for _m, cause, _n, rate in causes.get(month, []))
        click.echo(f"  {month:%Y-%m}: {failures:,} failed attempts (top causes, % of ended attempts: {top}); "
                   f"{_fmt(not_user_fault, '%')} not the user's fault, {_fmt(lost)} GPU-hours lost")
    if r["faults"]:
        per_model = ", ".join(f"{model} {faults:,} on {gpus:,} GPUs" for model, faults, gpus in r["faults"])
        offenders = r["repeat_offenders"]
        named = ", ".join(f"{host}/{gpu}" for host, gpu in offenders[:5]) + (" …" if len(offenders) > 5 else "")
        click.echo(f"  GPU hardware-fault minutes: {per_model}; repeat offenders: {named or 'none'}")
    if r["artifacts"]:
        shares = ", ".join(f"{_label(status)} {share:.0f}%" for status, share in r["artifacts"])
        breaches, breach_pct, work_lost = r["checkpoints"][0]
        click.echo(f"  finished training jobs' artifacts: {shares}; {breaches:,} checkpoint policy "
                   f"breaches ({_fmt(breach_pct, '%')} of the attempts judged), "
                   f"{_fmt(work_lost)} GPU-hours of work lost since the last checkpoint")


def _print_waste(r: dict[str, list[tuple]]) -> None:
    click.echo(click.style("Waste and data quality", bold=True))
    # the idle GPU-hours are the pool table's `idle h` (metrics.pool_period)
    click.echo(f"  {r['idle_windows'][0][0]:,} idle allocation windows (metrics.idle_allocations)")
    for finding, n in r["reconciliation"]:
        click.echo(f"  reconciliation: {n:,} {_label(finding)}")
    for source, n in r["quarantined"]:
        click.echo(f"  quarantined: {n:,} records from {source}")


def _print_ledger(ledger: tuple | None) -> None:
    if not ledger or not ledger[10]:
        return
    (reclaims, by_pipeline, recovered, reused, reuse_pct, false_pos, false_pct, reminders, released,
     released_pct, decided, applied, refused, exempt, limited, shadow) = ledger
    click.echo(click.style("Idle-reclaim (metrics.governance_period, metrics.reclaim_ledger)", bold=True))
    click.echo(f"  {decided:,} policy decisions: {applied or 0:,} applied, {refused or 0:,} refused, "
               f"{exempt or 0:,} exempt, {limited or 0:,} rate limited, {shadow or 0:,} shadow")
    click.echo(f"  {reminders or 0:,} reminders, after which {released or 0:,} users released their GPUs "
               f"themselves ({_fmt(released_pct, '%')})")
    click.echo(f"  {reclaims or 0:,} reclaims ({by_pipeline or 0:,} by the policies) recovered "
               f"{_fmt(recovered or 0.0)} GPU-hours, {_fmt(reused or 0.0)} of them used by other work "
               f"({_fmt(reuse_pct, '%')}); {false_pos or 0:,} false positives ({_fmt(false_pct, '%')})")


# (figure, read, unit, scale): the month run twice, the same view columns read in both warehouses
POLICY_FIGURES: tuple[tuple[str, Read, str, float], ...] = (
    ("idle GPU-hours", Read("pool_period", ("idle_allocated_gpu_hours",), "gpu_model = 'all'"), "", 1),
    ("pool utilisation", Read("pool_period", ("pool_utilisation_pct",), "gpu_model = 'all'"), "%", 1),
    ("queue wait p50", Read("job_period", ("queue_wait_p50_s",), "template = 'all'"), " min", 1 / 60),
    ("queue wait p95", Read("job_period", ("queue_wait_p95_s",), "template = 'all'"), " min", 1 / 60),
    ("reclaims", Read("governance_period", ("reclaims",), "tenant = 'all'"), "", 1),
    ("recovered GPU-hours", Read("governance_period", ("recovered_gpu_hours",), "tenant = 'all'"), "", 1),
    ("reused GPU-hours", Read("governance_period", ("reused_gpu_hours",), "tenant = 'all'"), "", 1),
)


# the views the comparison reads: all a month run only to be compared needs built (pipelines/cli/demo.py)
POLICY_VIEWS: tuple[str, ...] = tuple(sorted({read.view for _, read, _, _ in POLICY_FIGURES}))


def policy_comparison(with_policies: Warehouse, without: Warehouse) -> list[tuple[str, float | None, float | None,
                                                                                 str]]:
    """(figure, with policies, without, unit) for the month run twice: the same metric views read in
    both warehouses."""
    out = []
    with with_policies.connect(read_only=True) as on, without.connect(read_only=True) as off:
        for name, read, unit, scale in POLICY_FIGURES:
            values = [(con.execute(read.sql()).fetchone() or (None,))[0] for con in (on, off)]
            shown = [v if v is None or (isinstance(v, int) and scale == 1) else float(v) * scale for v in values]
            out.append((name, *shown, unit))
    return out


def print_policy_comparison(with_policies: Warehouse, without: Warehouse) -> None:
    from pipelines.cli.render import rows as table

    click.echo(click.style("Idle-reclaim policies on vs off (the same simulated month)", bold=True))
    rows = []
    for name, on, off, unit in policy_comparison(with_policies, without):
        change = None if on is None or off is None else on - off
        sign = "+" if change is not None and change > 0 else ""
        rows.append((name, _fmt(on, unit), _fmt(off, unit), (sign + _fmt(change, unit)) if change is not None else "n/a"))
    click.echo(table(["", "policies on", "off", "change"], rows, header_rule=False,
                     justify=("left", "right", "right", "right"), indent=2, wrap=True))
