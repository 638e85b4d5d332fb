"""`gpupool sql`: the SQL console. A query's result as a table that fits the terminal (pipelines/cli/render.py),
or as csv, json, parquet or markdown for a pipe or a file; with no query, an interactive prompt with history
(or the script on stdin when stdin is not a terminal). Every statement runs on the analysts' sandboxed
connection (pipelines/sandbox.py), within its time, memory and disk limits, fetching rows in batches."""
from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import click
import duckdb
import polars as pl

from allocator.filemodes import PRIVATE_MODE, create_file, set_mode
from pipelines.cli import render
from pipelines.cli.common import EXIT_SIGNAL_BASE, HOME_OPTION, ExitError, warehouse

if TYPE_CHECKING:
    import pyarrow as pa

    from pipelines.warehouse import Warehouse

# Rows `gpupool sql` prints in table and markdown formats unless --limit says otherwise; csv, json and parquet
# stream every row, STREAM_BATCH_ROWS at a time, so that neither the command nor DuckDB ever holds the whole result.
TABLE_ROWS = 200
STREAM_BATCH_ROWS = 50_000
FORMATS = ("table", "csv", "json", "parquet", "markdown")
SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".parquet": "parquet", ".pq": "parquet", ".md": "markdown",
                  ".markdown": "markdown", ".txt": "table"}
HISTORY_FILE = ".sql_history"  # in the home, 0600: the interactive prompt's history
HISTORY_LINES = 1000
QUIT = {".quit", ".exit", "\\q", "quit", "exit"}
TABLES_QUERY = ("select table_schema as schema, table_name as name, table_type as type from information_schema.tables "
                "where table_schema not in ('information_schema', 'pg_catalog') order by all")
HELP = """Statements end with ';' and may span lines. Only queries run (read-only: SELECT, WITH, FROM, DESCRIBE,
SHOW, SUMMARIZE, EXPLAIN).
  .tables        the schemas, tables and views
  .help          this text
  .quit, \\q      leave (or Ctrl-D); Ctrl-C cancels the statement being typed or run"""


@dataclass
class Reader:
    """The analysts' connection of one `gpupool sql` and the release it reads."""

    wh: Warehouse
    con: duckdb.DuckDBPyConnection
    release: int | None
    published: dt.datetime | None

    def about(self) -> str:
        if self.release is None:
            return "release unknown"
        return f"release {self.release}" + (f" (published {self.published:%Y-%m-%d %H:%M} UTC)" if self.published else "")


@click.command()
@click.argument("query", required=False)
@HOME_OPTION
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="table (fits the terminal, numbers by unit), csv, json (one array of objects), parquet, markdown. "
                   "Default: table when stdout is a terminal, csv when it is a pipe or a file; with --output, the "
                   "file's suffix (.csv, .json, .parquet, .md, .txt) decides.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the result to this file (replaced whole once the query succeeded) instead of stdout. "
                   "parquet needs it on a terminal; on a pipe parquet's bytes go to stdout.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help=f"Rows to fetch and print. Default: {TABLE_ROWS} in table and markdown formats, every row in "
                   "csv, json and parquet (streamed).")
def sql(query: str | None, home: Path | None, fmt: str | None, output: Path | None, limit: int | None) -> None:
    """Run a read-only SQL QUERY against the warehouse (DuckDB dialect); with no QUERY, an interactive
    prompt with history (HOME/.sql_history), or, when stdin is not a terminal, the script read from stdin.

    Only queries run (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN), on a connection that
    can read the warehouse and the lake its views read, and no other file (pipelines/sandbox.py).
    Of several statements, the last one's rows are printed (the prompt prints each one's).
    Rows are fetched as they are printed, never more than --limit; a query stops at
    GPUPOOL_SQL_TIMEOUT_S seconds, GPUPOOL_DUCKDB_MEMORY_LIMIT of memory and GPUPOOL_SQL_TEMP_LIMIT of
    temporary disk, with a message naming the limit. A table ends with the row count and the release read."""
    from pipelines import sandbox

    wh = warehouse(home)
    fmt = _format(fmt, output)
    interactive = query is None and sys.stdin.isatty()
    if interactive and output is not None:
        raise click.UsageError("--output goes with a QUERY (or a script on stdin), not with the prompt")
    if fmt == "parquet" and (interactive or (output is None and sys.stdout.isatty())):
        raise click.UsageError("parquet is binary: write it to a file with --output FILE, or pipe stdout")
    if query is None and not interactive:
        query = sys.stdin.read()
    try:
        timeout = sandbox.timeout_s()
        statements = [] if interactive else sandbox.check_read_only(query or "")
    except (sandbox.QueryRefused, ValueError) as err:
        raise click.ClickException(str(err)) from None
    except duckdb.Error as err:
        raise click.ClickException(f"query failed: {err}") from None
    signals = (signal.SIGTERM, signal.SIGHUP) if interactive else (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    with _exit_on_signals(signals) as received:  # from before the spill folder exists: a stop then removes it
        reader = _open(wh)
        try:
            _interrupt_on_signal(reader.con)
            _stop_if_received(received)  # a stop during the open may have become a DuckDB error that was let pass
            if interactive:
                _prompt(reader, fmt, limit, timeout, received, _history(wh.home))
            else:
                with _destination(output, fmt) as out:
                    _run_query(reader, query or "", statements, fmt, limit, timeout, received, out,
                               color=output is None and _terminal(fmt))
        finally:
            reader.con.close()


def _format(fmt: str | None, output: Path | None) -> str:
    """--format, else the output file's suffix, else table on a terminal and csv on a pipe."""
    if fmt is not None:
        return fmt
    if output is not None:
        found = SUFFIX_FORMATS.get(output.suffix.lower())
        if found is None:
            raise click.UsageError(f"--output {output}: say --format ({', '.join(FORMATS)}); the suffix "
                                   f"{output.suffix or '(none)'} names none")
        return found
    return "table" if sys.stdout.isatty() else "csv"


def _terminal(fmt: str) -> bool:
    return fmt == "table" and sys.stdout.isatty() and "NO_COLOR" not in os.environ


def _open(wh: Warehouse) -> Reader:
    """The analysts' connection, and the release it reads (recorded in the release file itself)."""
    from pipelines.lake.reader import RELEASE_TABLE

    try:
        con = wh.analyst_connect()
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        raise click.ClickException(str(err)) from None
    except duckdb.Error as err:
        raise click.ClickException(f"cannot open {wh.db_path}: {err}") from None
    try:
        rows = con.execute(f"select release_id, created_at from {RELEASE_TABLE}").fetchall()  # whole: the
        # connection stays usable
        release, published = (int(rows[0][0]), rows[0][1]) if rows else (wh.current_release(), None)
    except duckdb.Error:  # a file published before releases recorded themselves
        release, published = wh.current_release(), None
    return Reader(wh, con, release, published)


@contextmanager
def _destination(output: Path | None, fmt: str) -> Iterator[IO]:
    """stdout (its bytes for parquet), or a file beside --output renamed over it once everything is written."""
    if output is None:
        if fmt == "parquet":
            sys.stdout.flush()
            yield sys.stdout.buffer
        else:
            yield sys.stdout
        return
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb" if fmt == "parquet" else "w", encoding=None if fmt == "parquet" else "utf-8") as out:
            yield out
        os.replace(partial, output)
    except OSError as err:
        raise click.ClickException(f"cannot write {output}: {err}") from None
    finally:
        partial.unlink(missing_ok=True)


def _run_query(reader: Reader, query: str, statements: list[str], fmt: str, limit: int | None, timeout: float,
               received: list[int], out: IO, color: bool = False) -> None:
    """Run the statements on the analysts' connection, the last one's rows written to `out` in `fmt`: the
    first rows and a footer for table and markdown, every row streamed otherwise. Every failure becomes a
    message (click.ClickException; ExitError 128 + N when a signal stopped it)."""
    from pipelines import sandbox

    con = reader.con
    began = time.monotonic()
    try:
        with sandbox.guarded(con, timeout):
            for statement in statements[:-1]:
                con.execute(statement).abort()  # earlier queries start (their errors raise), unread: the last prints
            result = con.sql(statements[-1] if len(statements) > 1 else query)
            if fmt in ("table", "markdown"):
                rows = limit or TABLE_ROWS
                frame, more = _first_rows(result, rows)
            elif fmt == "parquet":
                _write_parquet(result, limit, out)
                return
            else:
                _stream(result, fmt, limit, out)
                return
    except BrokenPipeError:
        _quiet_stdout()  # the reader of the pipe had enough (`| head`): not an error
        return
    except Exception as err:  # noqa: BLE001 - every failure becomes a message, no traceback
        _stop_if_received(received)  # DuckDB reports the signal handler's exit as its own error
        raise _query_error(err, fmt) from None
    seconds = time.monotonic() - began
    try:
        if fmt == "markdown":
            out.write(render.markdown(frame) + "\n")
            if more:
                click.echo(f"(the first {rows:,} rows; --limit N prints more)", err=True)
            return
        shown = f"{frame.height:,} row{'' if frame.height == 1 else 's'}"
        footer = f"{'the first ' if more else ''}{shown} · {reader.about()} · {seconds:.2f} s"
        if more:
            footer = f"(--limit N prints more rows, --format csv streams them all)\n{footer}"
        text = render.table(frame, footer=footer, color=color,
                            hidden_hint="(a wider terminal shows more, e.g. COLUMNS=250; or select fewer columns, "
                                        "or --format csv)")
        click.echo(text, file=out, color=color)
    except BrokenPipeError:
        _quiet_stdout()


def _quiet_stdout() -> None:
    """After a closed pipe: stdout goes nowhere, so that Python's flush at exit does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # not a real file (a test's capture)
        pass


def _query_error(err: Exception, fmt: str) -> click.ClickException:
    """A failed query's error as a message (exit 1)."""
    from pipelines.sandbox import QueryLimitExceeded, QueryRefused

    if isinstance(err, click.ClickException):
        return err
    if isinstance(err, QueryLimitExceeded):
        return click.ClickException(f"query stopped: {err}")
    if isinstance(err, QueryRefused):
        return click.ClickException(str(err))
    if isinstance(err, duckdb.InterruptException) or (isinstance(err, RuntimeError) and "interrupted" in str(err).lower()):
        return click.ClickException("cancelled")  # Ctrl-C at the prompt (DuckDB's words vary by where it stopped)
    if isinstance(err, duckdb.PermissionException):
        return click.ClickException(f"query failed: {err} (`gpupool sql` opens no file but the warehouse and "
                                    "the lake its views read)")
    if isinstance(err, duckdb.Error):
        return click.ClickException(f"query failed: {err}")
    if isinstance(err, pl.exceptions.PolarsError):  # e.g. nested columns in CSV
        return click.ClickException(f"cannot write the result as {fmt}: {err} (try --format json)")
    # e.g. a DuckDB type Polars cannot hold: say so
    return click.ClickException(f"query failed: cannot show the result ({type(err).__name__}: {err})")


# -- fetching -----------------------------------------------------------------------------------------
def _batches(reader: pa.RecordBatchReader, limit: int | None) -> Iterator[pl.DataFrame]:
    """The reader's batches as frames, fetched one at a time, `limit` rows in all; a repeated column name gets a
    suffix (`job_id`, `job_id_1`), as DuckDB's own Polars output does."""
    for batch in _arrow_batches(reader, limit):
        yield pl.from_arrow(batch)  # type: ignore[misc]


def _arrow_batches(reader: pa.RecordBatchReader, limit: int | None) -> Iterator[pa.RecordBatch]:
    names = _unique(reader.schema.names)
    left = limit
    try:
        for batch in reader:
            if left is not None:
                batch = batch.slice(0, left)
                left -= batch.num_rows
            yield batch.rename_columns(names)
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
    return pl.from_arrow(reader.schema.empty_table().rename_columns(_unique(reader.schema.names)))  # type: ignore[return-value]


def _first_rows(result: duckdb.DuckDBPyRelation | None, rows: int) -> tuple[pl.DataFrame, bool]:
    """The first `rows` rows of the result (one more is fetched, to know whether there are more)."""
    reader = _reader(result, rows + 1)
    frames = list(_batches(reader, rows + 1))
    frame = pl.concat(frames, how="vertical_relaxed") if frames else _empty(reader)
    return frame.head(rows), frame.height > rows


def _stream(result: duckdb.DuckDBPyRelation | None, fmt: str, limit: int | None, out: IO) -> None:
    """Write the result to `out` as CSV or one JSON array of objects, batch by batch, `limit` rows at most."""
    reader = _reader(result, STREAM_BATCH_ROWS if limit is None else min(limit, STREAM_BATCH_ROWS))
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


def _write_parquet(result: duckdb.DuckDBPyRelation | None, limit: int | None, out: IO) -> None:
    """Write the result to `out` (binary) as one Parquet file, a row group per batch, `limit` rows at most."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reader = _reader(result, STREAM_BATCH_ROWS if limit is None else min(limit, STREAM_BATCH_ROWS))
    schema = pa.schema([field.with_name(name) for field, name in zip(reader.schema, _unique(reader.schema.names),
                                                                      strict=True)])
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        for batch in _arrow_batches(reader, limit):
            writer.write_batch(batch)


# -- the prompt ---------------------------------------------------------------------------------------
def _history(home: Path) -> Path:
    return home / HISTORY_FILE


def _prompt(reader: Reader, fmt: str, limit: int | None, timeout: float, received: list[int], history: Path) -> None:
    """The interactive prompt on a terminal: readline's line editing and history (kept in `history`, 0600)."""
    import readline

    if history.exists():
        try:
            readline.read_history_file(history)
        except OSError:
            pass
    readline.set_history_length(HISTORY_LINES)
    try:
        repl(reader, input, fmt, limit, timeout, received)
    finally:
        try:
            create_file(history, PRIVATE_MODE)
            readline.write_history_file(history)
            set_mode(history, PRIVATE_MODE)
        except OSError as err:
            click.echo(f"warning: history not kept: cannot write {history}: {err}", err=True)


def repl(reader: Reader, read_line: Callable[[str], str], fmt: str = "table", limit: int | None = None,
         timeout: float | None = None, received: list[int] | None = None) -> int:
    """Read statements with `read_line(prompt)` until EOF or .quit, run each one and print its rows; an error
    is printed and the session goes on. Returns the number of statements that failed."""
    from pipelines import sandbox

    timeout = sandbox.timeout_s() if timeout is None else timeout
    received = [] if received is None else received
    color = _terminal(fmt)
    click.echo(f"gpupool sql · {reader.about()} of {reader.wh.home} · read-only\n"
               "End statements with ';'. .help for help, .quit or Ctrl-D to leave.")
    failed = 0
    buffer: list[str] = []
    while True:
        try:
            line = read_line("gpupool> " if not buffer else "    ...> ")
        except EOFError:
            click.echo("")
            if "".join(buffer).strip():
                failed += _submit(reader, "\n".join(buffer), fmt, limit, timeout, received, color)
            return failed
        except KeyboardInterrupt:
            click.echo("^C")
            buffer = []
            continue
        command = line.strip()
        if not buffer and command.lower() in QUIT:
            return failed
        if not buffer and command in (".help", "\\?", "help"):
            click.echo(HELP)
            continue
        if not buffer and command == ".tables":
            failed += _submit(reader, TABLES_QUERY, fmt, limit, timeout, received, color)
            continue
        if not buffer and command.startswith(".") and " " not in command:
            click.echo(f"unknown command {command}; .help lists them", err=True)
            continue
        if not command and not buffer:
            continue
        buffer.append(line)
        if command.endswith(";"):
            failed += _submit(reader, "\n".join(buffer), fmt, limit, timeout, received, color)
            buffer = []


def _submit(reader: Reader, text: str, fmt: str, limit: int | None, timeout: float, received: list[int],
            color: bool) -> int:
    """Run each statement of `text`, printing its rows; 1 when one failed (its error printed), else 0."""
    from pipelines import sandbox

    try:
        statements = sandbox.check_read_only(text)
    except (sandbox.QueryRefused, duckdb.Error) as err:
        _error(str(err) if isinstance(err, sandbox.QueryRefused) else f"query failed: {err}", color)
        return 1
    for statement in statements:
        try:
            _run_query(reader, statement, [statement], fmt, limit, timeout, received, sys.stdout, color=color)
        except (KeyboardInterrupt, duckdb.InterruptException):
            _error("cancelled", color)
            return 1
        except ExitError:
            raise  # stopped by a signal: the session ends
        except click.ClickException as err:
            _error(err.format_message(), color)
            return 1
    return 0


def _error(message: str, color: bool) -> None:
    click.echo(click.style(f"Error: {message}", fg="red") if color else f"Error: {message}", err=True)


@dataclass
class _SignalState:
    """Process-wide, as signals are: the connection a signal interrupts, and whether the stop is under way."""

    con: duckdb.DuckDBPyConnection | None = None
    stopping: bool = False


_SIGNALS = _SignalState()


def _interrupt_on_signal(con: duckdb.DuckDBPyConnection) -> None:
    """Let a signal received inside `_exit_on_signals` interrupt `con`'s running query."""
    _SIGNALS.con = con


def _stop_if_received(received: list[int]) -> None:
    """Raise the exit of the first signal received, if any."""
    if received:
        _SIGNALS.stopping = True
        raise ExitError(f"stopped by {signal.Signals(received[0]).name}", EXIT_SIGNAL_BASE + received[0]) from None


@contextmanager
def _exit_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)) -> Iterator[list[int]]:
    """`signals` (SIGTERM, SIGHUP and SIGINT; the prompt keeps Ctrl-C to cancel a statement) end the command as
    an exit with status 128 + the signal, not a kill: DuckDB stops the query, and the sandbox's spill folder is
    removed at exit. Yields the signals received (DuckDB turns the handler's exception into its own error, which
    the caller then recognises as the stop).

    Python runs a handler only when the main thread is back in the interpreter, and DuckDB streaming a result
    (`to_arrow_reader`) never hands it back: a thread woken by the signal (`signal.set_wakeup_fd`) interrupts the
    connection `_interrupt_on_signal` named, so the query stops and the handler then runs."""
    received: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        received.append(signum)
        if not _SIGNALS.stopping:  # else the stop is already on its way out (the waker saw the signal first)
            raise SystemExit(EXIT_SIGNAL_BASE + signum)

    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    _SIGNALS.con, _SIGNALS.stopping = None, False
    saved = {sig: signal.signal(sig, stop) for sig in signals}
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    previous_fd = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)

    def wake() -> None:
        while data := os.read(wake_read, 64):  # b"" once the write end is closed (other signals are left
            # to their handlers: the prompt's Ctrl-C)
            stops = [signum for signum in data if signum in signals]
            received.extend(stops)  # before the interrupt: the query it stops is then known as stopped by it
            con = _SIGNALS.con
            if stops and con is not None:
                try:
                    con.interrupt()
                except duckdb.ConnectionException:
                    pass  # closed meanwhile: nothing runs on it

    waker = threading.Thread(target=wake, name="gpupool-sql-signals", daemon=True)
    waker.start()
    try:
        yield received
    except BaseException:  # SystemExit, or what DuckDB made of it (e.g. "Query interrupted" while it connects,
        # which the open reports as its own error): after a stop, whatever ends the block is the stop
        _stop_if_received(received)
        raise
    finally:
        signal.set_wakeup_fd(previous_fd)
        os.close(wake_write)
        waker.join()
        os.close(wake_read)
        _SIGNALS.con = None
        for sig, handler in saved.items():
            signal.signal(sig, handler)
