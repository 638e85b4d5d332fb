"""`gpupool sql`, `export` and `dictionary`: read the warehouse, export its views, document its columns."""
from __future__ import annotations

import datetime as dt
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
import duckdb
import polars as pl

from allocator.filemodes import make_dirs
from pipelines.cli.common import EXIT_SIGNAL_BASE, HOME_OPTION, ExitError, step, warehouse

if TYPE_CHECKING:
    import pyarrow as pa

    from pipelines.warehouse import Warehouse

# Rows `gpupool sql` prints in table format unless --limit says otherwise; csv and json stream every row,
# STREAM_BATCH_ROWS at a time, so that neither the command nor DuckDB ever holds the whole result.
TABLE_ROWS = 200
STREAM_BATCH_ROWS = 50_000


@click.command()
@click.argument("query")
@HOME_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help=f"Rows to fetch and print. Default: {TABLE_ROWS} in table format, every row in csv and json "
                   "(streamed).")
def sql(query: str, home: Path | None, fmt: str, limit: int | None) -> None:
    """Run a read-only SQL QUERY against the warehouse (DuckDB dialect).

    Only queries run (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN), on a connection that
    can read the warehouse and the lake its views read, and no other file (pipelines/sandbox.py).
    Rows are fetched as they are printed, never more than --limit; a query stops at
    GPUPOOL_SQL_TIMEOUT_S seconds, GPUPOOL_DUCKDB_MEMORY_LIMIT of memory and GPUPOOL_SQL_TEMP_LIMIT of
    temporary disk, with a message naming the limit."""
    from pipelines import sandbox

    wh = warehouse(home)
    try:
        statements = sandbox.check_read_only(query)
        timeout = sandbox.timeout_s()
    except (sandbox.QueryRefused, ValueError) as err:
        raise click.ClickException(str(err)) from None
    except duckdb.Error as err:
        raise click.ClickException(f"query failed: {err}") from None
    with _exit_on_signals() as received:  # from before the spill folder exists: a stop then removes it
        frame, more, rows = _run_query(wh, query, statements, fmt, limit, timeout, received)
    if fmt != "table":
        return
    with pl.Config(tbl_rows=rows, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
        click.echo(frame)
    if more:
        click.echo(f"(the first {rows:,} rows; --limit N fetches more, --format csv streams them all)")


def _run_query(wh: Warehouse, query: str, statements: list[str], fmt: str, limit: int | None, timeout: float,
               received: list[int]) -> tuple[pl.DataFrame | None, bool, int]:
    """Run the query on the analysts' connection: (the first rows, whether there are more, how many) in table
    format; the rows streamed to stdout otherwise. Every failure becomes a message."""
    from pipelines import sandbox

    try:
        con = wh.analyst_connect()
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        raise click.ClickException(str(err)) from None
    except duckdb.Error as err:
        raise click.ClickException(f"cannot open {wh.db_path}: {err}") from None
    frame, more, rows = None, False, limit or TABLE_ROWS
    try:
        with sandbox.guarded(con, timeout):
            for statement in statements[:-1]:
                con.execute(statement).abort()  # earlier queries start (their errors raise), unread: the last prints
            result = con.sql(statements[-1] if len(statements) > 1 else query)
            if fmt == "table":
                frame, more = _first_rows(result, rows)
            else:
                _stream(result, fmt, limit)
    except Exception as err:  # noqa: BLE001 - every failure becomes a message, no traceback
        if received:  # DuckDB reports the signal handler's exit as its own error
            raise ExitError(f"stopped by {signal.Signals(received[0]).name}", EXIT_SIGNAL_BASE + received[0]) from None
        raise _query_error(err, fmt) from None
    finally:
        con.close()
    return frame, more, rows


def _query_error(err: Exception, fmt: str) -> click.ClickException:
    """A failed query's error as a message (exit 1)."""
    from pipelines.sandbox import QueryLimitExceeded

    if isinstance(err, click.ClickException):
        return err
    if isinstance(err, QueryLimitExceeded):
        return click.ClickException(f"query stopped: {err}")
    if isinstance(err, duckdb.PermissionException):
        return click.ClickException(f"query failed: {err} (`gpupool sql` opens no file but the warehouse and "
                                    "the lake its views read)")
    if isinstance(err, duckdb.Error):
        return click.ClickException(f"query failed: {err}")
    if isinstance(err, pl.exceptions.PolarsError):  # e.g. nested columns in CSV
        return click.ClickException(f"cannot write the result as {fmt}: {err} (try --format json)")
    # e.g. a DuckDB type Polars cannot hold: say so
    return click.ClickException(f"query failed: cannot show the result ({type(err).__name__}: {err})")


def _batches(reader: pa.RecordBatchReader, limit: int | None) -> Iterator[pl.DataFrame]:
    """The reader's batches as frames, fetched one at a time, `limit` rows in all; a repeated column name gets a
    suffix (`job_id`, `job_id_1`), as DuckDB's own Polars output does."""
    names = _unique(reader.schema.names)
    left = limit
    try:
        for batch in reader:
            if left is not None:
                batch = batch.slice(0, left)
                left -= batch.num_rows
            yield pl.from_arrow(batch.rename_columns(names))
            if left is not None and left <= 0:
                return
    finally:
        reader.close()


def _unique(names: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for name in names:
        candidate, n = name, 0
        while candidate in seen:
            n += 1
            candidate = f"{name}_{n}"
        seen.add(candidate)
        out.append(candidate)
    return out


def _reader(result: duckdb.DuckDBPyRelation | None, rows_per_batch: int) -> pa.RecordBatchReader:
    """A streaming reader of the relation's rows (DuckDB runs the query as batches are read)."""
    if result is None:  # not a query: no rows
        import pyarrow as pa

        return pa.RecordBatchReader.from_batches(pa.schema([]), [])
    return result.to_arrow_reader(rows_per_batch)


def _empty(reader: pa.RecordBatchReader) -> pl.DataFrame:
    return pl.from_arrow(reader.schema.empty_table().rename_columns(_unique(reader.schema.names)))


def _first_rows(result: duckdb.DuckDBPyRelation | None, rows: int) -> tuple[pl.DataFrame, bool]:
    """The first `rows` rows of the result (one more is fetched, to know whether there are more)."""
    reader = _reader(result, rows + 1)
    frames = list(_batches(reader, rows + 1))
    frame = pl.concat(frames, how="vertical_relaxed") if frames else _empty(reader)
    return frame.head(rows), frame.height > rows


def _stream(result: duckdb.DuckDBPyRelation | None, fmt: str, limit: int | None) -> None:
    """Write the result to stdout as CSV or a JSON array, batch by batch, `limit` rows at most."""
    reader = _reader(result, STREAM_BATCH_ROWS if limit is None else min(limit, STREAM_BATCH_ROWS))
    out = sys.stdout
    first = True
    if fmt == "json":
        out.write("[")
    for frame in _batches(reader, limit):
        if fmt == "csv":
            out.write(frame.write_csv(include_header=first))
            first = False
        elif frame.height:
            out.write(("" if first else ",") + frame.write_json()[1:-1])
            first = False
    if fmt == "csv" and first:
        out.write(_empty(reader).write_csv())
    if fmt == "json":
        out.write("]\n")


@contextmanager
def _exit_on_signals() -> Iterator[list[int]]:
    """SIGTERM, SIGHUP and SIGINT end the command as an exit with status 128 + the signal, not a kill: DuckDB
    stops the query, and the sandbox's spill folder is removed at exit. Yields the signals received (DuckDB
    turns the handler's exception into its own error, which the caller then recognises as the stop)."""
    received: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        received.append(signum)
        raise SystemExit(EXIT_SIGNAL_BASE + signum)

    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    saved = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield received
    except SystemExit:
        if not received:
            raise
        raise ExitError(f"stopped by {signal.Signals(received[0]).name}", EXIT_SIGNAL_BASE + received[0]) from None
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@click.command()
@click.option("--check", is_flag=True,
              help="Write nothing; exit non-zero with a diff summary when the committed files are stale.")
@click.option("--in-tree", is_flag=True,
              help="In a source checkout: rewrite the committed files (docs/data-dictionary.md, "
                   "models/metrics/_catalog_docs.md, models/metrics_schema.json), to commit them.")
@click.option("--home", type=click.Path(path_type=Path), default=None,
              help="Write to HOME/docs/data-dictionary.md, with the column types of HOME's built warehouse.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the dictionary here. Default: HOME/docs/data-dictionary.md ($GPUPOOL_HOME or ./.gpupool).")
def dictionary(check: bool, in_tree: bool, home: Path | None, out: Path | None) -> None:
    """Generate the data dictionary from the catalog, the models' dbt properties and the contracts into
    the home (or --out), never into the installed package; fail where a metrics view's properties do not
    link the metrics the catalog places in it. --in-tree regenerates the committed files in a checkout:
    docs/data-dictionary.md, the metrics views' column snapshot (models/metrics_schema.json) and the
    catalog's dbt docs blocks (models/metrics/_catalog_docs.md)."""
    import json

    from pipelines import dictionary as dd
    from pipelines.catalog import CatalogError, catalog_link_problems, load_catalog, load_model_docs

    if in_tree and (check or home or out):
        raise click.UsageError("--in-tree rewrites the committed files: it takes none of --check, --home, --out")
    try:
        catalog = load_catalog()
        catalog_docs = dd.render_catalog_docs(catalog)
        if in_tree and (not dd.CATALOG_DOCS_PATH.exists() or dd.CATALOG_DOCS_PATH.read_text() != catalog_docs):
            dd.CATALOG_DOCS_PATH.write_text(catalog_docs)  # first: the properties' doc() refer to its blocks
            step(f"wrote {dd.CATALOG_DOCS_PATH}")
        outputs = dd.generate()
        links = catalog_link_problems(catalog, load_model_docs())
    except CatalogError as err:
        raise click.ClickException(str(err)) from None
    current = json.loads(outputs.snapshot)
    committed = json.loads(dd.SNAPSHOT_PATH.read_text()) if dd.SNAPSHOT_PATH.exists() else {}
    problems = dd.snapshot_problems(committed, current)
    linked = ("the metrics views' properties (models/metrics/_*.yml) do not match the catalog:\n  "
              + "\n  ".join(links)) if links else None
    if check:
        stale = [linked] if linked else []
        if problems:
            stale.append("\n  ".join(problems))
        for path, generated in ((dd.DICTIONARY_PATH, outputs.dictionary), (dd.CATALOG_DOCS_PATH, outputs.catalog_docs)):
            text = path.read_text() if path.exists() else ""
            if text != generated:
                stale.append(dd.diff_summary(text, generated, path.relative_to(dd.REPO_ROOT).as_posix()
                                             if path.is_relative_to(dd.REPO_ROOT) else str(path)))
        if stale:
            raise click.ClickException("\n".join(stale) + "\nRun `gpupool dictionary --in-tree` and commit the result.")
        click.echo("docs/data-dictionary.md, models/metrics/_catalog_docs.md and models/metrics_schema.json are "
                   f"current (catalog {current['catalog_version']})")
        return
    if in_tree:
        if problems and committed.get("catalog_version") == current["catalog_version"]:
            raise click.ClickException("\n  ".join(problems))
        dd.DICTIONARY_PATH.write_text(outputs.dictionary)
        step(f"wrote {dd.DICTIONARY_PATH}")
        if problems:
            dd.SNAPSHOT_PATH.write_text(outputs.snapshot)
            step(f"wrote {dd.SNAPSHOT_PATH} (catalog {current['catalog_version']})")
    else:
        wh = warehouse(home)
        target = out or wh.home / "docs" / "data-dictionary.md"
        text = outputs.dictionary
        if home is not None:
            with wh.analyst_connect() as con:
                text = dd.render(types=dd.warehouse_types(con))
        make_dirs(target.parent)
        target.write_text(text)
        step(f"wrote {target}" + (f" (types from {wh.db_path})" if home is not None else ""))
    if linked:
        raise click.ClickException(linked)


@click.command("export")
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

    wh = warehouse(home)
    try:
        bounds = [dt.date.fromisoformat(d) if d else None for d in (first, last)]
    except ValueError as err:
        raise click.UsageError(f"--from/--to: {err}") from None
    if None not in bounds and bounds[0] > bounds[1]:
        raise click.UsageError(f"--from {first} is after --to {last}")
    target = out or wh.home / "exports"
    try:
        written = export_views(wh, target, [v.strip() for v in views.split(",") if v.strip()] if views else None,
                               *bounds)
    except (FileNotFoundError, ValueError, duckdb.Error) as err:
        raise click.ClickException(str(err)) from None
    for e in written:
        where = f"{e.path}/day=*/part-0.parquet ({e.days} days)" if e.days else f"{e.path}/part-0.parquet"
        click.echo(f"  metrics.{e.view:<28} {e.rows:>9,} rows  {where}")
    step(f"wrote {len(written)} views under {target}; read them with "
          f"read_parquet('{target}/<view>/**/*.parquet', hive_partitioning = true)")
