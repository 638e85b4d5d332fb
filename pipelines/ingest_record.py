"""What an ingest of a day records (ops.ingest_log) and reports (Warehouse.replace_partition and
append_partition, pipelines/ingest.py), and a day ready to commit (`DayCommit`)."""
from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import duckdb
import polars as pl

from pipelines.clock import utc_naive
from pipelines.contracts import INGEST_LOG_COLUMNS, LAKE_TABLES, contract
from pipelines.lake import LakeError


class IncrementStale(LakeError):
    """An intraday ingest's base is no longer the day's newest run: nothing was committed (ingest the day whole)."""


@dataclass(frozen=True)
class IngestTotals:
    """What ops.ingest_log records of a day: its files, records and rows, and the parsers' notes."""

    files_read: int
    records_read: int
    records_loaded: int
    records_quarantined: int
    rows_by_table: dict[str, int]
    notes: list[str]

    def report(self, ingest_source: str, partition_date: dt.date) -> IngestReport:
        return IngestReport(ingest_source=ingest_source, partition_date=partition_date, files_read=self.files_read,
                            records_read=self.records_read, records_loaded=self.records_loaded,
                            records_quarantined=self.records_quarantined, rows_by_table=dict(self.rows_by_table),
                            notes=list(self.notes))


@dataclass(frozen=True)
class IngestReport:
    ingest_source: str
    partition_date: dt.date
    files_read: int
    records_read: int
    records_loaded: int
    records_quarantined: int
    rows_by_table: dict[str, int]
    # what the parsers said about the input ("19 step rows ignored", "empty file"), each prefixed by its file
    notes: list[str] = field(default_factory=list)
    files_empty: int = 0  # empty files and well-formed answers without a record (ParseResult.empty_answer)
    # per table: the Great Expectations suite's outcome on the parsed batch (before quarantine)
    validation: dict[str, dict] = field(default_factory=dict)
    # sources whose records a tenant controls (IngestSource.tenant_field): tenant -> [read, quarantined];
    # the key None holds the quarantined records no tenant could be read from (pipelines/checks.py)
    tenants: dict[str | None, list[int]] = field(default_factory=dict)
    # how the intraday ingest (pipelines/ingest.py ingest_new_files) loaded the day; empty for a whole day's ingest
    how: str = ""

    def summary(self) -> str:
        return (
            f"{self.ingest_source} {self.partition_date}: {self.files_read} files, "
            f"{self.records_read} read, {self.records_loaded} loaded, {self.records_quarantined} quarantined"
            + (f" ({self.how})" if self.how else "")
        )


class WrittenRows(Protocol):
    """A lake table's rows already written for the commit (Warehouse.lake_rows_write)."""

    @property
    def rows(self) -> int: ...


@dataclass(frozen=True)
class DayCommit:
    """One ingest source's day, parsed and ready to commit: `Warehouse.replace_partition`'s arguments."""

    partition_date: dt.date
    tables: Mapping[str, pl.DataFrame | WrittenRows]
    quarantine: pl.DataFrame
    totals: IngestTotals
    started_at: dt.datetime
    state: dict | None = None
    # (the day's landing folder, the source's timed tables), for a source whose records go to their own
    # day: the commit replaces the rows of this folder's files and keeps those other days' files put on
    # the day (`from_other_days`), but for those of the run's earlier days. It leaves other days alone:
    # the rows an earlier ingest of the day moved there are replaced after it, a day at a time
    # (pipelines/ingest.py `_LoadedDay.finish`). None: the commit replaces the day's every row.
    landing: tuple[Path, Sequence[str]] | None = None
    # the first day of the run the day is part of (consecutive days, `ingest_days`): the records of its
    # earlier days' files on this day are carried into this commit, so it replaces their rows here too
    run_first: dt.date | None = None
    # filled by the commit: the other days that hold rows of the day's landing folder's files
    moved_to: set[dt.date] = field(default_factory=set)

    @classmethod
    def of(cls, partition_date: dt.date, tables: Mapping[str, pl.DataFrame | WrittenRows], quarantine: pl.DataFrame,
           files_read: int, records_read: int, records_loaded: int, records_quarantined: int | None = None,
           started_at: dt.datetime | None = None, notes: list[str] | None = None, state: dict | None = None,
           landing: tuple[Path, Sequence[str]] | None = None, run_first: dt.date | None = None) -> DayCommit:
        """The day with its totals counted: rows per table, and the quarantine's rows where
        `records_quarantined` is not given (a record may yield several quarantine rows)."""
        if records_quarantined is None:
            records_quarantined = quarantine.height
        rows_by_table = {name: frame.height if isinstance(frame, pl.DataFrame) else frame.rows
                         for name, frame in tables.items()}
        totals = IngestTotals(files_read, records_read, records_loaded, records_quarantined, rows_by_table, notes or [])
        return cls(partition_date, tables, quarantine, totals, started_at or utc_naive(), state, landing,
                   run_first)


def log_day(con: duckdb.DuckDBPyConnection, ingest_source: str, day: DayCommit) -> None:
    """The day's ops.ingest_log row (its totals, the run's id) and its ops.ingest_state (`day.state`:
    none deletes it), in the caller's transaction."""
    partition_date, totals = day.partition_date, day.totals
    run_id = uuid.uuid4().hex
    con.execute(
        f"insert into ops.ingest_log ({', '.join(INGEST_LOG_COLUMNS)}) "
        f"values ({', '.join('?' for _ in INGEST_LOG_COLUMNS)})",
        [
            run_id,
            ingest_source,
            partition_date,
            totals.files_read,
            totals.records_read,
            totals.records_loaded,
            totals.records_quarantined,
            json.dumps(totals.rows_by_table, sort_keys=True),
            day.started_at,
            utc_naive(),  # finished: after the lake's commit
            json.dumps(totals.notes) if totals.notes else None,
        ],
    )
    con.execute("delete from ops.ingest_state where ingest_source = ? and partition_date = ?",
                [ingest_source, partition_date])
    if day.state is not None:
        con.execute("insert into ops.ingest_state values (?, ?, ?, ?)",
                    [ingest_source, partition_date, run_id, json.dumps(day.state, sort_keys=True)])


def folder_range(folder: Path) -> tuple[str, str]:
    """The source_file values of the files under a landing folder: from `folder/` up to `folder0` ('0'
    follows '/')."""
    return f"{folder.as_posix()}/", f"{folder.as_posix()}0"


def replaced_range(folder: Path, run_first: dt.date | None = None) -> tuple[str, str]:
    """The source_file values a day's commit replaces: its landing folder's files, and with `run_first`
    those of the run's earlier days too (day folders are ISO dates, so theirs sort together)."""
    first = folder.parent / run_first.isoformat() if run_first is not None else folder
    return folder_range(first)[0], folder_range(folder)[1]


def from_other_days(folder: Path, run_first: dt.date | None = None) -> pl.Expr:
    """The rows of a day's partition that the files of the source's other days' landing folders put
    there (records timestamped on the day, carried or merged by those days' ingest), but for the run's
    earlier days' (`replaced_range`): a re-ingest of the day keeps them. A row from a path outside the
    source's landing (a home moved since) or without one is not such a row."""
    return from_folder(folder.parent) & ~_between(*replaced_range(folder, run_first))


def from_folder(folder: Path) -> pl.Expr:
    """The rows whose source_file is a file under `folder` (`folder_range`); none without a source_file."""
    return _between(*folder_range(folder))


def _between(low: str, high: str) -> pl.Expr:
    return ((pl.col("source_file") >= low) & (pl.col("source_file") < high)).fill_null(False)


# source_file in [?, ?): a folder's files (`folder_range`) in SQL
IN_RANGE_SQL = "source_file >= ? and source_file < ?"


def delete_day_rows(con: duckdb.DuckDBPyConnection, table: str, ingest_source: str, partition_date: dt.date,
                    folder: Path | None, run_first: dt.date | None = None) -> None:
    """Delete one source's day from a warehouse table: every row, or with `folder` (the day's landing
    folder) all but the rows other days' files put there (`from_other_days`)."""
    keep, params = "", []
    if folder is not None:
        keep = f"and not coalesce({IN_RANGE_SQL} and not ({IN_RANGE_SQL}), false)"
        params = [*folder_range(folder.parent), *replaced_range(folder, run_first)]
    con.execute(f"delete from {table} where partition_date = ? and ingest_source = ? {keep}",
                [partition_date, ingest_source, *params])


def moved_days(con: duckdb.DuckDBPyConnection, ingest_source: str, partition_date: dt.date, folder: Path,
               tables: Sequence[str]) -> set[dt.date]:
    """The other days of these warehouse tables that hold rows of `folder`'s files (put there by an
    earlier ingest of `partition_date`)."""
    days: set[dt.date] = set()
    for name in tables:
        if name in LAKE_TABLES:
            continue
        days.update(day for (day,) in con.execute(
            f"select distinct partition_date from {contract(name).table} where ingest_source = ? "
            f"and partition_date <> ? and {IN_RANGE_SQL}",
            [ingest_source, partition_date, *folder_range(folder)]).fetchall())
    return days
