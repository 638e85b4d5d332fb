"""What every command shares: the --home and --verbose options, the exit codes and their error, the
step printer, the --date check, the days' progress bar, and turning a failed step into its one-line
cause."""
from __future__ import annotations

import datetime as dt
from contextlib import contextmanager
from pathlib import Path

import click

from pipelines.paths import default_home
from pipelines.warehouse import Warehouse

HOME_OPTION = click.option(
    "--home",
    type=click.Path(path_type=Path),
    default=None,
    help="gpupool home (warehouse, lake, landing). Default: $GPUPOOL_HOME or ./.gpupool",
)


def warehouse(home: Path | None) -> Warehouse:
    return Warehouse(home or default_home())


def step(message: str) -> None:
    click.echo(click.style("▸ ", fg="cyan") + message)


# Every command's exit codes (docs/operators.md, "Exit codes", kept true by tests/test_cli_exit_codes.py), for
# cron and CI. Every command may exit 0, 1 (a click.ClickException) and 2 (click's usage errors).
EXIT_OK = 0
EXIT_FAILED = 1  # a step failed: the message carries the cause (a failing model and DuckDB's words, ...)
EXIT_USAGE = 2  # bad arguments (click's own code): a malformed or out-of-range --date, an unknown source
EXIT_BLOCKED = 3  # the batch was loaded but failed its blocking data-quality check; models not rebuilt
EXIT_NOTHING_READ = 4  # no file the source reads: nothing was ingested
EXIT_SIGNAL_BASE = 128  # stopped by signal N (SIGTERM, SIGHUP, SIGINT) part way: 128 + N, as a shell reports it


class ExitError(click.ClickException):
    """A failure with its own exit code; click prints "Error: <message>" on stderr, no traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


VERBOSE_OPTION = click.option("--verbose", is_flag=True, help="On a failure, also print the full error with its traceback.")


def partition_day(day: str | None, param: str = "--date") -> dt.date:
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


MONTH_HELP = "Month, YYYY-MM (default: the latest month with data)."


def parse_month(month: str) -> dt.date:
    """The first day of --month, or a usage error saying the form."""
    try:
        return dt.datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise click.BadParameter(f"{month!r}: expected YYYY-MM, e.g. 2026-11", param_hint="--month") from None


def loaded_months(con) -> list[dt.date]:
    """The first days of the months metrics.pool_daily has a day of, in order: every command's
    --month defaults to the last of them (one rule for pack, recommend and whatif)."""
    rows = con.execute("select distinct date_trunc('month', day)::date from metrics.pool_daily order by 1").fetchall()
    return [row[0] for row in rows]


@contextmanager
def step_errors(wh: Warehouse, verbose: bool):
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


def print_outcomes(outcomes: list, name_assets: bool) -> None:
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


def rebuild_unless_blocked(wh: Warehouse, outcomes: list, no_build: bool, verbose: bool, blocked: str) -> None:
    """After an ingest: exit 3 with `blocked` (what failed and what to do) when a batch failed its
    blocking data-quality check, else rebuild the models unless --no-build."""
    from pipelines import runner

    if any(o.checks_failed for o in outcomes):
        raise ExitError(blocked, EXIT_BLOCKED)
    if not no_build:
        with step_errors(wh, verbose):
            runner.build_models(wh, on_step=step)



@contextmanager
def day_progress(verb: str, days: int):
    """A progress bar over simulated days (one line when the output is not a terminal)."""
    with click.progressbar(length=days, label=f"  {verb}", show_pos=True, width=30) as bar:
        yield lambda _done, _total, _day: bar.update(1)

