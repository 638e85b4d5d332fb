"""The short summary `gpupool demo` prints, read from the metrics views only."""
from __future__ import annotations

import click

from pipelines.warehouse import Warehouse


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.1f}{unit}"
    return f"{value:,}{unit}"


def print_summary(wh: Warehouse) -> None:
    with wh.connect(read_only=True) as con:
        pool = con.execute(
            "select gpu_model, physical_gpus, capacity_gpu_hours, allocated_gpu_hours, active_gpu_hours, "
            "idle_allocated_gpu_hours, allocation_rate_pct, utilisation_of_allocated_pct, pool_utilisation_pct, "
            "first_day, last_day from metrics.pool_period order by gpu_model = 'all', gpu_model"
        ).fetchall()
        jobs = con.execute(
            "select jobs, failed_jobs, failure_rate_pct, retries, preemptions, queue_wait_p50_s, queue_wait_p95_s "
            "from metrics.job_period where template = 'all'"
        ).fetchone() or (0, 0, None, 0, 0, None, None)
        idle = con.execute(
            "select count(*), (select idle_allocated_gpu_hours from metrics.pool_period where gpu_model = 'all') "
            "from metrics.idle_allocations"
        ).fetchone()
        findings = con.execute(
            "select finding, count(*) from metrics.telemetry_reconciliation group by 1 order by 1"
        ).fetchall()
        quarantined = con.execute(
            "select ingest_source, count(*) from ops.quarantine group by 1 order by 1"
        ).fetchall()
        catalog = con.execute("select * from metrics.catalog_version").fetchone()
    if not pool:
        click.echo("No data in the warehouse yet.")
        return
    click.echo(click.style(f"Pool {pool[0][9]} .. {pool[0][10]}", bold=True))
    click.echo(f"  {'model':<6} {'GPUs':>5} {'capacity h':>11} {'allocated h':>12} {'active h':>10} "
               f"{'idle h':>8} {'alloc rate':>10} {'util alloc':>10} {'pool util':>9}")
    for row in pool:
        model, gpus, cap, alloc, active, idle_h, rate, util, pool_util = row[:9]
        click.echo(f"  {model:<6} {_fmt(gpus):>5} {_fmt(cap):>11} {_fmt(alloc):>12} {_fmt(active):>10} "
                   f"{_fmt(idle_h):>8} {_fmt(rate, '%'):>10} {_fmt(util, '%'):>10} {_fmt(pool_util, '%'):>9}")
    total, failed, failure_rate, retries, preemptions, wait_p50, wait_p95 = jobs
    click.echo(click.style("Jobs", bold=True))
    click.echo(f"  {total:,} jobs, {failed or 0:,} failed ({_fmt(failure_rate, '%')} of finished), "
               f"{retries or 0:,} retries, {preemptions or 0:,} preemptions; "
               f"queue wait p50 {_fmt(wait_p50, ' s')}, p95 {_fmt(wait_p95, ' s')}")
    click.echo(click.style("Waste and data quality", bold=True))
    click.echo(f"  {idle[0]:,} idle allocation windows, {_fmt(idle[1] or 0.0)} idle GPU-hours")
    for finding, n in findings:
        click.echo(f"  reconciliation: {n:,} {finding.replace('_', ' ')}")
    for source, n in quarantined:
        click.echo(f"  quarantined: {n:,} records from {source}")
    click.echo(f"  metric catalog version {catalog[0] if catalog else 'unknown'}")
