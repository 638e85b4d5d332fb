"""`gpupool demo` and `gpupool simulate`: the simulated pool, landed (and for the demo ingested and built)."""
from __future__ import annotations

import datetime as dt
import shutil
import time
from pathlib import Path

import click

from pipelines.cli.common import (
    HOME_OPTION,
    VERBOSE_OPTION,
    day_progress,
    partition_day,
    step,
    step_errors,
    warehouse,
)
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse


@click.command()
@HOME_OPTION
@click.option("--days", default=30, show_default=True, help="Days to simulate.")
@click.option("--gpus", default=None, type=int, help="Scale the default pool to about this many GPUs (default 256).")
@click.option("--start", "start", default="2026-11-01", show_default=True, help="First day (UTC).")
@click.option("--seed", default=7, show_default=True, help="Random seed of the simulation.")
@click.option("--policies/--no-policies", default=True, show_default=True,
              help="Let the idle-reclaim policies (models/policies/policies.yml) act on the simulated pool.")
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="Also run the same month with the policies off (into HOME/baseline) and print the difference.")
@VERBOSE_OPTION
def demo(home: Path | None, days: int, gpus: int | None, start: str, seed: int, policies: bool,
         baseline: bool, verbose: bool) -> None:
    """Simulate a month of the default pool on the allocator with the idle-reclaim policies acting on
    it, ingest it through Dagster, build the metrics, print a summary; then the same month with the
    policies off, and what they changed."""
    from pipelines.summary import print_policy_comparison, print_summary

    wh = warehouse(home)
    first = partition_day(start, "--start")  # the simulated days are ingested into the daily partitions
    partition_day((first + dt.timedelta(days=max(days, 1) - 1)).isoformat(), "--start/--days")
    began = time.monotonic()
    with step_errors(wh, verbose):
        _demo_month(wh, days, gpus, seed, first, policies)
    click.echo(f"\nDone in {time.monotonic() - began:.0f} s. Warehouse: {wh.db_path}\n")
    print_summary(wh)
    if baseline and policies:
        off = Warehouse(wh.home / "baseline")
        click.echo("")
        step("the same month with the idle-reclaim policies off, for comparison")
        with step_errors(off, verbose):
            _demo_month(off, days, gpus, seed, first, False)
        click.echo("")
        print_policy_comparison(wh, off)
    click.echo(
        "\nNext: `gpupool sql \"select * from metrics.pool_daily\"`, or `dagster dev` to see the assets."
    )


def _demo_month(wh: Warehouse, days: int, gpus: int | None, seed: int, first: dt.date, policies: bool) -> None:
    """Simulate (policies acting or not), ingest every landed source, build the models."""
    from allocator.sim.simulator import simulate as run_simulation
    from pipelines import runner
    from pipelines.governance.simulated import SimulatedGovernance
    from pipelines.policies.catalog import load_catalog

    last = first + dt.timedelta(days=days - 1)
    governance = SimulatedGovernance(load_catalog(), wh.home / "governance" / "simulated") if policies else None
    with_policies = "with the idle-reclaim policies acting" if policies else "with no idle-reclaim"
    step(f"simulating {days} days of the pool on the allocator, {with_policies}, into {wh.landing}")
    if not policies:  # a landing zone reused from a run with policies must not keep its decisions
        shutil.rmtree(wh.landing / "governance_actions", ignore_errors=True)
        (wh.landing / "governance_actions").mkdir(parents=True, exist_ok=True)
    with day_progress("simulating days", days) as progress:
        report = run_simulation(wh.landing, days=days, gpus=gpus, seed=seed, start=first, on_progress=progress,
                                governance=governance)
    click.echo(f"    {report.gpus} GPUs, {report.jobs_submitted:,} jobs, {report.events:,} events, "
               f"{report.samples:,} telemetry samples")
    if governance is not None:
        click.echo(f"    policies looked {governance.checks:,} times; decisions: "
                   + ", ".join(f"{n:,} {k}" for k, n in sorted(governance.decisions.items())))
    sources = [name for name in SOURCES if (wh.landing / name).is_dir()]
    outcomes = runner.ingest_days(wh, sources, first, last, on_step=step)
    for o in outcomes:
        m = o.metadata
        flag = click.style(f"  checks failed: {', '.join(o.checks_failed)}", fg="red") if o.checks_failed else ""
        click.echo(
            f"    {o.asset}: {m.get('records_read', 0):,} read, {m.get('records_loaded', 0):,} loaded, "
            f"{m.get('records_quarantined', 0):,} quarantined{flag}"
        )
    runner.build_models(wh, full_refresh=True, on_step=step)


@click.command()
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--days", default=30, show_default=True, help="Days to simulate.")
@click.option("--gpus", default=None, type=int, help="Scale the default pool to about this many GPUs (default 256).")
@click.option("--seed", default=7, show_default=True, help="Random seed: the same seed gives the same files.")
@click.option("--start", "start", default="2026-11-01", show_default=True, help="First day (UTC).")
@click.option("--interval", "interval_s", default=60, show_default=True, help="Telemetry resolution, seconds.")
def simulate(out: Path, days: int, gpus: int | None, seed: int, start: str, interval_s: int) -> None:
    """Run the allocator in virtual time and write the pipeline's three sources under OUT.

    OUT gets the landing layout (OUT/<source>/<YYYY-MM-DD>/...): the allocator's event and audit
    logs, a daily pool snapshot, and DCGM telemetry as Parquet. Load it with `gpupool ingest`, or
    let `gpupool demo` do both.
    """
    from allocator.sim.simulator import simulate as run_simulation

    with day_progress("simulating days", days) as progress:
        report = run_simulation(
            out, days=days, gpus=gpus, seed=seed, start=dt.date.fromisoformat(start),
            on_progress=progress, interval_s=interval_s,
        )
    click.echo(report.summary())
