"""`gpupool ingest`, `build` and `sources`: load files into the warehouse and rebuild its models."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from pipelines.cli.common import (
    EXIT_FAILED,
    EXIT_NOTHING_READ,
    HOME_OPTION,
    VERBOSE_OPTION,
    ExitError,
    partition_day,
    print_outcomes,
    rebuild_unless_blocked,
    step,
    step_errors,
    warehouse,
)
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse

ALL = "all"  # SOURCE for a whole landing zone, PATH/<source>/<YYYY-MM-DD>/


@click.command()
@click.argument("source", type=click.Choice([ALL, *sorted(SOURCES)]))
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@HOME_OPTION
@click.option("--date", "day", default=None,
              help="Partition day (UTC) for records without their own timestamp. Default: today. "
                   "Not with SOURCE all (the day folders say it).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
              help="Processes loading the days side by side under Dagster's multiprocess executor, each "
                   "a run of consecutive days for every source; 1 loads them in order in this process.")
@click.option("--no-build", is_flag=True, help="Do not rebuild the models afterwards.")
@VERBOSE_OPTION
def ingest(source: str, path: Path, home: Path | None, day: str | None, workers: int, no_build: bool,
           verbose: bool) -> None:
    """Load a file (or a folder of files) of SOURCE into the warehouse.

    The files are copied to the landing zone under the day's folder and the day's partition of
    SOURCE is re-ingested, replacing what was there. Records that carry their own time (samples,
    audit and allocator events) go to the partition of their own UTC day.

    SOURCE `all`: PATH is a landing zone, PATH/<source>/<YYYY-MM-DD>/<files> (what `gpupool simulate`
    writes; the home's own landing/ re-ingests what is landed). Every source and day in it is staged
    and ingested; with --workers N, N runs of days at a time.

    Exit codes: 0 done; 1 a step failed; 2 bad arguments; 3 the batch failed its blocking
    data-quality check (models not rebuilt); 4 no file the source reads (docs/operators.md).
    """
    from pipelines import runner
    from pipelines.ingest import NothingToRead, not_read, stage_files
    from pipelines.sources.registry import source as ingest_source

    wh = warehouse(home)
    if source == ALL:
        if day is not None:
            raise click.BadParameter("SOURCE all takes each day from its folder's name: drop --date",
                                     param_hint="--date")
        _ingest_landing(wh, path, workers, no_build, verbose)
        return
    partition = partition_day(day)
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
    step(f"staged {len(staged)} file(s) in {staged[0].parent}")
    with step_errors(wh, verbose):
        outcomes = runner.ingest_days(wh, [source], partition, partition, on_step=step, workers=workers)
    print_outcomes(outcomes, name_assets=False)
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
    rebuild_unless_blocked(
        wh, outcomes, no_build, verbose,
        f"the batch of {source} for {partition} failed its blocking data-quality check: models not rebuilt. "
        "Fix the input and ingest again, or run `gpupool build` to rebuild anyway (bad records stay in "
        "ops.quarantine).")


def _ingest_landing(wh: Warehouse, path: Path, workers: int, no_build: bool, verbose: bool) -> None:
    """SOURCE all: stage every day folder of every source under `path`, ingest first..last of them."""
    from pipelines import runner

    days_by_source = _stage_landing(wh, path)
    if not days_by_source:
        raise ExitError(f"{path}: no folder <source>/<YYYY-MM-DD>/ with a file its source reads "
                        f"(sources: {', '.join(sorted(SOURCES))}); nothing was ingested", EXIT_NOTHING_READ)
    days = sorted({d for found in days_by_source.values() for d in found})
    with step_errors(wh, verbose):
        outcomes = runner.ingest_days(wh, sorted(days_by_source), days[0], days[-1], on_step=step, workers=workers)
    print_outcomes(outcomes, name_assets=True)
    blocked = ", ".join(o.asset for o in outcomes if o.checks_failed)
    rebuild_unless_blocked(
        wh, outcomes, no_build, verbose,
        f"{blocked} failed the blocking data-quality check for some of {days[0]}..{days[-1]}: models not "
        "rebuilt. See ops.quarantine, fix the input and ingest again, or run `gpupool build` to rebuild anyway.")


def _stage_landing(wh: Warehouse, path: Path) -> dict[str, list[dt.date]]:
    """Copy PATH/<source>/<YYYY-MM-DD>/ into the home's landing zone (not when PATH is it); the days
    found per source. Folders that are not a source, not a day, or hold no file the source reads are
    named in a warning and skipped."""
    from pipelines.ingest import NothingToRead, stage_files

    own = path.resolve() == wh.landing.resolve()
    found: dict[str, list[dt.date]] = {}
    for folder in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name not in SOURCES:
            _warn(f"{folder}: not read: not a source ({', '.join(sorted(SOURCES))})")
            continue
        for day_folder in sorted(p for p in folder.iterdir() if p.is_dir()):
            try:
                day = partition_day(day_folder.name, str(day_folder))
            except click.BadParameter as err:
                _warn(f"{day_folder}: not read: {err.format_message()}")
                continue
            if own:
                if SOURCES[folder.name].files_in(day_folder):
                    found.setdefault(folder.name, []).append(day)
                continue
            try:
                stage_files(wh, folder.name, day_folder, day)
            except NothingToRead as err:
                _warn(f"{err}; not read")
                continue
            except OSError as err:
                raise ExitError(f"staging {day_folder} failed: {err}", EXIT_FAILED) from None
            found.setdefault(folder.name, []).append(day)
    for name, days in sorted(found.items()):
        step(f"{name}: {len(days)} day(s) {days[0]}..{days[-1]}" + ("" if own else f" staged in {wh.landing / name}"))
    return found


def _warn(message: str) -> None:
    click.echo(click.style(f"warning: {message}", fg="yellow"), err=True)


@click.command("build")
@HOME_OPTION
@click.option("--full-refresh", is_flag=True,
              help="Rebuild every model from scratch; by default the day-by-day marts rebuild only the days "
                   "ingested since the last build.")
@VERBOSE_OPTION
def build(home: Path | None, full_refresh: bool, verbose: bool) -> None:
    """Build the dbt project in models/ (seeds, staging, marts, metrics) from what is loaded, printing
    each model as it is built.

    Exit codes: 0 built; 1 a model or the catalog check failed (the message names the model and
    carries DuckDB's error; the warehouse is left as it was).
    """
    from pipelines import runner

    wh = warehouse(home)
    with step_errors(wh, verbose):
        runner.build_models(wh, full_refresh=full_refresh, on_step=step)


@click.command("sources")
def sources() -> None:
    """List the ingest sources and the files each reads."""
    from pipelines.cli import render

    click.echo(render.rows(["source", "reads", "what"],
                           [(src.name, ", ".join(src.patterns), src.description) for src in SOURCES.values()], wrap=True))
