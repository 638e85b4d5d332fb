"""`gpupool demo` and `gpupool simulate`: the simulated pool, landed (and for the demo ingested and built)."""
from __future__ import annotations

import datetime as dt
import os
import shlex
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
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
from pipelines.sources.registry import SOURCES, sources_filling
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
@click.option("--fault-scale", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="Multiply the simulator's published GPU and host fault rates (docs/simulator.md): 1 is "
                   "a real fleet's, a few faults a month on the default pool; 50 shows the drain loop at work.")
@VERBOSE_OPTION
def demo(home: Path | None, days: int, gpus: int | None, start: str, seed: int, policies: bool,
         baseline: bool, fault_scale: float, verbose: bool) -> None:
    """Simulate a month of the default pool on the allocator with the idle-reclaim policies acting on
    it, ingest it through Dagster, build the metrics, print a summary; then the same month with the
    policies off, and what they changed."""
    from pipelines.cli import beside
    from pipelines.summary import print_policy_comparison, print_summary

    wh = warehouse(home)
    first = partition_day(start, "--start")  # the simulated days are ingested into the daily partitions
    partition_day((first + dt.timedelta(days=max(days, 1) - 1)).isoformat(), "--start/--days")
    meter = PhaseMeter()
    began = time.monotonic()
    off = Warehouse(wh.home / "baseline")
    compare = baseline and policies
    # the baseline month runs beside this one where the machine allows (pipelines/cli/beside.py): the
    # policies' simulation holds one core and leaves the other idle
    with (beside.Beside(_baseline_month, off.home, days, gpus, seed, first, fault_scale)
          if compare and beside.machine_allows() else nullcontext()) as pending:
        with step_errors(wh, verbose):
            _demo_month(wh, days, gpus, seed, first, policies, meter, fault_scale=fault_scale,
                        ingest_workers=_ingest_workers(days))
        click.echo(f"\nDone in {time.monotonic() - began:.0f} s. Warehouse: {wh.db_path}\n")
        with meter.phase("summary"):
            print_summary(wh)
        if compare:
            click.echo("")
            step("the same month with the idle-reclaim policies off, for comparison"
                 + (" (run side by side with it)" if pending else ""))
            with step_errors(off, verbose):
                if pending:
                    printout, rows = pending.result()
                    click.echo(printout, nl=False)
                else:
                    rows = _baseline_month(off.home, days, gpus, seed, first, fault_scale)
                meter.rows.extend(rows)
            click.echo("")
            with meter.phase("comparison"):
                print_policy_comparison(wh, off)
    click.echo("")
    click.echo(meter.table(time.monotonic() - began))
    click.echo(next_steps(wh.home))


MIN_DAYS_FOR_INGEST_WORKERS = 7  # see _ingest_workers
CODE_LOCATION = "pipelines.definitions"  # Dagster loads it by module: no pyproject.toml needed where it runs


def next_steps(home: Path) -> str:
    """The demo's closing hints: commands that run from any folder (the home named, Dagster's code
    location by module)."""
    quoted = shlex.quote(str(home.resolve()))
    return (f"\nNext: gpupool sql --home {quoted} \"select * from metrics.pool_daily\"\n"
            f"The assets in Dagster: GPUPOOL_HOME={quoted} dagster dev -m {CODE_LOCATION}   (http://localhost:3000)")


def _baseline_month(home: Path, days: int, gpus: int | None, seed: int, first: dt.date,
                    fault_scale: float) -> list[tuple[str, float, int | None]]:
    """The month with the policies off into `home` (in a process of its own beside the demo's month, or
    after it): its phases' rows ("baseline simulate", ...) for the demo's table. Only what the comparison
    reads is ingested and built (summary.POLICY_VIEWS and what they read): the host telemetry and the
    checkpoints are simulated but not loaded."""
    from pipelines.summary import POLICY_VIEWS

    shutil.rmtree(home, ignore_errors=True)  # the demo's own: a fresh month, no tables of an earlier run left
    meter = PhaseMeter()
    _demo_month(Warehouse(home), days, gpus, seed, first, False, meter, "baseline ", fault_scale=fault_scale,
                only=POLICY_VIEWS)
    return meter.rows


def _ingest_workers(days: int) -> int:
    """Processes for the demo month's ingest (`gpupool ingest --workers`): two, each a run of days, where
    the machine has the cores and the month is long enough to repay starting them (bench/README.md,
    "Figures the code's choices rest on"); else one."""
    from pipelines.duckdb_limits import machine_cpus

    return min(2, machine_cpus()) if days >= MIN_DAYS_FOR_INGEST_WORKERS else 1


def _demo_month(wh: Warehouse, days: int, gpus: int | None, seed: int, first: dt.date, policies: bool,
                meter: PhaseMeter, label: str = "", fault_scale: float = 1.0, ingest_workers: int = 1,
                only: tuple[str, ...] = ()) -> None:
    """Simulate (policies acting or not), ingest every landed source, build the models; each a phase of
    `meter`, named with `label` in front. `only`: ingest just the sources these models read, and build
    just them and what they read."""
    from allocator.sim.simulator import simulate as run_simulation
    from pipelines import runner
    from pipelines.build import raw_tables_read
    from pipelines.governance.simulated import SimulatedGovernance
    from pipelines.policies.catalog import load_catalog

    last = first + dt.timedelta(days=days - 1)
    governance = SimulatedGovernance(load_catalog(), wh.home / "governance" / "simulated") if policies else None
    with_policies = "with the idle-reclaim policies acting" if policies else "with no idle-reclaim"
    step(f"simulating {days} days of the pool on the allocator, {with_policies}, into {wh.landing}")
    if not policies:  # a landing zone reused from a run with policies must not keep its decisions
        shutil.rmtree(wh.landing / "governance_actions", ignore_errors=True)
        (wh.landing / "governance_actions").mkdir(parents=True, exist_ok=True)
    with meter.phase(f"{label}simulate"), day_progress("simulating days", days) as progress:
        report = run_simulation(wh.landing, days=days, gpus=gpus, seed=seed, start=first, on_progress=progress,
                                governance=governance, fault_scale=fault_scale)
    click.echo(f"    {report.gpus} GPUs, {report.jobs_submitted:,} jobs, {report.events:,} events, "
               f"{report.samples:,} telemetry samples")
    if governance is not None:
        click.echo(f"    policies looked {governance.checks:,} times; decisions: "
                   + ", ".join(f"{n:,} {k}" for k, n in sorted(governance.decisions.items())))
    sources = [name for name in SOURCES if (wh.landing / name).is_dir()]
    if only:
        needed = sources_filling(raw_tables_read(wh, only))
        sources = [name for name in sources if name in needed]
    with meter.phase(f"{label}ingest"):
        outcomes = runner.ingest_days(wh, sources, first, last, on_step=step, workers=ingest_workers)
    for o in outcomes:
        m = o.metadata
        flag = click.style(f"  checks failed: {', '.join(o.checks_failed)}", fg="red") if o.checks_failed else ""
        click.echo(
            f"    {o.asset}: {m.get('records_read', 0):,} read, {m.get('records_loaded', 0):,} loaded, "
            f"{m.get('records_quarantined', 0):,} quarantined{flag}"
        )
    with meter.phase(f"{label}build"):
        runner.build_models(wh, full_refresh=True, on_step=step, only=only)


# --- time and peak memory of each phase -----------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class PhaseMeter:
    """Wall time and peak memory of each phase of a command.

    Peak memory is the largest resident set (RSS) of this process and its live child processes
    together during the phase: this process's own kernel high-water mark (VmHWM, reset at the start
    of each phase through /proc/self/clear_refs, so it is exact) or, where child processes run, the
    sum sampled every `interval_s` by a background thread, whichever is larger. A sum over processes
    counts the pages they share once per process, so with children it errs high. Without /proc (not
    Linux) the figure is unknown and the table says so; `resource.getrusage`'s ru_maxrss cannot stand
    in: it is a high-water mark over the whole life of the process. The reset lowers that mark too, so
    `/usr/bin/time -v` around a demo reports only the last phase's peak: read this table instead."""

    def __init__(self, interval_s: float = 0.25):
        self.interval_s = interval_s
        self.rows: list[tuple[str, float, int | None]] = []  # phase, wall s, peak bytes

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        exact = _reset_peak()
        peak = [_tree_rss()]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(self.interval_s):
                now = _tree_rss()
                if now is not None:
                    peak[0] = max(peak[0] or 0, now)

        sampler = threading.Thread(target=sample, name=f"peak memory of {name}", daemon=True)
        sampler.start()
        began = time.monotonic()
        try:
            yield
        finally:
            stop.set()
            sampler.join()
        own = _own_peak() if exact else None
        figures = [b for b in (peak[0], own, _tree_rss()) if b is not None]
        self.rows.append((name, time.monotonic() - began, max(figures) if figures else None))

    def table(self, total_s: float) -> str:
        """phase | wall | peak memory, one line each, and the whole run (its peak: the largest phase's)."""
        peaks = [p for _, _, p in self.rows if p is not None]
        rows = [*self.rows, ("total", total_s, max(peaks) if peaks else None)]
        from pipelines.cli import render

        table = render.rows(["phase", "wall", "peak memory"],
                            [(name, f"{wall:.1f} s", "unknown" if peak is None else f"{peak / 2**20:,.0f} MiB")
                             for name, wall, peak in rows],
                            header_rule=False, justify=("left", "right", "right"), indent=2)
        return f"Time and peak memory (this process and its children) of each phase:\n{table}"


def _reset_peak() -> bool:
    """Reset this process's RSS high-water mark (Linux); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _own_peak() -> int | None:
    """This process's RSS high-water mark since the last reset, bytes (VmHWM)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def _tree_rss() -> int | None:
    """RSS of this process and all its descendants now, bytes; None without /proc. One pass over
    /proc/<pid>/stat (the parent and the RSS are both there): cheap enough to run every fraction of a
    second even where /proc/<pid>/task/<tid>/children is not compiled in."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    rss: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:  # it ended while we looked
            continue
        pid = int(name)
        rss[pid] = int(fields[21]) * _PAGE
        children.setdefault(int(fields[1]), []).append(pid)
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


@click.command()
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--days", default=30, show_default=True, help="Days to simulate.")
@click.option("--gpus", default=None, type=int, help="Scale the default pool to about this many GPUs (default 256).")
@click.option("--seed", default=7, show_default=True, help="Random seed: the same seed gives the same files.")
@click.option("--start", "start", default="2026-11-01", show_default=True, help="First day (UTC).")
@click.option("--interval", "interval_s", default=60, show_default=True, help="Telemetry resolution, seconds.")
@click.option("--fault-scale", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="Multiply the simulator's published GPU and host fault rates (docs/simulator.md): 1 is "
                   "a real fleet's, a few faults a month on the default pool; 50 shows the drain loop at work.")
def simulate(out: Path, days: int, gpus: int | None, seed: int, start: str, interval_s: int,
             fault_scale: float) -> None:
    """Run the allocator in virtual time and write the pipeline's three sources under OUT.

    OUT gets the landing layout (OUT/<source>/<YYYY-MM-DD>/...): the allocator's event and audit
    logs, a daily pool snapshot, and DCGM telemetry as Parquet. Load it with `gpupool ingest`, or
    let `gpupool demo` do both.
    """
    from allocator.sim.simulator import simulate as run_simulation

    with day_progress("simulating days", days) as progress:
        report = run_simulation(
            out, days=days, gpus=gpus, seed=seed, start=dt.date.fromisoformat(start),
            on_progress=progress, interval_s=interval_s, fault_scale=fault_scale,
        )
    click.echo(report.summary())
