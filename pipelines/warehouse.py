"""The warehouse of one gpupool home: a lakehouse that serves readers while writers load.

Layout under the gpupool home (default ./.gpupool):
  warehouse.duckdb            the published release readers open (read-only): every table and view,
                              the raw telemetry as views over one Delta version's Parquet files, the
                              large tables as views over Parquet chunks (lake/marts/releases/);
                              a hard link to releases/<id>.duckdb, renamed into place
  releases/<id>.duckdb        releases kept for time travel (`--as-of`), <id>.pin marks one a pack
                              or a recommendation read; lake/releases.sqlite3 is the registry
  writer/warehouse.duckdb     the writers' private database (one writer at a time, a file lock)
  lake/raw/dcgm_samples/      a Delta table (delta-rs): raw DCGM samples, partitioned by day
  landing/<ingest source>/<D>/ input files, one folder per UTC day

Why (docs/architecture.md, "Storage: the lakehouse decision"): DuckDB refuses every open of a file a
process writes. Readers therefore never open the writers' file: each committed write is published as
a new file (the writers' schema and small tables, the rest as monthly Parquet chunks written only when
their rows changed: pipelines/lake/release_chunks.py) renamed over warehouse.duckdb. A reader keeps the
release it opened, the next open gets the new one, and nobody ever holds a write lock on a published
file. The bulk of the data, the telemetry, is written to Delta
outside the writers' lock, so partitions load in parallel; a kill -9 leaves Delta at its last commit.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import duckdb
import polars as pl

from allocator.filemodes import (
    PRIVATE_DIR_MODE,
    PRIVATE_MODE,
    READER_DIR_MODE,
    READER_MODE,
    make_dirs,
    opener,
    set_mode,
    write_atomic,
)
from pipelines import sandbox
from pipelines.clock import utc_naive
from pipelines.contracts import LAKE_TABLES, LAKE_TIME_COLUMN, contract, make_tables
from pipelines.duckdb_limits import MEMORY_LIMIT_ENV, writer_limits
from pipelines.ingest_record import (
    IN_RANGE_SQL,
    DayCommit,
    IncrementStale,
    IngestReport,
    IngestTotals,
    delete_day_rows,
    folder_range,
    from_folder,
    from_other_days,
    log_day,
    moved_days,
)
from pipelines.lake import DeltaStore, LakeError, ReleaseNotFound, ReleaseRegistry, registry_for
from pipelines.lake.mart_files import marts_dir
from pipelines.lake.mend import mend_releases
from pipelines.lake.reader import RELEASE_TABLE, home_relative, search_config, view_sql
from pipelines.lake.release_chunks import chunks_dir, write_release
from pipelines.lake.tables import DataFile

# the readers' (a published release's) limit unless GPUPOOL_DUCKDB_MEMORY_LIMIT says otherwise; writers size theirs
DEFAULT_MEMORY_LIMIT = "6GB"
SCHEMAS = ("raw", "seeds", "staging", "marts", "metrics", "ops", "governance")
LAKE_DAY_COLUMN = "partition_date"
# Releases kept besides the pinned ones; older ones are deleted when a newer one is published.
DEFAULT_KEEP_RELEASES = 3
# Homes whose publishing is deferred to the end of a batch (depth per home, this process only).
_DEFERRED: dict[Path, int] = {}


class ReleaseExpired(LakeError):
    """The release asked for is no longer kept (or never existed)."""


class Warehouse:
    """Paths, connections and releases of one gpupool home."""

    def __init__(self, home: str | Path):
        self.home = Path(home).resolve()
        self.db_path = self.home / "warehouse.duckdb"  # the published release: what readers open
        self.writer_path = self.home / "writer" / "warehouse.duckdb"  # same name: dbt names the database after it
        self.releases = self.home / "releases"
        self.lake = self.home / "lake"
        self.landing = self.home / "landing"
        self.store = DeltaStore(self.lake)
        self._lock_path = self.home / ".writer.lock"
        self._publish_lock_path = self.home / ".publish.lock"

    @property
    def registry(self) -> ReleaseRegistry:
        return registry_for(self.lake)  # PostgreSQL when GPUPOOL_CATALOG_URL says so

    @staticmethod
    def lake_table(name: str) -> str:
        """The Delta table of a lake contract ("dcgm_samples" -> "raw.dcgm_samples")."""
        return contract(name).table

    def lake_dirs(self) -> list[Path]:
        """The folders the published views read Parquet files from (the analysts' sandbox allows them)."""
        return [*(self.store.path(self.lake_table(name)) for name in LAKE_TABLES), marts_dir(self.home)]

    # -- connections -------------------------------------------------------------------------
    def connect(self, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        """read_only: the published release (never refused, never waits); else the writers' file
        (use writer(), which takes the lock and publishes)."""
        path = self.db_path if read_only else self.writer_path
        if read_only and not path.exists():
            raise FileNotFoundError(
                f"no warehouse at {path}: run `gpupool demo` or `gpupool ingest` first"
            )
        if not read_only:  # the writers' file and its WAL: the owner's only (allocator/filemodes.py)
            make_dirs(self.home)
            make_dirs(path.parent, PRIVATE_DIR_MODE, tighten=True)
        # DuckDB takes 80% of the machine's memory by default; a month of telemetry would then crowd
        # out everything else. Writers get a share sized from the machine and spill to the home's tmp/
        # above it (pipelines/duckdb_limits.py); readers of a release keep a fixed limit.
        if read_only:
            config = {"memory_limit": os.environ.get(MEMORY_LIMIT_ENV, DEFAULT_MEMORY_LIMIT)}
        else:
            config = writer_limits(self.home).config()
        # the lake views name their files relative to the home (pipelines/lake/reader.py)
        con = duckdb.connect(str(path), read_only=read_only, config=config | search_config(self.home))
        if not read_only:  # DuckDB creates it 0666 less the umask, inside the 0700 folder: make it 0600
            set_mode(path, PRIVATE_MODE)
        return con

    def analyst_connect(self, memory_limit: str | None = None, writable_dir: Path | None = None,
                        release: int | None = None) -> duckdb.DuckDBPyConnection:
        """The analysts' connection (`gpupool sql`, dashboards, review packs, exports, dictionary):
        read-only, and no file but the release and the lake folders its views read (plus
        `writable_dir` for the export's own writes). `release`: a kept older release (time travel)
        instead of the latest. It spills to a folder of this process's own, capped at GPUPOOL_SQL_TEMP_LIMIT;
        run typed SQL inside `sandbox.guarded(con)` (the statement timeout, limits' errors) and fetch in
        batches. See pipelines/sandbox.py; the pipeline's own readers keep `connect(read_only=True)`."""
        return sandbox.connect(
            self.db_path if release is None else self.release_path(release),
            self.lake_dirs(),
            memory_limit=memory_limit or os.environ.get(MEMORY_LIMIT_ENV, DEFAULT_MEMORY_LIMIT),
            writable_dir=writable_dir,
            home=self.home,
        )

    @contextmanager
    def writer_lock(self) -> Iterator[None]:
        """The writers' exclusive file lock, without a connection (the dbt build opens its own)."""
        make_dirs(self.home)
        with open(self._lock_path, "a", opener=opener(PRIVATE_MODE)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._adopt_old_layout()
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """No publish and no writer in flight (the publish lock, then the writers', as a publish takes
        them): for deleting files only a build or a publish could start reading."""
        make_dirs(self.home)
        with open(self._publish_lock_path, "a", opener=opener(PRIVATE_MODE)) as publish_lock:
            fcntl.flock(publish_lock, fcntl.LOCK_EX)
            try:
                with self.writer_lock():
                    yield
            finally:
                fcntl.flock(publish_lock, fcntl.LOCK_UN)

    @contextmanager
    def partition_lock(self, *partitions: tuple[str, dt.date]) -> Iterator[None]:
        """Exclusive locks on (ingest source, day) partitions, taken in sorted order: a partition's
        telemetry commit (Delta) and its small tables' commit (DuckDB) are one step for every other
        writer of that partition, while other days load in parallel. Take it before the writers'
        lock, never the other way round."""
        folder = self.home / "locks"
        with ExitStack() as stack:
            for source_name, day in sorted(set(partitions)):
                path = folder / source_name / f"{day.isoformat()}.lock"
                make_dirs(path.parent, PRIVATE_DIR_MODE, tighten=True)
                handle = stack.enter_context(open(path, "a", opener=opener(PRIVATE_MODE)))
                fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the process dies
            yield

    @contextmanager
    def writer(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The one writing connection: an exclusive file lock serialises writers across processes.
        When it closes without error the state is published as a new release, unless the caller
        deferred publishing to the end of a batch (`publishing`)."""
        with self.writer_lock():
            con = self.connect(read_only=False)
            try:
                self.ensure_schema(con)
                yield con
                con.execute("checkpoint")  # the publish copies the file alone, without a WAL
            finally:
                con.close()
        self.publish_unless_deferred("write")

    def publish_unless_deferred(self, kind: str, note: str | None = None) -> int | None:
        """Publish now, unless this process is inside `publishing` for this home (it publishes at its end)."""
        return None if _DEFERRED.get(self.home) else self.publish(kind, note)

    @contextmanager
    def publishing(self, kind: str, note: str | None = None) -> Iterator[None]:
        """Writes inside publish one release at the end (a backfill of 30 days is one copy, not 240).
        Nested batches publish once, at the end of the outermost; nothing is published on an error
        (the writes are committed, and the next publish carries them)."""
        _DEFERRED[self.home] = _DEFERRED.get(self.home, 0) + 1
        try:
            yield
        finally:
            _DEFERRED[self.home] -= 1
            if not _DEFERRED[self.home]:
                del _DEFERRED[self.home]
        self.publish_unless_deferred(kind, note)

    # -- releases ----------------------------------------------------------------------------
    def publish(self, kind: str = "write", note: str | None = None) -> int | None:
        """Publish the writers' committed state as a release and make it what readers open; returns
        its id (the current one when nothing changed since, None when nothing was ever written).

        The release's file is written from the writers' file under the writers' lock (a consistent
        state: pipelines/lake/release_chunks.py), with its own row and the view of the lake at the
        versions the writers' file read, then renamed into releases/ and hard-linked over
        warehouse.duckdb: both renames are atomic."""
        make_dirs(self.home)
        with open(self._publish_lock_path, "a", opener=opener(PRIVATE_MODE)) as publish_lock:
            fcntl.flock(publish_lock, fcntl.LOCK_EX)  # releases are published in the order recorded
            try:
                return self._publish(kind, note)
            finally:
                fcntl.flock(publish_lock, fcntl.LOCK_UN)

    def _publish(self, kind: str, note: str | None) -> int | None:
        mend_releases(self)
        stamp_path = self.releases / "latest.json"  # the release published last, and the writers' file it read
        # a publisher killed mid-way leaves its file, chunk or link; under the publish lock nobody else uses them
        for leftover in [*self.releases.glob(".*.tmp"), *self.releases.glob(".*.tmp.wal"),
                         *chunks_dir(self.home).glob("*/.*.tmp"), *self.home.glob(".warehouse.duckdb.*.tmp")]:
            leftover.unlink(missing_ok=True)
        with self.writer_lock():
            if not self.writer_path.exists():
                return None
            stat = self.writer_path.stat()
            stamp = {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size, "inode": stat.st_ino}
            latest = json.loads(stamp_path.read_text()) if stamp_path.exists() else None
            if latest and latest["stamp"] == stamp and self.release_path(latest["release_id"], must_exist=False).exists():
                return int(latest["release_id"])
            make_dirs(self.releases, READER_DIR_MODE, tighten=True)
            written = self.releases / f".{uuid.uuid4().hex}.tmp"  # renamed into place once whole

            def record(con: duckdb.DuckDBPyConnection) -> int:
                """The release's id, from the registry, and its row in the release file."""
                versions = dict(con.execute("select table_name, version from r.ops.lake_versions "
                                            "where version is not null").fetchall())
                release_id = self.registry.record(kind, note, versions)
                con.execute("create schema if not exists r.lake")
                con.execute(f"create or replace table r.{RELEASE_TABLE} (release_id bigint not null, "
                            "created_at timestamp, kind varchar, note varchar)")
                con.execute(f"insert into r.{RELEASE_TABLE} values (?, ?, ?, ?)", [release_id, utc_naive(), kind, note])
                return release_id

            try:  # the writers' schema and small tables, the rest as Parquet chunks written when they changed
                release_id = write_release(self.writer_path, written, self.home, record)
            except BaseException:
                written.unlink(missing_ok=True)
                raise
        try:
            target = self.release_path(release_id, must_exist=False)
            os.replace(written, target)
            link = self.home / f".warehouse.duckdb.{uuid.uuid4().hex}.tmp"
            os.link(target, link)
            os.replace(link, self.db_path)
        finally:
            written.unlink(missing_ok=True)
        write_atomic(stamp_path, json.dumps({"release_id": release_id, "stamp": stamp}), READER_MODE)
        self.expire_releases()
        return release_id

    def release_path(self, release_id: int, must_exist: bool = True) -> Path:
        path = self.releases / f"{int(release_id)}.duckdb"
        if must_exist and not path.exists():
            kept = ", ".join(str(r) for r in self.kept_releases()) or "none"
            raise ReleaseExpired(f"release {release_id} is not kept in {self.releases} (kept: {kept}); "
                                 "pin a release to keep it (packs and recommendations pin theirs)")
        return path

    def kept_releases(self) -> list[int]:
        """Ids of the releases whose files are kept, oldest first."""
        if not self.releases.exists():
            return []
        return sorted(int(p.stem) for p in self.releases.glob("*.duckdb") if p.stem.isdigit())

    def current_release(self) -> int | None:
        """The release warehouse.duckdb serves now (None before the first publish). Read from the
        publisher's record, not by opening the file: this process may hold it open with other settings."""
        latest = self.releases / "latest.json"
        return int(json.loads(latest.read_text())["release_id"]) if latest.exists() else None

    def pin_release(self, release_id: int, reason: str) -> None:
        """Keep a release's file (and the lake files it reads) until unpinned: a pack or a
        recommendation read it, and `--as-of` must find it again."""
        self.release_path(release_id)  # raises when it is already gone
        pin = self.releases / f"{int(release_id)}.pin"
        with open(pin, "a", opener=opener(READER_MODE)) as out:
            out.write(reason.replace("\n", " ") + "\n")

    def pin_reasons(self, release_id: int) -> list[str]:
        """Why a release is pinned: its pin lines (one per pin_release), first first, without repeats."""
        pin = self.releases / f"{int(release_id)}.pin"
        lines = pin.read_text().splitlines() if pin.exists() else []
        return list(dict.fromkeys(line for line in lines if line.strip()))

    def pinned_releases(self) -> set[int]:
        return {int(p.stem) for p in self.releases.glob("*.pin") if p.stem.isdigit()} if self.releases.exists() else set()

    def expire_releases(self, keep: int | None = None, pinned: set[int] | None = None,
                        dry_run: bool = False) -> list[int]:
        """Delete release files beyond the newest `keep` (env GPUPOOL_KEEP_RELEASES, default 3), except
        pinned ones (`pinned`: as if those were the pins, for a dry run) and the one warehouse.duckdb
        serves; returns their ids (with `dry_run`, deletes nothing). A reader that has one open keeps
        reading it (the inode lives until closed). Their registry rows stay: the history of what was
        published."""
        keep = keep if keep is not None else int(os.environ.get("GPUPOOL_KEEP_RELEASES", DEFAULT_KEEP_RELEASES))
        kept = self.kept_releases()
        pinned = self.pinned_releases() if pinned is None else pinned
        protected = set(kept[-max(keep, 1):]) | pinned | {self.current_release()}
        expired = [r for r in kept if r not in protected]
        for release_id in [] if dry_run else expired:
            self.release_path(release_id, must_exist=False).unlink(missing_ok=True)
        return expired

    def release_versions(self, releases: list[int] | None = None) -> dict[str, set[int]]:
        """Per lake table, the Delta versions the kept releases (or `releases`) read: vacuum must keep
        their files."""
        registry = self.registry
        out: dict[str, set[int]] = {}
        for release_id in self.kept_releases() if releases is None else releases:
            try:
                release = registry.get(release_id)
            except ReleaseNotFound:
                continue
            for name, version in release.tables.items():
                out.setdefault(name, set()).add(version)
        return out

    def _adopt_old_layout(self) -> None:
        """A home written before the lakehouse (warehouse.duckdb written in place, telemetry as
        lake/dcgm_samples/date=D/ingest=S/part-0.parquet) becomes this layout on its first write:
        the file moves to writer/, the telemetry is loaded into Delta one partition at a time, and
        the old files are removed only after. Runs under the writers' lock."""
        if self.writer_path.exists() or not self.db_path.exists():
            return
        try:
            con = duckdb.connect(str(self.db_path), read_only=True)
            try:
                published = bool(con.execute(
                    "select count(*) from information_schema.tables where table_schema = 'lake' "
                    "and table_name = 'release'").fetchall()[0][0])
            finally:
                con.close()
        except duckdb.Error:
            return
        if published:
            return
        make_dirs(self.writer_path.parent, PRIVATE_DIR_MODE, tighten=True)
        for name in LAKE_TABLES:
            old = self.lake / name
            for part in sorted(old.glob("date=*/ingest=*/part-0.parquet")):
                day = dt.date.fromisoformat(part.parent.parent.name.removeprefix("date="))
                source = part.parent.name.removeprefix("ingest=")
                frame = pl.read_parquet(part).with_columns(pl.col(pl.Categorical).cast(pl.String))
                self.write_lake_rows(name, day, source, frame)
        os.chmod(self.db_path, PRIVATE_MODE)  # it becomes the writers' file
        os.replace(self.db_path, self.writer_path)
        for name in LAKE_TABLES:
            shutil.rmtree(self.lake / name, ignore_errors=True)

    # -- schema ------------------------------------------------------------------------------
    def ensure_schema(self, con: duckdb.DuckDBPyConnection) -> None:
        """Make the schemas and tables unless the file's stamp says this code's statements made them
        (contracts.make_tables: every table's DDL lives in pipelines/contracts.py), and point the lake
        views at the lake's latest versions."""
        make_dirs(marts_dir(self.home), READER_DIR_MODE)  # the per-minute marts' day files (models/macros/day_files.sql)
        # One transaction: each statement committed on its own flushes the WAL, several times slower
        # (bench/README.md, "Figures the code's choices rest on").
        with _transaction(con):
            make_tables(con, SCHEMAS)
            self.refresh_lake_views(con)

    def refresh_lake_views(self, con: duckdb.DuckDBPyConnection) -> None:
        """Point each lake view at its Delta table's latest version (a list of its Parquet files),
        and record the version in ops.lake_versions: a publish records exactly what the views read.
        The files are named relative to the home (pipelines/lake/reader.py), so a moved home's views,
        and its releases', read the lake where it is now; the table's location is recorded too (a
        lake outside the home, on object storage, re-points the views when it moves). The first and
        last UTC day of the version's sample times are recorded from its files' Delta statistics, so
        that the build learns the telemetry's days without scanning it (build_window.telemetry_days)."""
        # a row without the days of its version (written before they were recorded) is written again
        seen = {name: (version, location) for name, version, location, first_day
                in con.execute("select table_name, version, location, first_day from ops.lake_versions").fetchall()
                if first_day is not None or version is None}
        present = {f"{schema}.{name}" for schema, name
                   in con.execute("select table_schema, table_name from information_schema.tables").fetchall()}
        for name in LAKE_TABLES:
            c = contract(name)
            version, location = self.store.version(c.table), str(self.store.path(c.table))
            if c.table in present and seen.get(c.table) == (version, location):
                continue
            days: tuple[dt.date | None, dt.date | None] = (None, None)
            if version is None:
                cols = ", ".join(f"cast(null as {col.type}) as {col.name}" for col in c.columns)
                body = (
                    f"select {cols}, cast(null as timestamp) as ingested_at, cast(null as date) as partition_date, "
                    "cast(null as varchar) as ingest_source where false"
                )
            else:
                files = self.store.data_files(c.table, version, bounds_of=LAKE_TIME_COLUMN)
                body = view_sql(self.store.schema(c.table, version), self.store.partition_columns(c.table, version),
                                home_relative(files, self.home))
                days = _days_of(files)
            con.execute(f"create or replace view {c.table} as {body}")
            con.execute("insert or replace into ops.lake_versions (table_name, version, location, first_day, last_day) "
                        "values (?, ?, ?, ?, ?)", [c.table, version, location, *days])

    def record_check(
        self,
        check_name: str,
        asset: str,
        partition_date: dt.date | None,
        passed: bool,
        severity: str,
        unexpected_count: int,
        metadata: dict,
    ) -> None:
        """Keep the latest result of a check per (check, asset, day) for the dashboards."""
        self.record_checks([(check_name, asset, partition_date, passed, severity, unexpected_count, metadata)])

    def record_checks(self, results: list[tuple[str, str, dt.date | None, bool, str, int, dict]]) -> None:
        """record_check for several results (check, asset, day, passed, severity, unexpected count,
        metadata), in one writer connection: an ingest of a month records two a day."""
        if not results:
            return
        with self.writer() as con, _transaction(con):
            for check_name, asset, partition_date, passed, severity, unexpected_count, metadata in results:
                con.execute(
                    "delete from ops.check_results where check_name = ? and asset = ? "
                    "and partition_date is not distinct from ?",
                    [check_name, asset, partition_date],
                )
                con.execute(
                    "insert into ops.check_results values (?, ?, ?, ?, ?, ?, ?, ?)",
                    [check_name, asset, partition_date, passed, severity, unexpected_count,
                     json.dumps(metadata, default=str, sort_keys=True), utc_naive()],
                )

    # -- partition replacement ---------------------------------------------------------------
    def replace_partition(
        self,
        ingest_source: str,
        partition_date: dt.date,
        tables: Mapping[str, pl.DataFrame | LakeRowsWrite],
        quarantine: pl.DataFrame,
        files_read: int,
        records_read: int,
        records_loaded: int,
        records_quarantined: int | None = None,
        started_at: dt.datetime | None = None,
        notes: list[str] | None = None,
        state: dict | None = None,
    ) -> IngestReport:
        """Replace everything one ingest source loaded for one day, atomically per store.

        records_quarantined counts input records (a record may yield several quarantine rows);
        it defaults to the number of quarantine rows. A lake table's rows may come already written
        (`lake_rows_write`, a large day a slice at a time): they are committed here.

        Lake tables: one Delta commit per table replaces the (day, source) rows, outside the
        writers' lock (a crash leaves the previous commit; other days load at the same time).
        Warehouse tables, the quarantine and the ingest log: delete then insert in one transaction, in
        a writer session that first points the lake views at the new commit (`writer` runs
        `ensure_schema`, after the lake's commits). Tables this source does not produce are
        left alone. ops.ingest_state's row for the day becomes `state` (none: deleted). The ingest
        commits through `replace_partitions`, whose DayCommit also names the day's landing folder
        (`DayCommit.landing`): the commit keeps the rows other days' files put on the day.
        """
        [report] = self.replace_partitions(ingest_source, [DayCommit.of(
            partition_date, tables, quarantine, files_read, records_read, records_loaded, records_quarantined,
            started_at, notes, state)])
        return report

    def replace_partitions(self, ingest_source: str, days: Sequence[DayCommit]) -> list[IngestReport]:
        """`replace_partition` for several days of one ingest source, in order, in one writer session (a
        transaction per day, after each day's Delta commits): a run of days opens the writers' file
        once, not once a day (bench/README.md, "Figures the code's choices rest on"). The days'
        partition locks are held together, taken in sorted order."""
        with self.partition_lock(*((ingest_source, day.partition_date) for day in days)):
            self._commit_ingest(ingest_source, days, append_to=None)
        return [day.totals.report(ingest_source, day.partition_date) for day in days]

    def append_partition(
        self,
        ingest_source: str,
        partition_date: dt.date,
        tables: Mapping[str, pl.DataFrame | LakeRowsWrite],
        quarantine: pl.DataFrame,
        totals: IngestTotals,
        started_at: dt.datetime,
        state: dict,
        after_run: str,
    ) -> IngestReport:
        """Add rows to one ingest source's day (the intraday ingest of the files landed since the run
        `after_run`): lake tables by a Delta commit that adds files (`lake_rows_write(..., append=True)`),
        the warehouse's tables and the quarantine by inserts, in the same order and locks as
        `replace_partition`. `totals` are the day's after this run (ops.ingest_log holds a day's totals
        in its newest row), `state` the day's new ops.ingest_state. IncrementStale, before anything is
        committed, when the day's newest run is not `after_run` (another ingest of the day came between)."""
        with self.partition_lock((ingest_source, partition_date)):
            self._commit_ingest(ingest_source, [DayCommit(partition_date, tables, quarantine, totals, started_at, state)],
                                append_to=after_run)
        return totals.report(ingest_source, partition_date)

    def ingest_state(self, ingest_source: str, partition_date: dt.date) -> tuple[str, dict] | None:
        """The day's ops.ingest_state in the writers' file, as (run_id, state); None when it has none."""
        if not self.writer_path.exists():
            return None
        with self.writer_lock():
            con = self.connect(read_only=False)
            try:
                if not con.execute("select count(*) from duckdb_tables() where database_name = current_database() "
                                   "and schema_name = 'ops' and table_name = 'ingest_state'").fetchone()[0]:
                    return None
                row = con.execute("select run_id, state from ops.ingest_state where ingest_source = ? "
                                  "and partition_date = ?", [ingest_source, partition_date]).fetchone()
            finally:
                con.close()
        return (row[0], json.loads(row[1])) if row else None

    def _commit_ingest(self, ingest_source: str, days: Sequence[DayCommit], append_to: str | None) -> None:
        """Hold the days' partition locks. Each day's lake tables by a Delta commit, then the warehouse's
        in one writer session, a transaction per day in order. `append_to` (one day): add rows after that
        run (else replace the days')."""
        if append_to is not None:
            [day] = days
            base = self.ingest_state(ingest_source, day.partition_date)
            if base is None or base[0] != append_to:
                raise IncrementStale(f"{ingest_source} {day.partition_date}: the day was ingested again meanwhile")
        ingested_at = utc_naive()
        for day in days:
            if day.landing is not None and append_to is None:  # replaced after the commit (`merge_files`)
                day.moved_to.update(self.lake_days_holding(ingest_source, day.partition_date, *day.landing))
            for name, frame in day.tables.items():
                if name not in LAKE_TABLES and not isinstance(frame, LakeRowsWrite):
                    continue
                # the rows other days' files put on the day stay: read under the day's lock, as merges write
                # (about 30 ms a day: bench/README.md, "Figures the code's choices rest on")
                kept = self._read_lake_rows(name, day.partition_date, ingest_source,
                                            from_other_days(day.landing[0], day.run_first)) \
                    if append_to is None and day.landing is not None else None
                if kept is not None and day.state is not None:  # the intraday ingest's record counts them
                    day.state.setdefault("rows_of_other_days", {})[name] = kept.height
                if isinstance(frame, LakeRowsWrite):
                    frame.keep(kept)
                    frame.write.commit()
                elif append_to is not None:
                    write = self.lake_rows_write(name, day.partition_date, ingest_source, append=True)
                    write.add(frame)
                    write.write.commit()
                else:
                    self._write_lake_partition(name, day.partition_date, ingest_source, frame, ingested_at, kept)
        with self.writer() as con:
            for day in days:
                with _transaction(con):
                    self._commit_day(con, ingest_source, day, ingested_at, append_to)

    def _commit_day(self, con: duckdb.DuckDBPyConnection, ingest_source: str, day: DayCommit,
                    ingested_at: dt.datetime, append_to: str | None) -> None:
        """One day's warehouse tables, quarantine, ingest log and ingest state, inside a transaction."""
        partition_date = day.partition_date
        folder = day.landing[0] if day.landing is not None else None
        if day.landing is not None and append_to is None:
            day.moved_to.update(moved_days(con, ingest_source, partition_date, *day.landing))
        rows = [(contract(name).table, frame, folder) for name, frame in day.tables.items()
                if name not in LAKE_TABLES and not isinstance(frame, LakeRowsWrite)]
        rows.append(("ops.quarantine", day.quarantine, None))  # it stays with the day ingested: all its files'
        for table, frame, keeping in rows:
            if append_to is None:
                self._replace_rows(con, table, frame, partition_date, ingest_source, ingested_at, keeping,
                                   day.run_first)
            else:
                self._insert_rows(con, table, frame, partition_date, ingest_source, ingested_at)
        log_day(con, ingest_source, day)

    def merge_files(self, ingest_source: str, partition_date: dt.date, tables: dict[str, pl.DataFrame],
                    source_files: list[str], folder: Path | None = None) -> None:
        """Replace, in one day's partition, only the rows that came from `source_files` (with `folder`, a
        day's landing folder ingested whole: the rows of every file under it, those gone included), each
        table's in one commit: its lake tables' by a Delta commit each, then the others' in a transaction.

        For records that carry their own time on another day than the ingest's: a file of one day
        adds its records to the other day without disturbing what that day's own ingest loaded.
        """
        with self.partition_lock((ingest_source, partition_date)):
            self._merge_files_locked(ingest_source, partition_date, tables, source_files, folder)

    def _merge_files_locked(self, ingest_source: str, partition_date: dt.date, tables: dict[str, pl.DataFrame],
                            source_files: list[str], folder: Path | None) -> None:
        ingested_at = utc_naive()
        from_files = from_folder(folder) if folder is not None else pl.col("source_file").is_in(source_files)
        for name, frame in tables.items():
            if name in LAKE_TABLES:
                self._merge_lake_partition(name, partition_date, ingest_source, frame, from_files, ingested_at)
        with self.writer() as con, _transaction(con):  # its session also points the lake views at the merge
            for name, frame in tables.items():
                if name in LAKE_TABLES:
                    continue
                table = contract(name).table
                which, params = "list_contains(?, source_file)", [source_files]
                if folder is not None:
                    which, params = IN_RANGE_SQL, list(folder_range(folder))
                con.execute(f"delete from {table} where partition_date = ? and ingest_source = ? and {which}",
                            [partition_date, ingest_source, *params])
                self._insert_rows(con, table, frame, partition_date, ingest_source, ingested_at)

    def lake_days_holding(self, ingest_source: str, partition_date: dt.date, folder: Path,
                          tables: Sequence[str]) -> set[dt.date]:
        """The other days of the lake tables among `tables` that hold rows of `folder`'s files (records of
        that day's landing files timestamped on another day, put there by an earlier ingest of
        `partition_date`): the days its re-ingest replaces them on (`merge_files` with the folder). Rows are
        found by source_file, the landing path, between `folder/` and `folder0` (min/max statistics prune
        the lake's files)."""
        days: set[dt.date] = set()
        for name in tables:
            if name not in LAKE_TABLES or not self.store.exists(table := self.lake_table(name)):
                continue
            moved = (pl.col("ingest_source") == ingest_source) & (pl.col(LAKE_DAY_COLUMN) != partition_date) \
                & from_folder(folder)
            days.update(pl.scan_delta(str(self.store.path(table))).filter(moved)
                        .select(LAKE_DAY_COLUMN).unique().collect().get_column(LAKE_DAY_COLUMN).to_list())
        return days

    def _merge_lake_partition(self, name: str, partition_date: dt.date, ingest_source: str, frame: pl.DataFrame,
                              from_files: pl.Expr, ingested_at: dt.datetime) -> None:
        kept = frame.with_columns(ingested_at=pl.lit(ingested_at, dtype=pl.Datetime("us")))
        whole = self._read_lake_rows(name, partition_date, ingest_source)
        old = whole.filter(~from_files)
        if not kept.height and old.height == whole.height:
            return  # nothing to add, nothing to take away
        if old.height:
            kept = pl.concat([old, kept.select(old.columns)], how="vertical_relaxed")
        self.write_lake_rows(name, partition_date, ingest_source, kept)

    @staticmethod
    def _replace_rows(
        con: duckdb.DuckDBPyConnection,
        table: str,
        frame: pl.DataFrame,
        partition_date: dt.date,
        ingest_source: str,
        ingested_at: dt.datetime,
        folder: Path | None = None,
        run_first: dt.date | None = None,
    ) -> None:
        """The source's day becomes `frame`; with `folder` (the day's landing folder), the rows other days'
        files put on the day stay, but for the run's earlier days' (`delete_day_rows`)."""
        delete_day_rows(con, table, ingest_source, partition_date, folder, run_first)
        Warehouse._insert_rows(con, table, frame, partition_date, ingest_source, ingested_at)

    @staticmethod
    def _insert_rows(
        con: duckdb.DuckDBPyConnection,
        table: str,
        frame: pl.DataFrame,
        partition_date: dt.date,
        ingest_source: str,
        ingested_at: dt.datetime,
    ) -> None:
        if frame.height == 0:
            return
        batch = frame.with_columns(
            partition_date=pl.lit(partition_date, dtype=pl.Date),
            ingest_source=pl.lit(ingest_source),
            ingested_at=pl.lit(ingested_at, dtype=pl.Datetime("us")),
        )
        con.register("_gpupool_batch", batch.to_arrow())
        try:
            con.execute(f"insert into {table} by name select * from _gpupool_batch")
        finally:
            con.unregister("_gpupool_batch")

    def _write_lake_partition(self, name: str, partition_date: dt.date, ingest_source: str, frame: pl.DataFrame,
                              ingested_at: dt.datetime, kept: pl.DataFrame | None = None) -> None:
        rows = frame.with_columns(ingested_at=pl.lit(ingested_at, dtype=pl.Datetime("us")))
        if kept is not None and kept.height:
            rows = pl.concat([kept, rows.select(kept.columns)], how="vertical_relaxed")
        self.write_lake_rows(name, partition_date, ingest_source, rows)

    def _lake_frame(self, name: str, frame: pl.DataFrame, partition_date: dt.date, ingest_source: str) -> pl.DataFrame:
        """The rows as the Delta table stores them: the contract's columns and types, then
        ingested_at, partition_date, ingest_source (the view's column order, as before Delta)."""
        c = contract(name)
        return c.conform(frame).with_columns(
            ingested_at=frame.get_column("ingested_at").cast(pl.Datetime("us")) if "ingested_at" in frame.columns
            else pl.lit(None, dtype=pl.Datetime("us")),
            partition_date=pl.lit(partition_date, dtype=pl.Date),
            ingest_source=pl.lit(ingest_source, dtype=pl.String),
        )

    def write_lake_rows(self, name: str, partition_date: dt.date, ingest_source: str, frame: pl.DataFrame) -> int:
        """Replace one (day, source) of a lake table with `frame` in one Delta commit; no rows
        empties it. Returns the new version. Hold `partition_lock` for that (source, day)."""
        return self.store.replace_partition(
            self.lake_table(name), partition_date, self._lake_frame(name, frame, partition_date, ingest_source),
            LAKE_DAY_COLUMN, where={"ingest_source": ingest_source})

    def lake_rows_write(self, name: str, partition_date: dt.date, ingest_source: str,
                        append: bool = False) -> LakeRowsWrite:
        """A `write_lake_rows` given a slice at a time, committed by `replace_partition` (pass it as
        the table's rows): the ingest of a large day holds one slice, not the day. With `append`, the rows
        are added to the day's (for `append_partition`)."""
        return LakeRowsWrite(self, name, partition_date, ingest_source, append)

    def lake_partition_rows(self, name: str, partition_date: dt.date, ingest_source: str) -> int | None:
        """The rows a lake table holds for one (day, source), by the Delta log's statistics (None: they
        cannot tell)."""
        return self.store.partition_rows(self.lake_table(name), partition_date, LAKE_DAY_COLUMN,
                                         {"ingest_source": ingest_source})

    def _read_lake_rows(self, name: str, partition_date: dt.date, ingest_source: str,
                        where: pl.Expr | None = None) -> pl.DataFrame:
        """One (day, source) of a lake table at its latest version (the contract's columns and ingested_at),
        its rows matching `where` if given."""
        table = self.lake_table(name)
        columns = [*contract(name).column_names, "ingested_at"]
        if not self.store.exists(table):
            return self._lake_frame(name, contract(name).empty_frame(), partition_date, ingest_source).select(columns)
        rows = (pl.col(LAKE_DAY_COLUMN) == partition_date) & (pl.col("ingest_source") == ingest_source)
        return (pl.scan_delta(str(self.store.path(table)))
                .filter(rows if where is None else rows & where).select(columns).collect())


class LakeRowsWrite:
    """One (day, source) of a lake table written a slice at a time (Warehouse.lake_rows_write): each
    `add` writes the slice as the table stores it (a Parquet file no version holds yet);
    Warehouse.replace_partition commits them all in one Delta commit. ingested_at is when the
    write began."""

    def __init__(self, warehouse: Warehouse, name: str, partition_date: dt.date, ingest_source: str,
                 append: bool = False) -> None:
        self._warehouse, self._name, self._day, self._source = warehouse, name, partition_date, ingest_source
        self._ingested_at = utc_naive()
        self.write = warehouse.store.partition_write(warehouse.lake_table(name), partition_date, LAKE_DAY_COLUMN,
                                                     where={"ingest_source": ingest_source}, append=append)

    @property
    def rows(self) -> int:
        return self.write.rows

    def add(self, frame: pl.DataFrame) -> None:
        self._add(frame.with_columns(ingested_at=pl.lit(self._ingested_at, dtype=pl.Datetime("us"))))

    def keep(self, frame: pl.DataFrame | None) -> None:
        """Add rows already stored, with their own ingested_at (the rows a replace keeps)."""
        if frame is not None and frame.height:
            self._add(frame)

    def _add(self, frame: pl.DataFrame) -> None:
        self.write.add(self._warehouse._lake_frame(self._name, frame, self._day, self._source))


def _days_of(files: list[DataFile]) -> tuple[dt.date | None, dt.date | None]:
    """The first and last UTC day of the files' sample times by their Delta statistics; (None, None)
    when a file with rows has none (whoever needs the days then scans the rows)."""
    bounds = [f.bounds for f in files if f.rows != 0]
    if not bounds or any(b is None for b in bounds):
        return None, None
    return min(low for low, _ in bounds).date(), max(high for _, high in bounds).date()


@contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction on `con`: committed when the block ends, rolled back when it raises."""
    con.execute("begin transaction")
    try:
        yield
    except Exception:
        con.execute("rollback")
        raise
    con.execute("commit")
