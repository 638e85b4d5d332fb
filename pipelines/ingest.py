"""Ingest one (source, day): parse every landing file, validate, quarantine, replace the partition.

Pure of Dagster so the CLI, the assets and the tests share one code path.

Which day a record belongs to: a source's timestamped records (`IngestSource.time_columns`:
telemetry samples, audit and allocator events, governance decisions) go to the UTC day of their
own time; records without one (and sources that are snapshots: sacct, Kueue, squeue, the pool
snapshot) go to the day being ingested. Re-ingesting a day replaces what that day's landing files
loaded, on it and on other days, and keeps the rows other days' files put on it; a landing file's
records on another day are merged into that day's partition after the day's commit (the rows that
came from the same files are replaced: from every file of the folder, on a whole day's ingest), so
they never clobber what that day's own ingest loaded, and a failure in between leaves the rows they
replace. In a run over several days, records that fall on a later day of the run are carried to it
(its commit replaces the rows of the run's earlier days' files), and the run's days are committed
together (`ingest_days`). Quarantined records and ops.ingest_log stay with the day being ingested.

Empty files (no bytes, or only white space) are not parsed: they count as read with no record,
with the note "empty file", the same in every source. A well-formed answer that holds no record
(`ParseResult.empty_answer`: a header-only sacct, "Nothing found") counts as an empty file too.

`record_scrape_gaps` appends a scrape round's gaps to ops.scrape_gaps (the scraper lands samples
only; its callers record the gaps).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path

import polars as pl

from allocator.filemodes import READER_MODE, copy_file, make_dirs
from expectations.suites import rules
from expectations.validate import EXAMPLES_LIMIT, split_valid
from pipelines.clock import utc_naive
from pipelines.contracts import GAPS_SCHEMA, LAKE_TABLES, SCRAPE_GAPS_DDL, contract
from pipelines.ingest_record import DayCommit, IncrementStale, IngestReport, IngestTotals
from pipelines.lake.tables import AppendRefused
from pipelines.sources import dcgm_parquet
from pipelines.sources.base import ParseResult, empty_quarantine
from pipelines.sources.dcgm_parquet import UnreadableSlice
from pipelines.sources.registry import IngestSource, source
from pipelines.warehouse import LakeRowsWrite, Warehouse


def landing_folder(warehouse: Warehouse, source_name: str, day: dt.date) -> Path:
    return warehouse.landing / source_name / day.isoformat()


EMPTY_FILE_NOTE = "empty file"
_EMPTY_PROBE_BYTES = 1 << 16

# Frames of records carried to a later day of the same run: day -> table -> frames.
Carried = dict[dt.date, dict[str, list[pl.DataFrame]]]
# Records timestamped outside a run's days, left for the caller to merge once every run is done:
# (their day, table -> rows, the landing files they came from).
Spilled = list[tuple[dt.date, dict[str, pl.DataFrame], list[str]]]


def is_empty_file(path: Path) -> bool:
    """No bytes, or only white space (what a quiet exporter or an empty query leaves)."""
    size = path.stat().st_size
    return size == 0 or (size <= _EMPTY_PROBE_BYTES and not path.read_bytes().strip())


def ingest_days(
    warehouse: Warehouse,
    source_name: str,
    days: list[dt.date],
    validate: bool = True,
    on_file: Callable[[Path], None] | None = None,
    spilled: Spilled | None = None,
) -> list[IngestReport]:
    """Ingest several days of one source in order; records of a later day of the run are carried to it.
    With `spilled`, records timestamped outside first..last day of the run are appended there instead
    of merged into their day: runs of other days may be loading those days at the same time.

    The run's days are committed together, in one writer session (a Delta commit per day and lake table,
    then a transaction per day), once they are read: opening the writers' file was most of a small day's
    ingest. Days are held until the rows they hold in memory add up to SLICE_ROWS (a large cluster's
    sacct, say), then committed, so the memory stays a slice's; a lake table's rows are not held (they
    are written as Parquet files a slice at a time, and committed with their day)."""
    carried: Carried = {}
    ordered = sorted(days)
    if (ordered[-1] - ordered[0]).days != len(ordered) - 1:  # what is carried to a day must be committed with it
        raise ValueError(f"a run's days are consecutive, not {', '.join(map(str, ordered))}")
    run = {"carried": carried, "run_last": ordered[-1], "run_first": ordered[0], "spilled": spilled}
    reports: list[IngestReport] = []
    held: list[_LoadedDay] = []

    def commit_held() -> None:
        committed = warehouse.replace_partitions(source_name, [day.commit for day in held])
        reports.extend(day.finish(warehouse, source_name, report) for day, report in zip(held, committed, strict=True))
        held.clear()

    for day in ordered:
        held.append(_load_day(warehouse, source_name, day, validate, on_file, **run))
        if sum(loaded.rows for loaded in held) >= SLICE_ROWS:
            commit_held()
    if held:
        commit_held()
    return reports


def ingest_partition(
    warehouse: Warehouse,
    source_name: str,
    day: dt.date,
    validate: bool = True,
    on_file: Callable[[Path], None] | None = None,
    carried: Carried | None = None,
    run_last: dt.date | None = None,
    run_first: dt.date | None = None,
    spilled: Spilled | None = None,
    keep_state: bool = False,
    how: str = "",
) -> IngestReport:
    """Parse the day's landing files of one source and replace that source's partition (module doc).
    `keep_state`: record the files read (stamped before they are read) and the day's totals in
    ops.ingest_state for the next `ingest_new_files`; else the day's record there is deleted.

    Memory is bounded by SLICE_ROWS, not by the day: parsed records are validated and split by day
    a batch of at least SLICE_ROWS rows at a time (every file's records when the day is smaller),
    and the lake tables' rows are written as each batch's Parquet files, all committed at the end.
    Sources in SLICED read a large file a slice at a time too (`_take_slices`). With `carried`, the day is
    one of a run (`ingest_days`) of the days `run_first`..`run_last`."""
    loaded = _load_day(warehouse, source_name, day, validate, on_file, carried, run_last, run_first, spilled,
                       keep_state)
    [report] = warehouse.replace_partitions(source_name, [loaded.commit])
    return loaded.finish(warehouse, source_name, report, how)


@dataclasses.dataclass
class _LoadedDay:
    """A day read and ready to commit (`commit`), and what follows its commit: the records of its files
    timestamped on days outside the run, merged into those days (`finish`)."""

    commit: DayCommit
    load: _DayLoad
    files: list[Path]
    merges: list[tuple[dt.date, dict[str, pl.DataFrame]]]
    # the days not to touch after the commit: the run's later days, up to this (they replace those rows in
    # their own commits), and the days its spilled records go to (the caller merges them)
    run_last: dt.date | None = None
    spilled_to: set[dt.date] = dataclasses.field(default_factory=set)

    @property
    def rows(self) -> int:
        """The rows held in memory for the commit: its warehouse tables', its quarantine's and those to merge
        into other days (a lake table's are written already)."""
        held = [frame for frame in self.commit.tables.values() if isinstance(frame, pl.DataFrame)]
        held += [frame for _, tables in self.merges for frame in tables.values()]
        return sum(frame.height for frame in held) + self.commit.quarantine.height

    def finish(self, warehouse: Warehouse, source_name: str, report: IngestReport, how: str = "") -> IngestReport:
        """After the day's commit: on each other day its files' records go to or an earlier ingest put
        them on, those rows become the new ones (none: they go), a day at a time. A run killed before
        leaves those days with the rows they had: re-run the day."""
        merges, day, landing = dict(self.merges), self.commit.partition_date, self.commit.landing
        for other in sorted({*merges, *self.commit.moved_to} - self.spilled_to):
            if self.run_last is not None and day < other <= self.run_last:
                continue
            tables = _every_table(self.load.src.tables, merges.get(other, {}))  # none left: their rows go
            warehouse.merge_files(source_name, other, tables, [str(f) for f in self.files],
                                  folder=landing[0] if landing is not None else None)
        return dataclasses.replace(report, validation=self.load.outcomes(), files_empty=self.load.files_empty,
                                   tenants=self.load.tenants, how=how)


def _load_day(
    warehouse: Warehouse,
    source_name: str,
    day: dt.date,
    validate: bool,
    on_file: Callable[[Path], None] | None,
    carried: Carried | None,
    run_last: dt.date | None,
    run_first: dt.date | None,
    spilled: Spilled | None,
    keep_state: bool = False,
) -> _LoadedDay:
    """Read the day's landing files: its own rows (and those carried to it from the run's earlier days),
    its lake rows written; carried and spilled records handed on; nothing committed, nothing written on
    other days."""
    src = source(source_name)
    started_at = utc_naive()
    folder = landing_folder(warehouse, source_name, day)
    files = src.files_in(folder)
    stamps = _stamps(files) if keep_state else None
    load = _DayLoad(src, day, validate, {t: warehouse.lake_rows_write(t, day, source_name)
                                         for t in src.tables if t in LAKE_TABLES})
    _read_files(load, src, files, on_file)
    quarantine = pl.concat(load.quarantines, how="vertical")
    spilled_to: set[dt.date] = set()
    carried = {} if carried is None else carried
    for table, frames in carried.pop(day, {}).items():
        load.keep(table, frames)
    notes = load.notes
    merges: list[tuple[dt.date, dict[str, pl.DataFrame]]] = []
    for other, other_tables in sorted(load.elsewhere().items()):
        rows = other_tables[src.tables[0]].height  # the first table is 1:1 with the records
        if run_last is not None and day < other <= run_last:
            for table, frame in other_tables.items():
                carried.setdefault(other, {}).setdefault(table, []).append(frame)
        elif spilled is not None and run_first is not None and run_last is not None \
                and not run_first <= other <= run_last:
            spilled.append((other, other_tables, [str(f) for f in files]))
            spilled_to.add(other)
        else:
            merges.append((other, other_tables))
        notes.append(f"{rows:,} record(s) timestamped {other} went to that day's partition")
    tenants = {tenant: list(counts) for tenant, counts in load.tenants.items()}
    state = _DayState(stamps, len(files), load.records_read, load.records_loaded - load.validate_rejected,
                      load.parse_quarantined + load.validate_rejected, load.rows_by_table(), notes, load.files_empty,
                      load.outcomes(), tenants) if stamps is not None else None
    commit = DayCommit.of(
        day, load.tables(), quarantine, files_read=len(files), records_read=load.records_read,
        records_loaded=load.records_loaded - load.validate_rejected,
        records_quarantined=load.parse_quarantined + load.validate_rejected, started_at=started_at,
        notes=notes + _tenant_notes(tenants), state=state.to_json() if state is not None else None,
        # other days' files' rows on this day stay; what an earlier ingest of it moved away is replaced after
        landing=(folder, list(src.time_columns)) if src.time_columns else None,
        run_first=run_first,
    )
    return _LoadedDay(commit, load, files, merges, run_last, spilled_to)


def _read_files(load: _DayLoad, src: IngestSource, files: list[Path], on_file: Callable[[Path], None] | None) -> None:
    """Take every file's records into `load`, then its last batch."""
    for path in files:
        if on_file:
            on_file(path)
        if is_empty_file(path):
            load.files_empty += 1
            load.notes.append(f"{path.name}: {EMPTY_FILE_NOTE}")
            continue
        slices = SLICED.get(src.name)
        if slices is None:
            load.take(path, src.parse_file(path))
        else:
            _take_slices(load, src, path, slices(path))
    load.flush(final=True)


def _tenant_notes(tenants: dict[str | None, list[int]]) -> list[str]:
    return [f"tenant {tenant if tenant is not None else '(unknown)'}: {quarantined:,} of {read:,} record(s) quarantined"
            for tenant, (read, quarantined) in sorted(tenants.items(), key=lambda t: str(t[0])) if quarantined]


def _stamps(files: list[Path]) -> dict[str, list[int]]:
    """Each file's name -> [bytes, modification time in ns]: a file that changes changes its stamp."""
    stamps = {}
    for path in files:
        stat = path.stat()
        stamps[path.name] = [stat.st_size, stat.st_mtime_ns]
    return stamps


@dataclasses.dataclass(frozen=True)
class _DayState:
    """What the intraday ingest has loaded of a day (ops.ingest_state): the files read, by stamp, and the
    day's totals, outcomes and tenants, so that the next run adds only newer files and still reports the day."""

    files: dict[str, list[int]]
    files_read: int
    records_read: int
    records_loaded: int
    records_quarantined: int
    rows_by_table: dict[str, int]
    notes: list[str]  # the files' and the days' notes (the tenants' are made from `tenants`)
    files_empty: int
    validation: dict[str, dict]
    tenants: dict[str | None, list[int]]
    # per lake table, the rows other days' files had put on the day, kept by its last whole ingest
    # (Warehouse._commit_ingest records them): the lake holds these beside rows_by_table
    rows_of_other_days: dict[str, int] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        fields = dataclasses.asdict(self)
        fields["tenants"] = [[tenant, *counts] for tenant, counts in self.tenants.items()]  # a key may be None
        return fields

    @classmethod
    def from_json(cls, fields: dict) -> _DayState:
        tenants = {tenant: [read, quarantined] for tenant, read, quarantined in fields["tenants"]}
        return cls(**{**fields, "tenants": tenants})

    def report(self, source_name: str, day: dt.date, how: str) -> IngestReport:
        return dataclasses.replace(
            self.totals().report(source_name, day), validation=self.validation, files_empty=self.files_empty,
            tenants={tenant: list(counts) for tenant, counts in self.tenants.items()}, how=how)

    def totals(self) -> IngestTotals:
        return IngestTotals(self.files_read, self.records_read, self.records_loaded, self.records_quarantined,
                            self.rows_by_table, self.notes + _tenant_notes(self.tenants))


def ingest_new_files(
    warehouse: Warehouse,
    source_name: str,
    day: dt.date,
    validate: bool = True,
    on_file: Callable[[Path], None] | None = None,
) -> IngestReport:
    """The intraday ingest of a day: for a source whose files `appends` (the telemetry), read only the files
    landed since the day's last intraday run and add their rows to the day, so a run costs what landed since,
    not the day so far. The day then holds what `ingest_partition` of all its files would load, and the
    report (ops.ingest_log's newest row) gives the whole day's totals.

    The day is ingested whole instead (`ingest_partition`, which records the files for the next run) when
    the source does not append, when no intraday run recorded the day (ops.ingest_state: a whole day's
    ingest deletes it), when a file read before changed or went, when the lake holds other rows for the day
    than the record says (a run killed between the lake's commit and the warehouse's), or when another
    ingest of the day committed meanwhile. The report's `how` says which."""
    src = source(source_name)
    files = src.files_in(landing_folder(warehouse, source_name, day))
    stamps = _stamps(files) if src.appends else None
    base = warehouse.ingest_state(source_name, day) if src.appends else None
    state = _DayState.from_json(base[1]) if base is not None else None
    why = _why_whole(warehouse, src, day, state, stamps)
    if why:
        return ingest_partition(warehouse, source_name, day, validate, on_file, keep_state=src.appends,
                                how=f"whole day: {why}")
    assert base is not None and state is not None and stamps is not None
    run_id = base[0]
    new = [path for path in files if path.name not in state.files]
    if not new:
        return state.report(source_name, day, "no new file")
    started_at = utc_naive()
    load = _DayLoad(src, day, validate, {t: warehouse.lake_rows_write(t, day, source_name, append=True)
                                         for t in src.tables if t in LAKE_TABLES})
    _read_files(load, src, new, on_file)
    notes = list(load.notes)
    for other, other_tables in sorted(load.elsewhere().items()):
        warehouse.merge_files(source_name, other, other_tables, [str(f) for f in new])
        notes.append(f"{other_tables[src.tables[0]].height:,} record(s) timestamped {other} went to that day's "
                     "partition")
    outcomes = load.outcomes()
    tenants = {tenant: list(counts) for tenant, counts in state.tenants.items()}
    for tenant, (read, quarantined) in load.tenants.items():
        counts = tenants.setdefault(tenant, [0, 0])
        counts[0], counts[1] = counts[0] + read, counts[1] + quarantined
    rows = load.rows_by_table()
    after = _DayState(
        files={**state.files, **{path.name: stamps[path.name] for path in new}},
        files_read=state.files_read + len(new),
        records_read=state.records_read + load.records_read,
        records_loaded=state.records_loaded + load.records_loaded - load.validate_rejected,
        records_quarantined=state.records_quarantined + load.parse_quarantined + load.validate_rejected,
        rows_by_table={t: state.rows_by_table.get(t, 0) + rows.get(t, 0) for t in {*state.rows_by_table, *rows}},
        notes=state.notes + notes,
        files_empty=state.files_empty + load.files_empty,
        validation={t: _merge_outcomes(t, [state.validation[t], outcomes[t]]) if t in state.validation and t in outcomes
                    else outcomes.get(t, state.validation.get(t)) for t in {*state.validation, *outcomes}},
        tenants=tenants,
        rows_of_other_days=state.rows_of_other_days,
    )
    try:
        warehouse.append_partition(source_name, day, load.tables(), pl.concat(load.quarantines, how="vertical"),
                                   after.totals(), started_at, after.to_json(), after_run=run_id)
    except (IncrementStale, AppendRefused) as refused:
        return ingest_partition(warehouse, source_name, day, validate, on_file, keep_state=True,
                                how=f"whole day: {refused}")
    return after.report(source_name, day, f"{len(new):,} new file(s) added")


def _why_whole(warehouse: Warehouse, src: IngestSource, day: dt.date, state: _DayState | None,
               stamps: dict[str, list[int]] | None) -> str | None:
    """Why the intraday ingest must read the day whole (ingest_new_files), or None: it may add the new files."""
    if not src.appends or stamps is None:
        return "the source's files are not each their own records"
    if state is None:
        return "no intraday run recorded the day"
    changed = sorted(name for name, stamp in state.files.items() if stamps.get(name) != stamp)
    if changed:
        return f"{len(changed):,} file(s) read before changed or went ({changed[0]}...)"
    for table in src.tables:
        if table in LAKE_TABLES:
            held = warehouse.lake_partition_rows(table, day, src.name)
            recorded = state.rows_by_table.get(table, 0) + state.rows_of_other_days.get(table, 0)
            if held != recorded:
                return f"the lake holds {held} row(s) of {table} for the day, the record {recorded}"
    return None


# Rows validated and split by day at a time (and, for lake tables, written as one Parquet file): a day
# of small files is still validated in one go, a large day in batches (about 50 MB of samples each,
# twice that while GX validates its pandas copy).
SLICE_ROWS = dcgm_parquet.SLICE_ROWS
# Sources whose large files are read a slice at a time (the same records as their parse_file).
SLICED: dict[str, Callable[[Path], Iterator[ParseResult]]] = {
    dcgm_parquet.SOURCE: dcgm_parquet.parse_dcgm_parquet_slices,
}


def _take_slices(load: _DayLoad, src: IngestSource, path: Path, slices: Iterator[ParseResult]) -> None:
    """A SLICED file's records: a file smaller than SLICE_ROWS is read whole before any of it is taken, so it
    joins the batch under way (a day of scrape rounds is validated a batch at a time, not a round at a time);
    a larger one is taken a slice at a time in batches of its own. A file that turns out unreadable part way
    is parsed whole instead (its records quarantined with the reason), nothing of its slices kept."""
    read, rows = [], 0
    try:
        for result in slices:
            read.append(result)
            rows += result.records_read
            if rows >= SLICE_ROWS:
                break
        else:
            for result in read:
                load.take(path, result)
            return
    except UnreadableSlice:
        load.take(path, src.parse_file(path))
        return
    load.flush()  # a large file: its slices are dropped by rolling back to here
    mark = load.mark()
    try:
        for result in itertools.chain(read, slices):
            load.take(path, result)
    except UnreadableSlice:
        load.rollback(mark)
        load.take(path, src.parse_file(path))


class _DayLoad:
    """What one day's ingest has taken so far: counts, quarantine and notes, the parsed batch not yet
    validated, the rows kept for the day (lake tables: written as they come), and those of other days."""

    def __init__(self, src: IngestSource, day: dt.date, validate: bool, lake: dict[str, LakeRowsWrite]) -> None:
        self.src, self.day, self.validate, self.lake = src, day, validate, lake
        self.records_read = self.records_loaded = self.parse_quarantined = self.validate_rejected = 0
        self.files_empty = 0
        self.quarantines = [empty_quarantine()]
        self.notes: list[str] = []
        self.pending: list[dict[str, pl.DataFrame]] = []
        self.pending_rows = 0
        self.here: dict[str, list[pl.DataFrame]] = {t: [] for t in src.tables if t not in lake}
        self.away: list[tuple[dt.date, str, pl.DataFrame]] = []
        self.validated: list[dict[str, dict]] = []  # each batch's outcomes per table
        self.batches = 0
        self.tenants: dict[str | None, list[int]] = {}  # src.tenant_field: tenant -> [read, quarantined]

    def take(self, path: Path, result: ParseResult) -> None:
        """A parse result of `path` (a file, or a slice of one): counted now, validated with its batch."""
        self.files_empty += int(result.empty_answer)  # a well-formed answer without a record counts as an empty file
        self.records_read += result.records_read
        self.records_loaded += result.records_loaded
        self.parse_quarantined += result.quarantine.height
        self.quarantines.append(result.quarantine)
        if self.src.tenant_field:
            first = result.tables.get(self.src.tables[0])
            if first is not None and self.src.tenant_field in first.columns:
                self._count_tenants(first[self.src.tenant_field], quarantined=False)
            self._count_tenants(_tenants_of(result.quarantine, self.src.tenant_field), quarantined=True, read=True)
        self.notes.extend(f"{path.name}: {note}" for note in result.notes)
        self.pending.append({table: _with_own_day(self.src, table, frame, result.untimed.get(table))
                             for table, frame in result.tables.items() if table in self.src.tables})
        self.pending_rows += sum(frame.height for frame in result.tables.values())
        if self.pending_rows >= SLICE_ROWS:
            self.flush()

    def flush(self, final: bool = False) -> None:
        """Validate the pending batch, split it by day and keep or write its rows. The final flush of a
        day with nothing pending still runs once when no batch did (the tables' empty outcomes)."""
        if not self.pending and (not final or self.batches):
            return
        tables = {
            t: pl.concat(frames, how="vertical") if (frames := [p[t] for p in self.pending if t in p])
            else _with_own_day(self.src, t, contract(t).empty_frame(), None)
            for t in self.src.tables
        }
        self.pending, self.pending_rows = [], 0
        self.batches += 1
        if self.validate:
            tables, rejected, rejected_records, outcomes = _validate(self.src, tables)
            self.quarantines.append(rejected)
            if self.src.tenant_field:  # rows already counted as read when parsed
                self._count_tenants(_tenants_of(rejected, self.src.tenant_field), quarantined=True, read=False)
            self.validate_rejected += rejected_records
            self.validated.append(outcomes)
        here, elsewhere = _split_by_day(self.src, tables, self.day)
        del tables
        for table, frame in here.items():
            self.keep(table, [frame])
        self.away.extend((other, table, frame) for other, frames in elsewhere.items() for table, frame in frames.items())

    def _count_tenants(self, tenants: pl.Series, *, quarantined: bool, read: bool = True) -> None:
        for tenant, count in tenants.value_counts().iter_rows():
            counts = self.tenants.setdefault(tenant, [0, 0])
            counts[0] += count if read else 0
            counts[1] += count if quarantined else 0

    def keep(self, table: str, frames: list[pl.DataFrame]) -> None:
        """Rows of the day: a lake table's are written now, the others' kept for the commit."""
        for frame in frames:
            if table in self.lake:
                self.lake[table].add(frame)
            else:
                self.here[table].append(frame)

    def mark(self) -> tuple:
        """A point to `rollback` to (after a flush: nothing pending)."""
        return (self.records_read, self.records_loaded, self.parse_quarantined, self.validate_rejected,
                len(self.quarantines), len(self.notes), {t: len(f) for t, f in self.here.items()}, len(self.away),
                len(self.validated), self.batches, {t: w.write.mark() for t, w in self.lake.items()})

    def rollback(self, mark: tuple) -> None:
        """Forget everything taken after `mark` (the slices of a file that turned out unreadable)."""
        (self.records_read, self.records_loaded, self.parse_quarantined, self.validate_rejected, quarantines,
         notes, here, away, validated, self.batches, lake) = mark
        del self.quarantines[quarantines:], self.notes[notes:], self.away[away:], self.validated[validated:]
        for table, count in here.items():
            del self.here[table][count:]
        for table, written in lake.items():
            self.lake[table].write.rollback(written)
        self.pending, self.pending_rows = [], 0

    def rows_by_table(self) -> dict[str, int]:
        return {t: self.lake[t].rows if t in self.lake else sum(f.height for f in self.here[t]) for t in self.src.tables}

    def tables(self) -> dict[str, pl.DataFrame | LakeRowsWrite]:
        return {t: self.lake[t] if t in self.lake else pl.concat(self.here[t], how="vertical")
                for t in self.src.tables}

    def elsewhere(self) -> dict[dt.date, dict[str, pl.DataFrame]]:
        """The rows of other days, every table of the source for each (so each is merged per file)."""
        days = sorted({other for other, _, _ in self.away})
        return {other: {t: pl.concat([f for d, table, f in self.away if d == other and table == t], how="vertical")
                        for t in self.src.tables}
                for other in days}

    def outcomes(self) -> dict[str, dict]:
        """Each table's validation outcome over the day, as one validation of all its rows would say."""
        if not self.validated:
            return {}
        return {t: _merge_outcomes(t, [batch[t] for batch in self.validated]) for t in self.validated[0]}


def _tenant_in(raw: str | None, field: str) -> str | None:
    """The tenant named in a quarantined record's raw text (a JSON object), else None."""
    try:
        value = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        return None
    tenant = value.get(field) if isinstance(value, dict) else None
    return str(tenant) if isinstance(tenant, str | int) and not isinstance(tenant, bool) else None


def _tenants_of(quarantine: pl.DataFrame, field: str) -> pl.Series:
    """The tenant of each quarantined record (one per record: a record's several validation failures
    share its file and line)."""
    located = quarantine.filter(pl.col("line_number").is_not_null()).unique(
        ["source_file", "line_number"], keep="first", maintain_order=True)
    records = pl.concat([located, quarantine.filter(pl.col("line_number").is_null())], how="vertical")
    return pl.Series("tenant", [_tenant_in(raw, field) for raw in records["raw"].to_list()], dtype=pl.String)


def _merge_outcomes(table: str, batches: list[dict]) -> dict:
    """One SuiteOutcome.to_metadata over consecutive batches of a table's rows: counts add up, first rows
    are positions in all the rows, examples the first distinct ones, failures in the suite's order."""
    if len(batches) == 1:
        return batches[0]

    failed: dict[tuple, dict] = {}
    offset = 0
    for batch in batches:
        for f in batch["failed"]:
            key = (f["expectation"], f["column"], f["reason"])
            merged = failed.setdefault(key, {**f, "unexpected_count": 0, "examples": [], "first_rows": []})
            merged["unexpected_count"] += f["unexpected_count"]
            for value in f["examples"]:
                if value not in merged["examples"] and len(merged["examples"]) < EXAMPLES_LIMIT:
                    merged["examples"].append(value)
            merged["first_rows"] = (merged["first_rows"] + [offset + r for r in f["first_rows"]])[:EXAMPLES_LIMIT]
        offset += batch["rows"]
    order = _suite_order(table)
    return {
        "table": batches[0]["table"],
        "success": all(b["success"] for b in batches),
        "rows": offset,
        "evaluated_expectations": max(b["evaluated_expectations"] for b in batches),
        "unexpected_count": sum(b["unexpected_count"] for b in batches),
        "failed": sorted(failed.values(), key=lambda f: order.get((f["expectation"], f["column"], f["reason"]),
                                                                  len(order))),
    }


@cache
def _suite_order(table: str) -> dict[tuple, int]:
    """(expectation, column, reason) -> position in the table's suite (the order failures are listed in)."""
    return {(rule.kind, rule.column, rule.reason): i for i, rule in enumerate(rules(table))}


OWN_DAY = "_own_day"  # bookkeeping column (dropped before writing): the UTC day of the record's own time


def _with_own_day(src: IngestSource, table: str, frame: pl.DataFrame, untimed: pl.Series | None) -> pl.DataFrame:
    """Add OWN_DAY to a table the source times (null where the record has no time of its own)."""
    column = src.time_columns.get(table)
    if column is None:
        return frame
    own = pl.col(column).dt.date()
    if untimed is not None and untimed.len() == frame.height:
        own = pl.when(untimed).then(None).otherwise(own)
    return frame.with_columns(own.cast(pl.Date).alias(OWN_DAY))


def _split_by_day(
    src: IngestSource, tables: dict[str, pl.DataFrame], day: dt.date
) -> tuple[dict[str, pl.DataFrame], dict[dt.date, dict[str, pl.DataFrame]]]:
    """(the rows of `day`, {other day: rows}) by each table's own day (registry's time_columns);
    rows without a time of their own, and tables without a time column, belong to `day`."""
    here: dict[str, pl.DataFrame] = {}
    elsewhere: dict[dt.date, dict[str, pl.DataFrame]] = {}
    for table, frame in tables.items():
        if OWN_DAY not in frame.columns:
            here[table] = frame
            continue
        own = pl.col(OWN_DAY)
        mine = own.is_null() | (own == day)
        here[table] = frame.filter(mine).drop(OWN_DAY)
        away = frame.filter(~mine)
        for (other,), rows in away.partition_by(OWN_DAY, as_dict=True, maintain_order=True).items():
            elsewhere.setdefault(other, {})[table] = rows.drop(OWN_DAY)
    return here, {other: _every_table(tables, other_tables) for other, other_tables in elsewhere.items()}


def _every_table(names: Iterable[str], frames: Mapping[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """`frames` with an empty frame for each of `names` it lacks: a merge into another day replaces the rows
    of its files in every table of the source, so a table none of whose records go there loses them."""
    return {**frames, **{name: contract(name).empty_frame() for name in names if name not in frames}}


def _validate(
    src: IngestSource, tables: dict[str, pl.DataFrame]
) -> tuple[dict[str, pl.DataFrame], pl.DataFrame, int, dict[str, dict]]:
    """Move rows that fail the table's GX suite to quarantine (stage validate).

    Returns the kept rows, the quarantine rows and how many input records they came from: a
    record is identified by (source_file, line_number) where the table carries line numbers;
    otherwise each rejected row of the source's first table (1:1 with records) is one record.
    """
    kept: dict[str, pl.DataFrame] = {}
    rejected = [empty_quarantine()]
    outcomes: dict[str, dict] = {}
    for table, frame in tables.items():
        has_lines = "line_number" in frame.columns
        valid, bad, outcome = split_valid(table, frame, source=src.name, line_col="line_number" if has_lines else None)
        kept[table] = valid
        rejected.append(bad)
        outcomes[table] = outcome.to_metadata()
    bad_rows = pl.concat(rejected, how="vertical")
    located = bad_rows.filter(pl.col("line_number").is_not_null()).select("source_file", "line_number").unique()
    unlocated = 0
    if "line_number" not in tables[src.tables[0]].columns:
        unlocated = rejected[1].height if len(rejected) > 1 else 0
    return kept, bad_rows, located.height + unlocated, outcomes


class NothingToRead(ValueError):
    """None of the files given is one the source reads (by its file name patterns)."""


def not_read(source_name: str, path: Path) -> list[Path]:
    """The files under `path` (itself, when a file) that `source_name` does not read, by name."""
    src = source(source_name)
    if path.is_dir():
        return src.files_not_read(path)
    return [] if src.reads(path) else [path]


def stage_files(warehouse: Warehouse, source_name: str, path: Path, day: dt.date) -> list[Path]:
    """Copy a file, or a folder's matching files, into the landing zone for (source, day).

    Files the source does not read (see `not_read`) are not staged; NothingToRead when none is left.
    """
    src = source(source_name)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    candidates = src.files_in(path) if path.is_dir() else [path] if src.reads(path) else []
    if not candidates:
        what = "no files matching" if path.is_dir() else "not a file name matching"
        raise NothingToRead(f"{path}: {what} {', '.join(src.patterns)}, the files source {source_name} reads")
    target = landing_folder(warehouse, source_name, day)
    make_dirs(target)
    staged = []
    for file in candidates:
        dest = target / file.name
        # 0644 whatever the input's mode or the umask: a landed file is what the next ingest loads
        copy_file(file, dest, READER_MODE)
        times = file.stat()
        os.utime(dest, ns=(times.st_atime_ns, times.st_mtime_ns))  # its times, as shutil.copy2 kept them
        staged.append(dest)
    return staged


def record_scrape_gaps(warehouse: Warehouse, gaps: pl.DataFrame) -> None:
    """Append a scrape round's gap rows (`ScrapeRound.gaps`) to ops.scrape_gaps through the
    warehouse's one writer."""
    if gaps.height == 0:
        return
    with warehouse.writer() as con:
        con.execute("create schema if not exists ops")
        con.execute(SCRAPE_GAPS_DDL)
        con.register("_gpupool_gaps", gaps.match_to_schema(GAPS_SCHEMA).to_arrow())
        try:
            con.execute("insert into ops.scrape_gaps by name select * from _gpupool_gaps")
        finally:
            con.unregister("_gpupool_gaps")
