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
        # the pool's rows of metrics.failure_causes (tenant 'all'), per month: counts add up over the
        # window's months, the share not the user's fault weighs each month by its failures
        causes = con.execute(
            "select cause, sum(failures) as failures, 100.0 * sum(failures) / sum(sum(failures)) over () "
            "from metrics.failure_causes where tenant = 'all' and cause <> 'all' and failures > 0 group by cause "
            "order by failures desc, cause limit 3"
        ).fetchall()
        failures = con.execute(
            "select sum(failures), sum(gpu_hours_lost), "
            "sum(not_user_fault_pct * failures) / nullif(sum(failures), 0) from metrics.failure_causes "
            "where tenant = 'all' and cause = 'all'"
        ).fetchone()
        faults = con.execute(
            "select sum(hardware_faults), count(*) filter (where hardware_faults > 0), "
            "count(*) filter (where is_repeat_offender) from metrics.gpu_faults"
        ).fetchone()
        # a host-day's mean weighs by its minutes with data; the p95 shown is the busiest host-day's
        hosts = con.execute(
            "select count(distinct host), sum(cpu_busy_pct_mean * minutes_with_data) / nullif(sum(minutes_with_data), 0), "
            "max(cpu_busy_pct_p95), arg_max(host, cpu_busy_pct_p95) from metrics.host_daily"
        ).fetchone()
        # finished training jobs' artifact status: each status's share of the window's finished training jobs
        artifacts = con.execute(
            "select artifact_status, 100.0 * sum(jobs) / sum(sum(jobs)) over () from metrics.artifact_status "
            "group by artifact_status order by list_position(['registered', 'logged_only', 'none'], artifact_status)"
        ).fetchall()
        checkpoints = con.execute(
            "select sum(policy_breaches), 100.0 * sum(policy_breaches) / nullif(sum(attempts_with_time_policy), 0), "
            "(select sum(work_lost_gpu_hours) from metrics.work_lost) from metrics.checkpoint_policy_breaches"
        ).fetchone()
        catalog = con.execute("select * from metrics.catalog_version").fetchone()
        ledger = con.execute(
            "select reclaims, pipeline_reclaims, recovered_gpu_hours, reused_gpu_hours, reuse_share_pct, "
            "false_positives, false_positive_rate_pct, reminders, released_after_reminder, self_release_rate_pct, "
            "decided_actions, applied, refused, exempt, rate_limited, shadow "
            "from metrics.governance_period where tenant = 'all'"
        ).fetchone()
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
    if hosts[0]:
        click.echo(f"  hosts (node_exporter): {hosts[0]:,}, CPU busy mean {_fmt(hosts[1], '%')}, "
                   f"busiest day's p95 {_fmt(hosts[2], '%')} ({hosts[3]})")
    total, failed, failure_rate, retries, preemptions, wait_p50, wait_p95 = jobs
    click.echo(click.style("Jobs", bold=True))
    click.echo(f"  {total:,} jobs, {failed or 0:,} failed ({_fmt(failure_rate, '%')} of finished), "
               f"{retries or 0:,} retries, {preemptions or 0:,} preemptions; "
               f"queue wait p50 {_fmt(wait_p50, ' s')}, p95 {_fmt(wait_p95, ' s')}")
    if failures[0]:
        top = ", ".join(f"{cause.replace('_', ' ')} {share:.0f}%" for cause, _n, share in causes)
        click.echo(f"  {int(failures[0]):,} failed attempts: {top}; {_fmt(failures[2], '%')} not the user's fault, "
                   f"{_fmt(failures[1])} GPU-hours lost; GPU hardware faults {int(faults[0] or 0):,} on "
                   f"{faults[1] or 0:,} GPUs, {faults[2] or 0:,} repeat offenders")
    if artifacts:
        shares = ", ".join(f"{status.replace('_', ' ')} {share:.0f}%" for status, share in artifacts)
        click.echo(f"  finished training jobs' artifacts: {shares}; {int(checkpoints[0] or 0):,} checkpoint policy "
                   f"breaches ({_fmt(checkpoints[1], '%')} of the attempts judged), "
                   f"{_fmt(checkpoints[2] or 0.0)} GPU-hours of work lost since the last checkpoint")
    click.echo(click.style("Waste and data quality", bold=True))
    click.echo(f"  {idle[0]:,} idle allocation windows, {_fmt(idle[1] or 0.0)} idle GPU-hours")
    for finding, n in findings:
        click.echo(f"  reconciliation: {n:,} {finding.replace('_', ' ')}")
    for source, n in quarantined:
        click.echo(f"  quarantined: {n:,} records from {source}")
    if ledger and ledger[10]:
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
    click.echo(f"  metric catalog version {catalog[0] if catalog else 'unknown'}")


POLICY_FIGURES = (
    ("idle GPU-hours", "select idle_allocated_gpu_hours from metrics.pool_period where gpu_model = 'all'", ""),
    ("pool utilisation", "select pool_utilisation_pct from metrics.pool_period where gpu_model = 'all'", "%"),
    ("queue wait p50", "select queue_wait_p50_s / 60 from metrics.job_period where template = 'all'", " min"),
    ("queue wait p95", "select queue_wait_p95_s / 60 from metrics.job_period where template = 'all'", " min"),
    ("reclaims", "select reclaims from metrics.governance_period where tenant = 'all'", ""),
    ("recovered GPU-hours", "select recovered_gpu_hours from metrics.governance_period where tenant = 'all'", ""),
    ("reused GPU-hours", "select reused_gpu_hours from metrics.governance_period where tenant = 'all'", ""),
)


def policy_comparison(with_policies: Warehouse, without: Warehouse) -> list[tuple[str, float | None, float | None,
                                                                                 str]]:
    """(figure, with policies, without, unit) for the month run twice: the same metric views read in
    both warehouses."""
    out = []
    with with_policies.connect(read_only=True) as on, without.connect(read_only=True) as off:
        for name, query, unit in POLICY_FIGURES:
            values = [(con.execute(query).fetchone() or (None,))[0] for con in (on, off)]
            out.append((name, *(v if v is None or isinstance(v, int) else float(v) for v in values), unit))
    return out


def print_policy_comparison(with_policies: Warehouse, without: Warehouse) -> None:
    click.echo(click.style("Idle-reclaim policies on vs off (the same simulated month)", bold=True))
    click.echo(f"  {'':<22} {'policies on':>12} {'off':>12} {'change':>12}")
    for name, on, off, unit in policy_comparison(with_policies, without):
        change = None if on is None or off is None else on - off
        sign = "+" if change is not None and change > 0 else ""
        click.echo(f"  {name:<22} {_fmt(on, unit):>12} {_fmt(off, unit):>12} "
                   f"{(sign + _fmt(change, unit)) if change is not None else 'n/a':>12}")
