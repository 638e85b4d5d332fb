"""The gpupool command line."""
from __future__ import annotations

import datetime as dt
import shutil
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import click
import duckdb
import polars as pl

from allocator.cli import allocator as allocator_group
from pipelines.paths import default_home
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse

HOME_OPTION = click.option(
    "--home",
    type=click.Path(path_type=Path),
    default=None,
    help="gpupool home (warehouse, lake, landing). Default: $GPUPOOL_HOME or ./.gpupool",
)


def _warehouse(home: Path | None) -> Warehouse:
    return Warehouse(home or default_home())


def _step(message: str) -> None:
    click.echo(click.style("▸ ", fg="cyan") + message)


# Exit codes of ingest, build and land (docs/operators.md, "Exit codes"), for cron and CI.
EXIT_OK = 0
EXIT_FAILED = 1  # a step failed: the message carries the cause (a failing model and DuckDB's words, ...)
EXIT_USAGE = 2  # bad arguments (click's own code): a malformed or out-of-range --date, an unknown source
EXIT_BLOCKED = 3  # the batch was loaded but failed its blocking data-quality check; models not rebuilt
EXIT_NOTHING_READ = 4  # no file the source reads: nothing was ingested


class ExitError(click.ClickException):
    """A failure with its own exit code; click prints "Error: <message>" on stderr, no traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


VERBOSE_OPTION = click.option("--verbose", is_flag=True, help="On a failure, also print the full error with its traceback.")


def _partition_day(day: str | None, param: str = "--date") -> dt.date:
    """The UTC day of --date (default today), or a usage error naming the limit of the partitions."""
    from pipelines.partitions import check_day

    try:
        partition = dt.date.fromisoformat(day) if day else dt.datetime.now(dt.UTC).date()
    except ValueError:
        raise click.BadParameter(f"{day!r} is not a date YYYY-MM-DD", param_hint=param) from None
    try:
        check_day(partition)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint=param) from None
    return partition


@contextmanager
def _step_errors(wh: Warehouse, verbose: bool):
    """Turn a failed ingest or build step into its cause on one line and exit 1; the full error goes to
    HOME/logs/last-error.log (and to stderr with --verbose)."""
    from pipelines.runner import StepFailed

    try:
        yield
    except StepFailed as err:
        log = wh.home / "logs" / "last-error.log"
        hint = ""
        if err.detail:
            try:
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text(f"{dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ} {err}\n\n{err.detail}")
                hint = f"\n(full error in {log}; --verbose prints it)"
            except OSError:
                pass
            if verbose:
                click.echo(err.detail, err=True)
        raise ExitError(f"{err}{hint}", EXIT_FAILED) from None


def _print_outcomes(outcomes: list, name_assets: bool) -> None:
    """Counts, parser notes and failed checks of each ingest asset."""
    for o in outcomes:
        m = o.metadata
        label = f"{o.asset}: " if name_assets else ""
        click.echo(
            f"    {label}{m.get('records_read', 0):,} read, {m.get('records_loaded', 0):,} loaded, "
            f"{m.get('records_quarantined', 0):,} quarantined"
        )
        for note in m.get("notes") or []:
            click.echo(f"      note: {note}")
        if o.checks_failed:
            click.echo(click.style(f"    checks failed: {', '.join(o.checks_failed)}", fg="red"))
        for problem in o.check_problems:
            click.echo(click.style(f"      {problem}", fg="red"))


@click.group()
def main() -> None:
    """gpupool: operations and governance for a shared GPU pool."""


@main.command()
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

    wh = _warehouse(home)
    first = _partition_day(start, "--start")  # the simulated days are ingested into the daily partitions
    _partition_day((first + dt.timedelta(days=max(days, 1) - 1)).isoformat(), "--start/--days")
    began = time.monotonic()
    with _step_errors(wh, verbose):
        _demo_month(wh, days, gpus, seed, first, policies)
    click.echo(f"\nDone in {time.monotonic() - began:.0f} s. Warehouse: {wh.db_path}\n")
    print_summary(wh)
    if baseline and policies:
        off = Warehouse(wh.home / "baseline")
        click.echo("")
        _step("the same month with the idle-reclaim policies off, for comparison")
        with _step_errors(off, verbose):
            _demo_month(off, days, gpus, seed, first, False)
        click.echo("")
        print_policy_comparison(wh, off)
    click.echo(
        "\nNext: `gpupool sql \"select * from metrics.pool_daily\"`, or `dagster dev` to see the assets."
    )


def _demo_month(wh: Warehouse, days: int, gpus: int | None, seed: int, first: dt.date, policies: bool) -> None:
    """Simulate (policies acting or not), ingest every landed source, build the models."""
    from allocator.simulator import simulate as run_simulation
    from pipelines import runner
    from pipelines.policies.catalog import load_catalog
    from pipelines.policies.simulated import SimulatedGovernance

    last = first + dt.timedelta(days=days - 1)
    governance = SimulatedGovernance(load_catalog(), wh.home / "governance" / "simulated") if policies else None
    with_policies = "with the idle-reclaim policies acting" if policies else "with no idle-reclaim"
    _step(f"simulating {days} days of the pool on the allocator, {with_policies}, into {wh.landing}")
    if not policies:  # a landing zone reused from a run with policies must not keep its decisions
        shutil.rmtree(wh.landing / "governance_actions", ignore_errors=True)
        (wh.landing / "governance_actions").mkdir(parents=True, exist_ok=True)
    with _day_progress("simulating days", days) as progress:
        report = run_simulation(wh.landing, days=days, gpus=gpus, seed=seed, start=first, on_progress=progress,
                                governance=governance)
    click.echo(f"    {report.gpus} GPUs, {report.jobs_submitted:,} jobs, {report.events:,} events, "
               f"{report.samples:,} telemetry samples")
    if governance is not None:
        click.echo(f"    policies looked {governance.checks:,} times; decisions: "
                   + ", ".join(f"{n:,} {k}" for k, n in sorted(governance.decisions.items())))
    sources = [name for name in SOURCES if (wh.landing / name).is_dir()]
    outcomes = runner.ingest_days(wh, sources, first, last, on_step=_step)
    for o in outcomes:
        m = o.metadata
        flag = click.style(f"  checks failed: {', '.join(o.checks_failed)}", fg="red") if o.checks_failed else ""
        click.echo(
            f"    {o.asset}: {m.get('records_read', 0):,} read, {m.get('records_loaded', 0):,} loaded, "
            f"{m.get('records_quarantined', 0):,} quarantined{flag}"
        )
    runner.build_models(wh, on_step=_step)


@main.command()
@click.argument("source", type=click.Choice(sorted(SOURCES)))
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@HOME_OPTION
@click.option("--date", "day", default=None,
              help="Partition day (UTC) for records without their own timestamp. Default: today.")
@click.option("--no-build", is_flag=True, help="Do not rebuild the models afterwards.")
@VERBOSE_OPTION
def ingest(source: str, path: Path, home: Path | None, day: str | None, no_build: bool, verbose: bool) -> None:
    """Load a file (or a folder of files) of SOURCE into the warehouse.

    The files are copied to the landing zone under the day's folder and the day's partition of
    SOURCE is re-ingested, replacing what was there. Records that carry their own time (samples,
    audit and allocator events) go to the partition of their own UTC day.

    Exit codes: 0 done; 1 a step failed; 2 bad arguments; 3 the batch failed its blocking
    data-quality check (models not rebuilt); 4 no file the source reads (docs/operators.md).
    """
    from pipelines import runner
    from pipelines.ingest import NothingToRead, not_read, stage_files
    from pipelines.sources.registry import source as ingest_source

    partition = _partition_day(day)
    wh = _warehouse(home)
    patterns = ", ".join(ingest_source(source).patterns)
    for skipped in not_read(source, path) if path.is_dir() else []:  # a lone file: the error below says it
        click.echo(click.style(f"warning: {skipped}: not read: source {source} reads {patterns}", fg="yellow"),
                   err=True)
    try:
        staged = stage_files(wh, source, path, partition)
    except NothingToRead as err:
        raise ExitError(f"{err}; nothing was ingested", EXIT_NOTHING_READ) from None
    except OSError as err:
        raise ExitError(f"staging {path} failed: {err}", EXIT_FAILED) from None
    _step(f"staged {len(staged)} file(s) in {staged[0].parent}")
    with _step_errors(wh, verbose):
        outcomes = runner.ingest_days(wh, [source], partition, partition, on_step=_step)
    _print_outcomes(outcomes, name_assets=False)
    with wh.connect(read_only=True) as con:
        reasons = con.execute(
            "select reason, count(*) from ops.quarantine where ingest_source = ? and partition_date = ? "
            "group by reason order by 2 desc limit 10",
            [source, partition],
        ).fetchall()
    for reason, n in reasons:
        click.echo(f"      quarantined {n:>6,}: {reason}")
    if not any(o.metadata.get("files_read") for o in outcomes):
        raise ExitError(f"no file of {staged[0].parent} was read (source {source} reads {patterns})",
                        EXIT_NOTHING_READ)
    if any(o.checks_failed for o in outcomes):
        raise ExitError(
            f"the batch of {source} for {partition} failed its blocking data-quality check: models not rebuilt. "
            "Fix the input and ingest again, or run `gpupool build` to rebuild anyway (bad records stay in "
            "ops.quarantine).", EXIT_BLOCKED)
    if not no_build:
        with _step_errors(wh, verbose):
            runner.build_models(wh, on_step=_step)


@main.command()
@click.argument("query")
@HOME_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--limit", default=200, show_default=True, help="Rows to print in table format.")
def sql(query: str, home: Path | None, fmt: str, limit: int) -> None:
    """Run a read-only SQL QUERY against the warehouse (DuckDB dialect).

    Only queries run (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN), on a connection that
    can read the warehouse and the lake its views read, and no other file (pipelines/sandbox.py)."""
    from pipelines.sandbox import QueryRefused, check_read_only

    wh = _warehouse(home)
    try:
        check_read_only(query)
    except QueryRefused as err:
        raise click.ClickException(str(err)) from None
    except duckdb.Error as err:
        raise click.ClickException(f"query failed: {err}") from None
    try:
        con = wh.analyst_connect()
    except FileNotFoundError as err:
        raise click.ClickException(str(err)) from None
    try:
        result = con.sql(query)
        frame = result.pl() if result is not None else pl.DataFrame()
    except duckdb.PermissionException as err:
        raise click.ClickException(f"query failed: {err} (`gpupool sql` opens no file but the warehouse and "
                                   "the lake its views read)") from None
    except duckdb.Error as err:
        raise click.ClickException(f"query failed: {err}") from None
    except Exception as err:  # noqa: BLE001 - e.g. a DuckDB type Polars cannot hold: say so, no traceback
        raise click.ClickException(f"query failed: cannot show the result ({type(err).__name__}: {err})") from None
    finally:
        con.close()
    try:
        if fmt == "csv":
            sys.stdout.write(frame.write_csv())
        elif fmt == "json":
            sys.stdout.write(frame.write_json() + "\n")
        else:
            with pl.Config(tbl_rows=limit, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
                click.echo(frame.head(limit))
    except pl.exceptions.PolarsError as err:  # e.g. nested columns in CSV
        raise click.ClickException(f"cannot write the result as {fmt}: {err} (try --format json)") from None


@main.command()
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
    from allocator.simulator import simulate as run_simulation

    with _day_progress("simulating days", days) as progress:
        report = run_simulation(
            out, days=days, gpus=gpus, seed=seed, start=dt.date.fromisoformat(start),
            on_progress=progress, interval_s=interval_s,
        )
    click.echo(report.summary())


@main.command()
@HOME_OPTION
@click.option("--month", default=None, help="Month to replay, YYYY-MM. Default: the month of the latest submission.")
@click.option("--days", default=None, type=int, help="Replay only the month's first N days.")
@click.option("--add-nodes", "add_nodes", multiple=True, metavar="MODEL=N",
              help="Add N nodes of a GPU model (copies of one of its nodes); negative removes. Repeatable.")
@click.option("--quota", "quotas", multiple=True, metavar="QUEUE:MODEL=N",
              help="Set a queue's quota for a GPU model, in GPUs. Repeatable.")
@click.option("--idle-window", "idle_window", default=None, type=int,
              help="Idle-allocation policy window, minutes (turns the policies on if the month had none).")
@click.option("--idle-threshold", "idle_threshold", default=None, type=float,
              help="Idle-allocation policy activity threshold, 0..1.")
@click.option("--policies/--no-policies", default=None,
              help="Replay with the idle-reclaim policies on or off. Default: as in the observed month.")
def whatif(home: Path | None, month: str | None, days: int | None, add_nodes: tuple[str, ...],
           quotas: tuple[str, ...], idle_window: int | None, idle_threshold: float | None,
           policies: bool | None) -> None:
    """Replay a month's demand from the warehouse through the allocator, as observed and with a change;
    print wait p50/p95, utilisation and idle GPU-hours next to the observed month (docs/whatif.md)."""
    from pipelines.capacity.replay import Change
    from pipelines.capacity.replay import whatif as run_whatif

    try:
        change = Change.parse(add_nodes, quotas, idle_window, idle_threshold)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    wh = _warehouse(home)
    if not wh.db_path.exists():
        raise click.ClickException(f"{wh.db_path}: no warehouse; run `gpupool demo` or ingest a month first")
    began = time.monotonic()
    with ExitStack() as stack:
        bar: list = []

        def progress(done: int, total: int, day: dt.date) -> None:
            if not bar:  # the month's length is known once its demand is read
                bar.append(stack.enter_context(_day_progress("replaying days (baseline)", total)))
            bar[0](done, total, day)

        try:
            result = run_whatif(wh.home, change, month=month, days=days, policies=policies, on_step=_step,
                                on_progress=progress)
        except ValueError as error:
            raise click.ClickException(str(error)) from None
    click.echo(f"\n{result.month_start:%Y-%m-%d}, {result.days} days, replayed in {time.monotonic() - began:.0f} s\n")
    click.echo(result.table())


@contextmanager
def _day_progress(verb: str, days: int):
    """A progress bar over simulated days (one line when the output is not a terminal)."""
    with click.progressbar(length=days, label=f"  {verb}", show_pos=True, width=30) as bar:
        yield lambda _done, _total, _day: bar.update(1)


@main.group()
def backfill() -> None:
    """Fetch history from live systems into the landing zone (configured in gpupool.yml)."""


@backfill.command("prometheus")
@click.option("--start", required=True, type=click.DateTime(), help="Window start, UTC.")
@click.option("--end", required=True, type=click.DateTime(), help="Window end, UTC.")
@click.option("--no-ingest", is_flag=True, help="Only land the responses; do not ingest the days.")
@HOME_OPTION
def backfill_prometheus(start: dt.datetime, end: dt.datetime, no_ingest: bool, home: Path | None) -> None:
    """Backfill DCGM series from Prometheus' query_range for a window."""
    from pipelines.config import ConfigError, config_path, section
    from pipelines.connectors.prometheus import PrometheusConfig, PrometheusError
    from pipelines.connectors.prometheus import backfill_prometheus as run_backfill

    try:
        settings = section("prometheus", PrometheusConfig)
        if settings is None:
            raise click.ClickException(f"{config_path()}: no prometheus section (see gpupool.example.yml)")
        report = run_backfill(_warehouse(home), start, end, settings, ingest=not no_ingest, log=_step)
    except (ConfigError, PrometheusError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(report.summary())


@main.group()
def land() -> None:
    """Land a day from a live system (configured in gpupool.yml), ingest it, rebuild the models."""


DATE_OPTION = click.option("--date", "day", default=None, help="UTC day to land. Default: today.")
NO_BUILD_OPTION = click.option("--no-build", is_flag=True, help="Do not rebuild the models afterwards.")
OFFLINE_OPTION = click.option(
    "--offline-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
    help="Read recorded answers from DIR/<day>/ instead of the live system (no config section needed).",
)


def _require_section(name: str, model: type) -> None:
    from pipelines.config import ConfigError, config_path, section

    try:
        settings = section(name, model)
    except ConfigError as err:
        raise click.ClickException(f"{err} (fix the file, see gpupool.example.yml)") from None
    if settings is None:
        raise click.ClickException(
            f"{config_path()}: no `{name}` section: add one (see gpupool.example.yml and docs/connectors.md), "
            f"or set $GPUPOOL_CONFIG to the file that has it"
        )


def _ingest_landed(wh: Warehouse, paths: list[Path], day: dt.date, no_build: bool, verbose: bool = False) -> None:
    """Ingest the day of every source that got files (landing/<source>/<day>/<file>), then rebuild."""
    from pipelines import runner

    for path in paths:
        _step(f"landed {path}")
    sources = sorted({p.parent.parent.name for p in paths})
    with _step_errors(wh, verbose):
        outcomes = runner.ingest_days(wh, sources, day, day, on_step=_step)
    _print_outcomes(outcomes, name_assets=True)
    blocked = [o.asset for o in outcomes if o.checks_failed]
    if blocked:
        raise ExitError(
            f"{', '.join(blocked)} for {day} failed the blocking data-quality check: models not rebuilt. "
            "See ops.quarantine, then `gpupool build` to rebuild anyway.", EXIT_BLOCKED)
    if not no_build:
        with _step_errors(wh, verbose):
            runner.build_models(wh, on_step=_step)


def _land_day(day: str | None) -> dt.date:
    return _partition_day(day)


@land.command("slurm")
@DATE_OPTION
@HOME_OPTION
@NO_BUILD_OPTION
@OFFLINE_OPTION
@VERBOSE_OPTION
def land_slurm(day: str | None, home: Path | None, no_build: bool, offline_dir: Path | None, verbose: bool) -> None:
    """Land a day of Slurm accounting (sacct / slurmrestd), ingest it, rebuild the models."""
    import requests

    from pipelines.config import ConfigError
    from pipelines.connectors import HttpStatusError
    from pipelines.connectors.slurm import (
        SECTION,
        SlurmAccounting,
        SlurmCommandError,
        SlurmConfig,
        SlurmRestError,
    )

    partition = _land_day(day)
    if offline_dir is None:
        _require_section(SECTION, SlurmConfig)
    wh = _warehouse(home)
    _step(f"landing Slurm accounting for {partition}")
    try:
        paths = SlurmAccounting(offline_dir=str(offline_dir or "")).land_day(wh, partition)
    except (SlurmCommandError, SlurmRestError, HttpStatusError, requests.RequestException) as err:
        raise click.ClickException(f"{err} (check the slurm section of the config and that Slurm answers)") from None
    except (ConfigError, FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    _ingest_landed(wh, paths, partition, no_build, verbose)


@land.command("kueue")
@DATE_OPTION
@HOME_OPTION
@NO_BUILD_OPTION
@OFFLINE_OPTION
@VERBOSE_OPTION
def land_kueue(day: str | None, home: Path | None, no_build: bool, offline_dir: Path | None, verbose: bool) -> None:
    """Land a snapshot of Kueue Workloads (and their pods) into a day, ingest it, rebuild the models."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from pipelines.config import ConfigError
    from pipelines.connectors.kubernetes import SECTION, KubernetesAnswerError, KubernetesConfig, KueueState

    partition = _land_day(day)
    if offline_dir is None:
        _require_section(SECTION, KubernetesConfig)
    wh = _warehouse(home)
    _step(f"landing Kueue Workloads for {partition}")
    try:
        paths = KueueState(offline_dir=str(offline_dir or "")).land(wh, partition)
    except (ApiException, ConfigException, HTTPError, KubernetesAnswerError) as err:
        raise click.ClickException(
            f"{err} (check the kubernetes section of the config and that the API server answers)"
        ) from None
    except (ConfigError, OSError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    _ingest_landed(wh, paths, partition, no_build, verbose)


@main.command("k8s-audit-webhook")
@click.option("--host", default=None, help="Address to listen on. Default: kubernetes.audit_webhook.host, else 127.0.0.1.")
@click.option("--port", default=None, type=int, help="Port. Default: kubernetes.audit_webhook.port, else 8765.")
@click.option("--insecure-no-auth", is_flag=True,
              help="Serve without a bearer token: any client that reaches the port may write audit events.")
@HOME_OPTION
def k8s_audit_webhook(host: str | None, port: int | None, insecure_no_auth: bool, home: Path | None) -> None:
    """Serve the Kubernetes audit webhook backend into landing/k8s_audit/<day>/ until interrupted.

    The bearer token is $GPUPOOL_AUDIT_TOKEN (else kubernetes.audit_webhook.token); without one it
    refuses to start unless --insecure-no-auth. TLS uses kubernetes.audit_webhook.certfile / keyfile
    when set. See docs/connectors.md for the API server's webhook kubeconfig.
    """
    import os

    from pipelines.config import ConfigError, section
    from pipelines.connectors.kubernetes import SECTION, KubernetesConfig, serve_audit_webhook

    try:
        settings = section(SECTION, KubernetesConfig)
    except ConfigError as err:
        raise click.ClickException(f"{err} (fix the file, see gpupool.example.yml)") from None
    hook = settings.audit_webhook if settings is not None else None
    written = hook.model_fields_set if hook else set()  # keys the file sets, not the model's defaults
    host = host or (hook.host if "host" in written else "127.0.0.1")
    port = port if port is not None else (hook.port if "port" in written else 8765)
    token = (os.environ.get("GPUPOOL_AUDIT_TOKEN") or (hook.token if hook else None) or "").strip() or None
    if token is None and not insecure_no_auth:
        raise click.ClickException(
            "no bearer token for the audit webhook: set $GPUPOOL_AUDIT_TOKEN (or kubernetes.audit_webhook.token: "
            '"${GPUPOOL_AUDIT_TOKEN}") and put the same token in the API server\'s webhook kubeconfig '
            "(users[].user.token; see docs/connectors.md), or pass --insecure-no-auth to accept any client"
        )
    options: dict[str, object] = {"insecure_no_auth": token is None}
    if hook is not None:
        options.update(certfile=hook.certfile, keyfile=hook.keyfile,
                       max_body_bytes=int(hook.max_body_mib * 2**20),
                       max_item_bytes=int(hook.max_item_mib * 2**20), max_depth=hook.max_depth,
                       max_items=hook.max_items)
    wh = _warehouse(home)
    scheme = "https" if options.get("certfile") else "http"
    if token is None:
        rule = "!" * 78
        click.echo(f"{rule}\n!! INSECURE: the audit webhook runs WITHOUT authentication (--insecure-no-auth).\n"
                   f"!! Any client that reaches {host}:{port} can write audit events into the warehouse.\n"
                   f"!! Set $GPUPOOL_AUDIT_TOKEN for anything but a local test.\n{rule}", err=True)
    _step(f"audit webhook on {scheme}://{host}:{port}/ writing to {wh.landing / 'k8s_audit'}")
    try:
        serve_audit_webhook(wh.landing, host, port, token, **options)
    except OSError as err:
        raise click.ClickException(f"cannot serve on {host}:{port}: {err} (pick another --port, or check the TLS files)") from None
    except KeyboardInterrupt:
        _step("stopped")


@main.command()
@HOME_OPTION
@click.option("--month", default=None, help="Month of data, YYYY-MM (default: the last month loaded).")
@click.option("--whatif-top", default=1, show_default=True,
              help="Test this many of the top recommendations with the what-if replay (0: none; ~2 min each).")
def recommend(home: Path | None, month: str | None, whatif_top: int) -> None:
    """Capacity recommendations for a month, from the metric views, with their evidence and confidence;
    the top ones replayed through the allocator with the change. Written to
    governance.capacity_recommendations and listed by metrics.capacity_recommendations (docs/capacity.md)."""
    from pipelines.capacity.run import recommend_month

    wh = _warehouse(home)
    if month is None:
        with wh.connect(read_only=True) as con:
            last = con.execute("select max(day) from metrics.pool_daily").fetchone()[0]
        if last is None:
            raise click.ClickException("no data in the warehouse: run `gpupool demo` or ingest a month first")
        first = last.replace(day=1)
    else:
        try:
            first = dt.datetime.strptime(month, "%Y-%m").date()
        except ValueError:
            raise click.ClickException(f"--month {month!r}: expected YYYY-MM, e.g. 2026-11") from None
    outcome = recommend_month(wh, first, whatif_top=whatif_top, on_step=_step)
    click.echo(click.style(f"\nCapacity recommendations for {first:%Y-%m} (rules {outcome.rules_version})", bold=True))
    if not outcome.recommendations:
        click.echo("  none: no rule found enough evidence this month (thresholds in models/capacity/rules.yml)")
    for rank, rec in enumerate(outcome.recommendations, start=1):
        click.echo(f"  {rank}. [{rec.kind}, {rec.confidence} confidence {rec.confidence_score:.2f}] {rec.recommendation}")
        if rec.whatif:
            w = rec.whatif
            key = next(k for k in w if k.startswith("wait_p95_") and k.endswith("_min") and k != "wait_p95_min")
            click.echo(f"     what-if ({w['change']}): {key.removeprefix('wait_p95_').removesuffix('_min')} wait p95 "
                       f"{w[key]['baseline']:,.0f} -> {w[key]['changed']:,.0f} min, pool utilisation "
                       f"{w['pool_utilisation_pct']['baseline']:.1f}% -> {w['pool_utilisation_pct']['changed']:.1f}%, "
                       f"{'confirms' if w['confirms'] else 'does not confirm'} the advice")
    click.echo("\nStored in governance.capacity_recommendations; "
               "`gpupool sql \"select * from metrics.capacity_recommendations\"`.")


@main.command("build")
@HOME_OPTION
@VERBOSE_OPTION
def build(home: Path | None, verbose: bool) -> None:
    """Rebuild staging, marts and the metrics views from what is loaded.

    Exit codes: 0 built; 1 a model failed (the message names it and carries DuckDB's error).
    """
    from pipelines import runner

    wh = _warehouse(home)
    with _step_errors(wh, verbose):
        runner.build_models(wh, on_step=_step)


@main.command("sources")
def sources() -> None:
    """List the ingest sources and the files each reads."""
    for src in SOURCES.values():
        click.echo(f"{src.name:<18} {', '.join(src.patterns):<28} {src.description}")


@main.command()
@HOME_OPTION
@click.option("--port", default=8501, show_default=True, help="Port to serve on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
def dashboard(home: Path | None, port: int, host: str) -> None:
    """Start the governance dashboards (Streamlit) on the warehouse of HOME, read-only (docs/dashboards.md).

    Users come from $GPUPOOL_DASHBOARD_USERS or Streamlit secrets; with none configured, a one-time
    operator user is made for this run and its password printed."""
    import json
    import os
    import secrets
    import subprocess

    from dashboards import auth
    from dashboards.auth import UsersError, configured_users, hash_password

    wh = _warehouse(home)
    if not wh.db_path.exists():
        click.echo(click.style(f"no warehouse at {wh.db_path} yet: the pages will say so until "
                               "`gpupool demo` (or an ingest) builds one", fg="yellow"))
    env = dict(os.environ, GPUPOOL_HOME=str(wh.home))
    try:
        users = configured_users()
    except UsersError as err:
        raise click.ClickException(f"{err} (docs/dashboards.md)") from None
    if not users:
        password = secrets.token_urlsafe(12)
        env["GPUPOOL_DASHBOARD_USERS"] = json.dumps(
            [{"name": "operator", "role": "operator", "password_hash": hash_password(password)}])
        _step(f"no dashboard users configured: sign in as `operator` with password {password} (this run only; "
              "configure users as docs/dashboards.md says)")
    app = Path(auth.__file__).resolve().parent / "app.py"
    command = [sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
               "--server.port", str(port), "--server.address", host, "--browser.gatherUsageStats", "false",
               "--client.toolbarMode", "minimal"]
    _step(f"dashboards on http://{host}:{port}/ reading {wh.db_path} (Ctrl-C stops)")
    try:
        code = subprocess.run(command, env=env, check=False).returncode
    except KeyboardInterrupt:
        code = 0
    if code:
        raise click.ClickException(f"streamlit exited with status {code}")


@main.command()
@click.option("--check", is_flag=True,
              help="Write nothing; exit non-zero with a diff summary when the committed files are stale.")
@click.option("--home", type=click.Path(path_type=Path), default=None,
              help="Take column types from this built warehouse (needs --out: the committed file is from the yml only).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the dictionary here instead of docs/data-dictionary.md.")
def dictionary(check: bool, home: Path | None, out: Path | None) -> None:
    """Generate the data dictionary (docs/data-dictionary.md) and the metrics views' column snapshot
    (models/metrics_schema.json) from the catalog, the models' sidecars and the contracts."""
    import json

    from pipelines import dictionary as dd

    outputs = dd.generate()
    current = json.loads(outputs.snapshot)
    committed = json.loads(dd.SNAPSHOT_PATH.read_text()) if dd.SNAPSHOT_PATH.exists() else {}
    problems = dd.snapshot_problems(committed, current)
    if check:
        stale = []
        if problems:
            stale.append("\n  ".join(problems))
        text = dd.DICTIONARY_PATH.read_text() if dd.DICTIONARY_PATH.exists() else ""
        if text != outputs.dictionary:
            stale.append(dd.diff_summary(text, outputs.dictionary, "docs/data-dictionary.md"))
        if stale:
            raise click.ClickException("\n".join(stale) + "\nRun `gpupool dictionary` and commit the result.")
        click.echo("docs/data-dictionary.md and models/metrics_schema.json are current "
                   f"(catalog {current['catalog_version']})")
        return
    if home is not None:
        if out is None:
            raise click.UsageError("--home needs --out: docs/data-dictionary.md is generated from the yml only")
        with _warehouse(home).analyst_connect() as con:
            text = dd.render(types=dd.warehouse_types(con))
        out.write_text(text)
        _step(f"wrote {out} (types from {_warehouse(home).db_path})")
        return
    if problems and committed.get("catalog_version") == current["catalog_version"]:
        raise click.ClickException("\n  ".join(problems))
    target = out or dd.DICTIONARY_PATH
    target.write_text(outputs.dictionary)
    _step(f"wrote {target}")
    if problems:
        dd.SNAPSHOT_PATH.write_text(outputs.snapshot)
        _step(f"wrote {dd.SNAPSHOT_PATH} (catalog {current['catalog_version']})")


@main.command("export")
@HOME_OPTION
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder to write to. Default: HOME/exports.")
@click.option("--views", default=None, help="Comma-separated metrics views (default: all).")
@click.option("--from", "first", default=None, help="First day (YYYY-MM-DD) of views with a day column.")
@click.option("--to", "last", default=None, help="Last day (YYYY-MM-DD, inclusive) of views with a day column.")
def export(home: Path | None, out: Path | None, views: str | None, first: str | None, last: str | None) -> None:
    """Export metrics views as Parquet: OUT/<view>/day=YYYY-MM-DD/part-0.parquet for views with a day
    column, OUT/<view>/part-0.parquet for the others; read-only, each view replaced atomically."""
    from pipelines.export import export_views

    wh = _warehouse(home)
    try:
        bounds = [dt.date.fromisoformat(d) if d else None for d in (first, last)]
    except ValueError as err:
        raise click.UsageError(f"--from/--to: {err}") from None
    target = out or wh.home / "exports"
    try:
        written = export_views(wh, target, [v.strip() for v in views.split(",") if v.strip()] if views else None,
                               *bounds)
    except (FileNotFoundError, ValueError, duckdb.Error) as err:
        raise click.ClickException(str(err)) from None
    for e in written:
        where = f"{e.path}/day=*/part-0.parquet ({e.days} days)" if e.days else f"{e.path}/part-0.parquet"
        click.echo(f"  metrics.{e.view:<28} {e.rows:>9,} rows  {where}")
    _step(f"wrote {len(written)} views under {target}; read them with "
          f"read_parquet('{target}/<view>/**/*.parquet', hive_partitioning = true)")


main.add_command(allocator_group)

if __name__ == "__main__":
    main()


@main.command()
@HOME_OPTION
@click.option("--month", required=True, help="Month of the pack, YYYY-MM.")
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True, help="Language of the pack.")
def pack(home: Path | None, month: str, lang: str) -> None:
    """The monthly review pack (HTML, PDF, PNG charts, CSV/Parquet appendix) from the metrics views,
    kept under <home>/packs/YYYY-MM/<version>/ and listed in <home>/packs/index.json (docs/pack.md)."""
    from pipelines.pack.build import build_pack

    try:
        first = dt.datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise click.BadParameter(f"{month!r}: expected YYYY-MM", param_hint="--month") from None
    wh = _warehouse(home)
    try:
        con = wh.analyst_connect()
    except FileNotFoundError as err:
        raise click.ClickException(str(err)) from None
    try:
        out = build_pack(con, home or default_home(), first, lang)
    finally:
        con.close()
    _step(f"review pack {month} ({lang}) in {out}")
    click.echo(f"  {out / 'pack.html'}\n  {out / 'pack.pdf'}")
