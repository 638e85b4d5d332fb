"""The DuckDB warehouse and the Parquet lake: one writer at a time, partition replacement, views.

Layout under the gpupool home (default ./.gpupool):
  warehouse.duckdb                      raw, staging, marts, metrics, ops, governance schemas
  lake/dcgm_samples/date=D/ingest=S/    Parquet part files of raw DCGM samples
  landing/<ingest source>/<D>/          input files, one folder per UTC day
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from pipelines import sandbox
from pipelines.contracts import INGEST_LOG_COLUMNS, LAKE_TABLES, all_ddl, contract

DEFAULT_MEMORY_LIMIT = "6GB"
SCHEMAS = ("raw", "seeds", "staging", "marts", "metrics", "ops", "governance")


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
    files_empty: int = 0
    # per table: the Great Expectations suite's outcome on the parsed batch (before quarantine)
    validation: dict[str, dict] = field(default_factory=dict)

    def summary(self) -> str:
        return (
            f"{self.ingest_source} {self.partition_date}: {self.files_read} files, "
            f"{self.records_read} read, {self.records_loaded} loaded, {self.records_quarantined} quarantined"
        )


class Warehouse:
    """Paths and connections for one gpupool home."""

    def __init__(self, home: str | Path):
        self.home = Path(home).resolve()
        self.db_path = self.home / "warehouse.duckdb"
        self.lake = self.home / "lake"
        self.landing = self.home / "landing"
        self._lock_path = self.home / ".writer.lock"

    # -- connections -------------------------------------------------------------------------
    def connect(self, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        if read_only and not self.db_path.exists():
            raise FileNotFoundError(
                f"no warehouse at {self.db_path}: run `gpupool demo` or `gpupool ingest` first"
            )
        self.home.mkdir(parents=True, exist_ok=True)
        # DuckDB takes 80% of the machine's memory by default; a month of telemetry would then crowd
        # out everything else. Above the limit it spills to the home's temp folder.
        config = {"memory_limit": os.environ.get("GPUPOOL_DUCKDB_MEMORY_LIMIT", DEFAULT_MEMORY_LIMIT)}
        if not read_only:
            config["temp_directory"] = str(self.home / "tmp")
        return duckdb.connect(str(self.db_path), read_only=read_only, config=config)

    def analyst_connect(self, memory_limit: str | None = None,
                        writable_dir: Path | None = None) -> duckdb.DuckDBPyConnection:
        """The analysts' connection (`gpupool sql`, dashboards, review packs, exports, dictionary):
        read-only, and no file but the warehouse and the lake folders its views read (plus
        `writable_dir` for the export's own writes). See pipelines/sandbox.py; the pipeline's own
        readers keep `connect(read_only=True)`."""
        return sandbox.connect(
            self.db_path,
            [self.lake / name for name in LAKE_TABLES],
            memory_limit=memory_limit or os.environ.get("GPUPOOL_DUCKDB_MEMORY_LIMIT", DEFAULT_MEMORY_LIMIT),
            writable_dir=writable_dir,
        )

    @contextmanager
    def writer_lock(self) -> Iterator[None]:
        """The writers' exclusive file lock, without a connection (the dbt build opens its own)."""
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def writer(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The one writing connection: an exclusive file lock serialises writers across processes."""
        with self.writer_lock():
            con = self.connect(read_only=False)
            try:
                self.ensure_schema(con)
                yield con
            finally:
                con.close()

    # -- schema ------------------------------------------------------------------------------
    def ensure_schema(self, con: duckdb.DuckDBPyConnection) -> None:
        for schema in SCHEMAS:
            con.execute(f"create schema if not exists {schema}")
        for statement in all_ddl():  # every table's DDL lives in pipelines/contracts.py
            con.execute(statement)
        self.refresh_lake_views(con)

    def refresh_lake_views(self, con: duckdb.DuckDBPyConnection) -> None:
        for name in LAKE_TABLES:
            c = contract(name)
            files = list((self.lake / name).glob("date=*/ingest=*/*.parquet"))
            if files:
                glob = (self.lake / name / "*" / "*" / "*.parquet").as_posix()
                body = (
                    f"select {', '.join(c.column_names)}, ingested_at, cast(date as date) as partition_date, "
                    f"ingest as ingest_source from read_parquet('{glob}', hive_partitioning = true, "
                    f"hive_types = {{'date': date, 'ingest': varchar}})"
                )
            else:
                cols = ", ".join(f"cast(null as {col.type}) as {col.name}" for col in c.columns)
                body = (
                    f"select {cols}, cast(null as timestamp) as ingested_at, cast(null as date) as partition_date, "
                    "cast(null as varchar) as ingest_source where false"
                )
            con.execute(f"create or replace view {c.table} as {body}")

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
        with self.writer() as con:
            con.execute(
                "delete from ops.check_results where check_name = ? and asset = ? "
                "and partition_date is not distinct from ?",
                [check_name, asset, partition_date],
            )
            con.execute(
                "insert into ops.check_results values (?, ?, ?, ?, ?, ?, ?, ?)",
                [check_name, asset, partition_date, passed, severity, unexpected_count,
                 json.dumps(metadata, default=str, sort_keys=True), dt.datetime.now(dt.UTC).replace(tzinfo=None)],
            )

    # -- partition replacement ---------------------------------------------------------------
    def lake_partition_file(self, table: str, partition_date: dt.date, ingest_source: str) -> Path:
        return self.lake / table / f"date={partition_date.isoformat()}" / f"ingest={ingest_source}" / "part-0.parquet"

    def replace_partition(
        self,
        ingest_source: str,
        partition_date: dt.date,
        tables: dict[str, pl.DataFrame],
        quarantine: pl.DataFrame,
        files_read: int,
        records_read: int,
        records_loaded: int,
        records_quarantined: int | None = None,
        started_at: dt.datetime | None = None,
        notes: list[str] | None = None,
    ) -> IngestReport:
        """Replace everything one ingest source loaded for one day, atomically per store.

        records_quarantined counts input records (a record may yield several quarantine rows);
        it defaults to the number of quarantine rows.

        Lake tables: the new Parquet file is written beside the old and renamed over it, so a
        crash leaves the previous file. Warehouse tables and the quarantine: delete then insert
        in one transaction. Tables this source does not produce are left alone.
        """
        started_at = started_at or dt.datetime.now(dt.UTC).replace(tzinfo=None)
        if records_quarantined is None:
            records_quarantined = quarantine.height
        ingested_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        for name, frame in tables.items():
            if name in LAKE_TABLES:
                self._write_lake_partition(name, partition_date, ingest_source, frame, ingested_at)
        rows_by_table = {name: frame.height for name, frame in tables.items()}
        with self.writer() as con:
            con.execute("begin transaction")
            try:
                for name, frame in tables.items():
                    if name in LAKE_TABLES:
                        continue
                    self._replace_rows(con, contract(name).table, frame, partition_date, ingest_source, ingested_at)
                self._replace_rows(con, "ops.quarantine", quarantine, partition_date, ingest_source, ingested_at)
                con.execute(
                    f"insert into ops.ingest_log ({', '.join(INGEST_LOG_COLUMNS)}) "
                    f"values ({', '.join('?' for _ in INGEST_LOG_COLUMNS)})",
                    [
                        uuid.uuid4().hex,
                        ingest_source,
                        partition_date,
                        files_read,
                        records_read,
                        records_loaded,
                        records_quarantined,
                        json.dumps(rows_by_table, sort_keys=True),
                        started_at,
                        ingested_at,
                        json.dumps(notes) if notes else None,
                    ],
                )
                con.execute("commit")
            except Exception:
                con.execute("rollback")
                raise
            self.refresh_lake_views(con)
        return IngestReport(
            ingest_source=ingest_source,
            partition_date=partition_date,
            files_read=files_read,
            records_read=records_read,
            records_loaded=records_loaded,
            records_quarantined=records_quarantined,
            rows_by_table=rows_by_table,
            notes=list(notes or []),
        )

    def merge_files(
        self, ingest_source: str, partition_date: dt.date, tables: dict[str, pl.DataFrame], source_files: list[str]
    ) -> None:
        """Replace, in one day's partition, only the rows that came from `source_files`.

        For records that carry their own time on another day than the ingest's: a file of one day
        adds its records to the other day without disturbing what that day's own ingest loaded.
        """
        ingested_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        for name, frame in tables.items():
            if name in LAKE_TABLES:
                self._merge_lake_partition(name, partition_date, ingest_source, frame, source_files, ingested_at)
        with self.writer() as con:
            con.execute("begin transaction")
            try:
                for name, frame in tables.items():
                    if name in LAKE_TABLES:
                        continue
                    table = contract(name).table
                    con.execute(
                        f"delete from {table} where partition_date = ? and ingest_source = ? "
                        "and list_contains(?, source_file)",
                        [partition_date, ingest_source, source_files],
                    )
                    self._insert_rows(con, table, frame, partition_date, ingest_source, ingested_at)
                con.execute("commit")
            except Exception:
                con.execute("rollback")
                raise
            self.refresh_lake_views(con)

    def drop_moved_rows(self, ingest_source: str, partition_date: dt.date, tables: list[str], folder: Path) -> None:
        """Delete, from the other days' partitions, the rows an earlier ingest of `partition_date` moved
        there (records of that day's landing files timestamped on another day): re-ingesting a day
        replaces everything its files loaded, wherever it went. Rows are found by source_file, the
        landing path, between `folder/` and `folder0` (min/max statistics prune the lake's files)."""
        low, high = f"{folder.as_posix()}/", f"{folder.as_posix()}0"  # '0' follows '/'
        lake = [t for t in tables if t in LAKE_TABLES]
        for name in lake:
            files = [
                f for f in (self.lake / name).glob(f"date=*/ingest={ingest_source}/part-0.parquet")
                if f.parent.parent.name != f"date={partition_date.isoformat()}"
            ]
            if not files:
                continue
            hit = duckdb.sql(
                "select distinct filename from read_parquet(?, filename = true) where source_file >= ? and source_file < ?",
                params=[[str(f) for f in files], low, high],
            ).fetchall()
            for (filename,) in hit:
                target = Path(filename)
                old = pl.read_parquet(target).with_columns(pl.col(pl.Categorical).cast(pl.String))
                self._write_lake_frame(
                    target, old.filter(~((pl.col("source_file") >= low) & (pl.col("source_file") < high))))
        with self.writer() as con:
            con.execute("begin transaction")
            try:
                for name in tables:
                    if name in LAKE_TABLES:
                        continue
                    con.execute(
                        f"delete from {contract(name).table} where ingest_source = ? and partition_date <> ? "
                        "and source_file >= ? and source_file < ?",
                        [ingest_source, partition_date, low, high],
                    )
                con.execute("commit")
            except Exception:
                con.execute("rollback")
                raise
            if lake:
                self.refresh_lake_views(con)

    def _merge_lake_partition(self, table: str, partition_date: dt.date, ingest_source: str, frame: pl.DataFrame,
                              source_files: list[str], ingested_at: dt.datetime) -> None:
        target = self.lake_partition_file(table, partition_date, ingest_source)
        kept = frame.with_columns(ingested_at=pl.lit(ingested_at, dtype=pl.Datetime("us")))
        if target.exists():
            old = pl.read_parquet(target).with_columns(pl.col(pl.Categorical).cast(pl.String))
            old = old.filter(~pl.col("source_file").is_in(source_files))
            kept = pl.concat([old, kept.select(old.columns)], how="vertical") if old.height else kept
        self._write_lake_frame(target, kept)

    @staticmethod
    def _replace_rows(
        con: duckdb.DuckDBPyConnection,
        table: str,
        frame: pl.DataFrame,
        partition_date: dt.date,
        ingest_source: str,
        ingested_at: dt.datetime,
    ) -> None:
        con.execute(f"delete from {table} where partition_date = ? and ingest_source = ?", [partition_date, ingest_source])
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

    def _write_lake_partition(
        self, table: str, partition_date: dt.date, ingest_source: str, frame: pl.DataFrame, ingested_at: dt.datetime
    ) -> None:
        target = self.lake_partition_file(table, partition_date, ingest_source)
        self._write_lake_frame(target, frame.with_columns(ingested_at=pl.lit(ingested_at, dtype=pl.Datetime("us"))))

    @staticmethod
    def _write_lake_frame(target: Path, frame: pl.DataFrame) -> None:
        """Write beside the old file and rename over it; no rows removes the file."""
        if frame.height == 0:
            target.unlink(missing_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            # Dictionary-encoded strings halve the write time of the highly repetitive label
            # columns; DuckDB reads them back as VARCHAR.
            frame.with_columns(pl.col(pl.String).cast(pl.Categorical)).write_parquet(
                tmp, compression="zstd", statistics=True)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
