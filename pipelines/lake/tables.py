"""Delta tables under one root: `root/<schema>/<table>`, written through delta-rs (`deltalake`).

Why Delta and this shape (docs/architecture.md, "Storage: the lakehouse decision"): a write is one
atomic commit (a new `_delta_log/NNN.json`, created if absent), so readers in other processes see
either the old or the new snapshot, never half of it; writers of different days both commit; a
kill -9 leaves the table at its last commit. Two writers of the same day conflict cleanly
(`CommitFailedError`); the loser re-runs its write, which is correct because the write replaces the
whole day. deltalake is pinned exactly (1.x still changes its API between minors).

Frames come in as Polars; they go out to delta-rs as Arrow. Naive datetimes stay naive (Delta's
`timestamp_ntz`, DuckDB's `TIMESTAMP`), which is how the project stores UTC.

A partition replace is a file swap (`replace_partition`): Polars writes the day's Parquet file (ZSTD,
with statistics) and one commit of delta-rs' transaction API adds it and removes the files it
replaces, faster than delta-rs' own write (bench/README.md, "Figures the code's choices rest on"). A file holding rows of the partition
and of others too (after `compact`) is rewritten by delta-rs' predicate overwrite instead.

The root is a local folder, or an S3-compatible object store (`s3://bucket/prefix`, settings from the
AWS_* environment variables, see `storage_options_from_environment`). On S3, delta-rs commits with a
conditional put (`If-None-Match: *`, no lock service): the store must refuse to overwrite an
existing object, as AWS S3 (since 2024), MinIO and moto do (docs/deploy.md, "Object storage").
"""
from __future__ import annotations

import io
import json
import logging
import os
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlparse

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, WriterProperties, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from allocator.filemodes import READER_DIR_MODE, READER_MODE, create_file, make_dirs, set_mode

# Reader features a table may have and still be read correctly from its list of Parquet files:
# timestamp_ntz only changes a column's type. Deletion vectors (rows deleted outside the files) and
# column mapping (physical column names differ from the logical ones) would make a file list lie.
FILE_LIST_SAFE_READER_FEATURES = frozenset({"timestampNtz"})

# A swap's file as delta-rs wrote them (_writer_properties: ZSTD at parquet-rs' default level, 1), with
# Polars' default statistics (min, max, null count per row group: DuckDB and retention read them).
PARQUET_WRITE = {"compression": "zstd", "compression_level": 1}
DEFAULT_STATS_COLUMNS = 32  # Delta's delta.dataSkippingNumIndexedCols default: columns with file statistics
WRITE_ID_KEY = "gpupool.writeId"  # commit metadata: finds our own commit's version after a swap
COMMIT_SEARCH = 1000  # commits after the read version searched for our own: more writers than that is no race
COMMIT_ATTEMPTS = 8  # same-day conflicts are short; a writer that loses 8 times in a row reports it
BACKOFF_S = 0.05  # first pause; doubles per attempt, with jitter so two losers do not collide again

LAKE_URI_ENV = "GPUPOOL_LAKE_URI"  # an object-store root (s3://bucket/prefix) instead of the home's lake folder
OBJECT_STORE_SCHEMES = ("s3",)  # the only scheme whose settings are read and tested here
# The settings a remote root reads from the environment; delta-rs and Polars take them as they are.
# Credentials left unset fall back to the AWS default chain (instance profile, web identity on Kubernetes).
STORAGE_OPTION_ENV = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                      "AWS_SESSION_TOKEN", "AWS_ALLOW_HTTP")

T = TypeVar("T")
log = logging.getLogger(__name__)


class LakeError(Exception):
    """A lake operation that cannot go ahead; the message says which table and why."""


class AppendRefused(LakeError):
    """Rows that cannot be added to a day as files (PartitionWrite with `append`): nothing was committed."""


class UnreadableByFileList(LakeError):
    """The table uses a Delta feature that a plain list of its Parquet files cannot represent."""


@dataclass(frozen=True)
class DataFile:
    """One Parquet file of a table version, with the partition values Delta keeps in its log (the
    files themselves do not hold partition columns)."""
    path: Path | str  # a local Path, or the file's URI (s3://...) when the table is on object storage
    partition: dict[str, Any]
    rows: int | None
    bounds: tuple[Any, Any] | None = None  # (min, max) of data_files' `bounds_of` column by the log's statistics


def _writer_properties() -> WriterProperties:
    # ZSTD: about 3/4 of the bytes of delta-rs's Snappy default on the demo month, same speed.
    return WriterProperties(compression="ZSTD")


def _for_delta(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame as Delta can store it: Categorical/Enum as String (Delta has no dictionary type),
    datetimes in microseconds (Delta's only precision), time zones left as they are."""
    casts = []
    for column, dtype in frame.schema.items():
        if isinstance(dtype, (pl.Categorical, pl.Enum)):
            casts.append(pl.col(column).cast(pl.String))
        elif isinstance(dtype, pl.Datetime) and dtype.time_unit != "us":
            casts.append(pl.col(column).cast(pl.Datetime("us", dtype.time_zone)))
    return frame.with_columns(casts) if casts else frame


def _to_arrow(frame: pl.DataFrame) -> pa.Table:
    return _for_delta(frame).to_arrow()


def _stat(value: Any) -> Any:
    """A min/max as the Delta log writes it: JSON numbers and strings, ISO dates and times (UTC, 'Z',
    for zoned ones), microseconds kept."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    return value


def _file_stats(footer: pq.FileMetaData, frame: pl.DataFrame, indexed: list[str]) -> str:
    """The add action's statistics of a Parquet file holding `frame`, from the file's own footer (its
    row groups' min, max and null count: no second pass over the rows): row count, null counts, and
    min/max of the `indexed` columns. Readers skip files by them (delta-rs, Polars' scan_delta), so a
    bound is left out rather than wrong: of a float column with NaN or infinities, which Parquet's
    min/max leave out, and of any column a row group has values but no min/max for. Long strings
    keep the writer's truncated bounds (a prefix below, an incremented prefix above), still bounds."""
    floats = [c for c in indexed if frame.schema[c].is_float()]
    odd = frame.select(pl.col(floats).is_finite().not_().any()).row(0, named=True) if floats and frame.height else {}
    position = {footer.schema.column(i).path: i for i in range(footer.num_columns)}
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for column in indexed:
        if column not in position:  # nested: Delta's statistics of its leaves are not written here
            continue
        groups = [footer.row_group(g) for g in range(footer.num_row_groups)]
        stats = [g.column(position[column]).statistics for g in groups]
        if any(st is None or not st.has_null_count for st in stats):
            continue
        nulls[column] = sum(st.null_count for st in stats)
        valued = [(g, st) for g, st in zip(groups, stats, strict=True) if st.null_count < g.num_rows]
        ordered = frame.schema[column].is_integer() or frame.schema[column].is_float() \
            or frame.schema[column] in (pl.String, pl.Date) or isinstance(frame.schema[column], pl.Datetime)
        if not ordered or odd.get(column) or not valued or not all(st.has_min_max for _, st in valued):
            continue
        low[column] = _stat(min(st.min for _, st in valued))
        high[column] = _stat(max(st.max for _, st in valued))
    return json.dumps({"numRecords": footer.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls},
                      separators=(",", ":"))


def _stats_columns(table: DeltaTable, file_columns: list[str]) -> list[str]:
    """The columns a file keeps statistics for, by the table's settings, as delta-rs picks them."""
    configuration = table.metadata().configuration or {}
    if configuration.get("delta.dataSkippingStatsColumns"):
        named = {c.strip().strip("`") for c in configuration["delta.dataSkippingStatsColumns"].split(",")}
        return [c for c in file_columns if c in named]
    count = int(configuration.get("delta.dataSkippingNumIndexedCols", DEFAULT_STATS_COLUMNS))
    return file_columns if count < 0 else file_columns[:count]


def _with_retry(what: str, write: Callable[[], T], attempts: int = COMMIT_ATTEMPTS) -> T:
    """Run `write` until it commits. Only `CommitFailedError` is retried: it means another writer
    committed first and delta-rs found the two commits conflict; `write` must be safe to re-run
    (every caller here replaces, or appends exactly once per successful commit)."""
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except CommitFailedError as error:
            if attempt == attempts:
                raise LakeError(f"{what}: still conflicting after {attempts} attempts: {error}") from error
            log.info("%s: commit conflict (attempt %d of %d), retrying: %s", what, attempt, attempts, error)
            time.sleep(BACKOFF_S * 2 ** (attempt - 1) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def _split(name: str) -> tuple[str, str]:
    schema, dot, table = name.partition(".")
    if not dot or not schema or not table or "." in table or "/" in name or "\\" in name:
        raise LakeError(f"table name {name!r}: expected 'schema.table'")
    return schema, table


def _local_path(table_dir: Path, uri: str) -> Path:
    """An add action's path as a local absolute path: relative paths are percent-encoded under the table."""
    if "://" in uri:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise LakeError(f"{uri}: a file of the local table {table_dir} is not a local file")
        return Path(unquote(parsed.path))
    return table_dir / unquote(uri)


def _remote_path(table_uri: str, uri: str) -> str:
    """An add action's path as the object's URI: relative paths are percent-encoded under the table."""
    if "://" in uri:
        if urlparse(uri).scheme != urlparse(table_uri).scheme:
            raise LakeError(f"{uri}: a file of {table_uri} on another storage")
        return uri
    return f"{table_uri}/{unquote(uri)}"


def is_object_store_uri(root: Path | str) -> bool:
    return isinstance(root, str) and "://" in root


def storage_options_from_environment() -> dict[str, str]:
    """The object-store settings (STORAGE_OPTION_ENV) that are set in the environment."""
    return {key: os.environ[key] for key in STORAGE_OPTION_ENV if os.environ.get(key)}


def _s3_filesystem(options: dict[str, str]) -> pafs.S3FileSystem:
    """The same store as pyarrow sees it (delta-rs lists no folders, and its file handler writes no
    bytes from Python): to find the tables under a root, and to put a swap's new file."""
    return pafs.S3FileSystem(
        access_key=options.get("AWS_ACCESS_KEY_ID"), secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
        session_token=options.get("AWS_SESSION_TOKEN"), region=options.get("AWS_REGION"),
        endpoint_override=options.get("AWS_ENDPOINT_URL"))


def _not_a_file_list(table: DeltaTable) -> str | None:
    """Why the table's Parquet files are not exactly its rows (a Delta feature), or None."""
    extra = set(table.protocol().reader_features or []) - FILE_LIST_SAFE_READER_FEATURES
    mapping = (table.metadata().configuration or {}).get("delta.columnMapping.mode", "none")
    if extra or mapping not in (None, "none"):
        return f"reader features {sorted(extra)}" if extra else f"column mapping mode {mapping!r}"
    return None


def _appendable(table: DeltaTable, frame: pl.DataFrame, day_column: str) -> bool:
    """Whether files of `frame`'s rows can join the table as they are: partitioned by the day alone,
    its files its rows, the same schema."""
    if list(table.metadata().partition_columns) != [day_column] or _not_a_file_list(table):
        return False
    try:
        schema = DeltaSchema.from_arrow(frame.head(0).to_arrow().schema)
    except Exception:  # noqa: BLE001 - a type Delta stores only after delta-rs converts it (a zone other than UTC)
        return False
    return schema.to_json() == table.schema().to_json()


def _swap_removals(table: DeltaTable, frame: pl.DataFrame, day_column: str, day: date,
                   where: dict[str, str]) -> list[RemoveAction] | None:
    """The remove actions that replace the day's rows matching `where` by a file swap: every file of
    the day when `where` is empty, else the day's files whose statistics say each `where` column holds
    that value only. None when a swap cannot do it and delta-rs' predicate overwrite must: a file with
    those rows and others (or without statistics), a table not partitioned by the day alone, whose
    files are not its rows, or whose schema is not the frame's (delta-rs then reports the mismatch)."""
    if not _appendable(table, frame, day_column):
        return None
    files = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    removals = []
    now_ms = int(time.time() * 1000)
    for f in files:
        if f.get(f"partition.{day_column}") != day:
            continue
        matches = [_holds_only(f, column, value) for column, value in where.items()]
        if None in matches:
            return None
        if all(matches):
            removals.append(RemoveAction(f["path"], True, now_ms, f["size_bytes"], {day_column: day.isoformat()}))
    return removals


def _holds_only(add: dict[str, Any], column: str, value: str) -> bool | None:
    """Whether a file's rows all have `column` == value (True), none has (False), or its statistics
    cannot tell (None)."""
    low, high, nulls, rows = (add.get(f"min.{column}"), add.get(f"max.{column}"), add.get(f"null_count.{column}"),
                              add.get("num_records"))
    if rows is None or nulls is None:
        return None
    if nulls == rows:
        return False
    if not isinstance(low, str) or not isinstance(high, str):
        return None
    if not low <= value <= high:
        return False
    if nulls == 0 and low == high == value:
        return True
    return None


_LOG_ENTRY = re.compile(r"^(\d{20})\.(?:json|checkpoint(?:\.\d+\.\d+)?\.parquet)$")


def latest_local_version(folder: Path) -> int | None:
    """The latest version committed to the Delta table in `folder` (None: no table there): the
    highest commit or checkpoint in its `_delta_log`. A commit file appears whole (delta-rs renames
    it into place), and log clean-up keeps the latest, so this is what DeltaTable.version() says."""
    try:
        names = os.listdir(folder / "_delta_log")
    except (FileNotFoundError, NotADirectoryError):
        return None
    versions = [int(m.group(1)) for name in names if (m := _LOG_ENTRY.match(name))]
    return max(versions) if versions else None


def _bounds(action: dict, column: str | None) -> tuple[Any, Any] | None:
    if column is None:
        return None
    low, high = action.get(f"min.{column}"), action.get(f"max.{column}")
    return None if low is None or high is None else (low, high)


class DeltaStore:
    """The lake's tables, `root/<schema>/<table>`, each a Delta table (a folder or an object-store
    prefix, no catalog). `root` is a local folder, or a URI such as `s3://bucket/prefix`; a remote
    root takes `storage_options` (delta-rs' keys), by default from the environment."""

    def __init__(self, root: Path | str, storage_options: dict[str, str] | None = None) -> None:
        self.remote = is_object_store_uri(root)
        if self.remote:
            scheme = urlparse(str(root)).scheme
            if scheme not in OBJECT_STORE_SCHEMES:
                raise LakeError(f"lake root {root}: object storage is supported as "
                                f"{', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)} only")
            self.root: Path | str = str(root).rstrip("/")
            self.storage_options = (storage_options_from_environment() if storage_options is None
                                    else dict(storage_options))
        else:
            self.root = Path(root).resolve()
            self.storage_options = None  # local tables: delta-rs called exactly as before

    @classmethod
    def from_environment(cls, default_root: Path) -> DeltaStore:
        """The store at GPUPOOL_LAKE_URI when it is set (object storage), else at `default_root`."""
        return cls(os.environ.get(LAKE_URI_ENV) or default_root)

    # ------------------------------------------------------------------ naming
    def path(self, name: str) -> Path:
        """The local folder of a table; a remote table has a URI instead (`location`)."""
        if self.remote:
            raise LakeError(f"{name} is on object storage ({self.root}): use DeltaStore.location, not path")
        schema, table = _split(name)
        return self.root / schema / table

    def location(self, name: str) -> str:
        """Where the table is, as delta-rs and Polars take it: a local path or an s3:// URI."""
        if self.remote:
            schema, table = _split(name)
            return f"{self.root}/{schema}/{table}"
        return str(self.path(name))

    def exists(self, name: str) -> bool:
        return DeltaTable.is_deltatable(self.location(name), storage_options=self.storage_options)

    def tables(self) -> list[str]:
        """Every table under the root, as 'schema.table', sorted."""
        if self.remote:
            return self._remote_tables()
        if not self.root.exists():
            return []
        return sorted(f"{p.parent.name}.{p.name}" for p in self.root.glob("*/*") if (p / "_delta_log").is_dir())

    def _remote_tables(self) -> list[str]:
        fs = _s3_filesystem(self.storage_options)
        root = str(self.root).split("://", 1)[1]

        def folders(prefix: str) -> list[str]:
            found = fs.get_file_info(pafs.FileSelector(prefix, allow_not_found=True))
            return [f.base_name for f in found if f.type == pafs.FileType.Directory]

        return sorted(f"{schema}.{table}" for schema in folders(root) for table in folders(f"{root}/{schema}")
                      if "_delta_log" in folders(f"{root}/{schema}/{table}"))

    def _table(self, name: str, version: int | None = None) -> DeltaTable:
        if not self.exists(name):
            raise LakeError(f"table {name} does not exist under {self.root}")
        return DeltaTable(self.location(name), version=version, storage_options=self.storage_options)

    # ------------------------------------------------------------------ writes
    def _make_parent(self, name: str) -> None:
        if not self.remote:  # an object store has no folders to create
            make_dirs(self.path(name).parent, READER_DIR_MODE)

    def _settle_modes(self, name: str, version: int) -> int:
        """Give what the commit of `version` wrote (its log file, its data files and their folders, a
        checkpoint) the readers' modes (allocator/filemodes.py): delta-rs creates them 0666 less the
        umask, which the entry points tighten but a library caller may not. Returns `version`."""
        if self.remote:
            return version
        table_dir = self.path(name)
        log_dir = table_dir / "_delta_log"
        commit = log_dir / f"{version:020d}.json"
        for folder in (table_dir, log_dir):
            make_dirs(folder, READER_DIR_MODE, tighten=True)  # delta-rs may have made them
        for line in commit.read_text().splitlines() if commit.exists() else []:
            add = json.loads(line).get("add") if line.strip() else None
            if add:
                data = _local_path(table_dir, add["path"])
                make_dirs(data.parent, READER_DIR_MODE, tighten=True)
                set_mode(data, READER_MODE)
        for written in (commit, log_dir / "_last_checkpoint", log_dir / f"{version:020d}.checkpoint.parquet"):
            if written.exists():
                set_mode(written, READER_MODE)
        return version

    def _create_if_missing(self, name: str, data: pa.Table, partition_by: list[str] | None) -> None:
        """Create the table empty (version 0, no files) so every data write is an ordinary commit
        that delta-rs can check for conflicts. A predicate overwrite needs an existing table, and two
        first writers must not both 'create': the loser finds the table there and carries on."""
        if self.exists(name):
            return
        self._make_parent(name)
        try:
            write_deltalake(self.location(name), data.slice(0, 0), mode="ignore", partition_by=partition_by,
                            writer_properties=_writer_properties(), storage_options=self.storage_options)
        except Exception:
            if not self.exists(name):
                raise
        else:
            self._settle_modes(name, 0)

    def _commit(self, name: str, data: pa.Table, **options: Any) -> int:
        """One write, as one commit; returns the version this commit created. The table is loaded
        fresh for every attempt (its version is what delta-rs checks conflicts against), and after
        the write the object holds our own commit's version, not a later writer's."""
        target: DeltaTable | str = (DeltaTable(self.location(name), storage_options=self.storage_options)
                                     if self.exists(name) else self.location(name))
        write_deltalake(target, data, writer_properties=_writer_properties(),
                        storage_options=self.storage_options, **options)
        version = target.version() if isinstance(target, DeltaTable) else self._table(name).version()
        return self._settle_modes(name, version)

    def replace_partition(self, name: str, day: date, frame: pl.DataFrame, day_column: str,
                          where: dict[str, str] | None = None) -> int:
        """Replace one day of a table, partitioned by `day_column`, in one Delta commit; returns the
        new version. Re-running a day is idempotent. Every row of `frame` must be on `day` (else the
        commit would delete that day and add rows of another). `where` narrows the replaced rows to
        those of the day whose (string) columns equal these values, e.g. one ingest source's rows:
        the day's other rows stay, and two writers of one day conflict and retry.

        The commit is a file swap (the module's docstring): the new file is written once, and each
        attempt removes the files that the table's latest version holds for these rows. A day too
        large to hold at once goes through `partition_write` instead, a slice at a time."""
        write = self.partition_write(name, day, day_column, where)
        write.add(frame, now=False)
        return write.commit()

    def partition_write(self, name: str, day: date, day_column: str,
                        where: dict[str, str] | None = None, append: bool = False) -> PartitionWrite:
        """A `replace_partition` of the day given in slices (PartitionWrite.add), committed once; with
        `append`, the slices are added to the day's rows instead of replacing them."""
        return PartitionWrite(self, name, day, day_column, dict(where or {}), append)

    def partition_rows(self, name: str, day: date, day_column: str, where: dict[str, str]) -> int | None:
        """The rows the latest version holds on `day` whose `where` columns hold those values, by the
        log's statistics (no file is read); None when the statistics cannot tell (a file with those rows
        and others, or without statistics). 0 for a table not made yet."""
        if not self.exists(name):
            return 0
        table = self._table(name)
        if list(table.metadata().partition_columns) != [day_column]:
            return None
        rows = 0
        for f in pa.table(table.get_add_actions(flatten=True)).to_pylist():
            if f.get(f"partition.{day_column}") != day:
                continue
            matches = [_holds_only(f, column, value) for column, value in where.items()]
            if None in matches:
                return None
            rows += f["num_records"] if all(matches) else 0
        return rows

    def _write_file(self, name: str, table: DeltaTable, frame: pl.DataFrame, day_column: str, day: date) -> AddAction:
        """Write the day's rows as one Parquet file in the table (not yet in any version) and return its
        add action. The partition column stays out of the file: Delta keeps it in the log."""
        folder = f"{day_column}={day.isoformat()}"
        relative = f"{folder}/part-00000-{uuid.uuid4()}-c000.zstd.parquet"
        rows = frame.drop(day_column)
        if self.remote:
            buffer = io.BytesIO()
            rows.write_parquet(buffer, **PARQUET_WRITE)
            key = f"{self.location(name).split('://', 1)[1]}/{relative}"
            with _s3_filesystem(self.storage_options).open_output_stream(key) as out:
                out.write(buffer.getbuffer())
            size = buffer.tell()
            footer = pq.read_metadata(pa.BufferReader(buffer.getbuffer()))
        else:
            path = self.path(name) / relative
            make_dirs(path.parent, READER_DIR_MODE)
            create_file(path, READER_MODE)  # readers' mode before any byte; Polars fills it
            rows.write_parquet(path, **PARQUET_WRITE)
            size = path.stat().st_size
            footer = pq.read_metadata(path)
        return AddAction(path=quote(relative, safe="/="), size=size, partition_values={day_column: day.isoformat()},
                         modification_time=int(time.time() * 1000), data_change=True,
                         stats=_file_stats(footer, rows, _stats_columns(table, rows.columns)))

    def _commit_actions(self, name: str, table: DeltaTable, actions: list[AddAction | RemoveAction],
                        partition_by: list[str], replaced: dict[str, str]) -> int:
        """Commit the actions in one version on top of the version `table` read; returns that version.
        delta-rs checks the commit against those committed meanwhile, but a plain transaction names no
        partition it read: two writers of one empty partition would both add. Each commit therefore
        records an application transaction named after the replaced rows; the second of two such
        commits is refused (CommitFailedError) and re-run. Naming no rows read also makes any commit
        that removed files meanwhile a conflict: re-ingests of two days retry one another (the commit
        only: the file is not written again)."""
        write_id = uuid.uuid4().hex
        app_id = "gpupool.replace:" + ",".join(f"{column}={value}" for column, value in replaced.items())
        now_ms = int(time.time() * 1000)
        read = table.version()
        table.create_write_transaction(
            actions, mode="append", schema=table.schema(), partition_by=partition_by,
            commit_properties=CommitProperties(custom_metadata={WRITE_ID_KEY: write_id},
                                               app_transactions=[Transaction(app_id, now_ms, now_ms)]))
        return self._settle_modes(name, self._version_of_write(name, read + 1, write_id))

    def _version_of_write(self, name: str, first: int, write_id: str) -> int:
        """The version whose commit carries `write_id`, searched from `first` on in the log's commit
        files themselves: `create_write_transaction` returns no version, and delta-rs' history() gave
        a commit its neighbour's version while two writers committed (tests/lake/test_object_storage.py)."""
        for version in range(first, first + COMMIT_SEARCH):
            log = f"_delta_log/{version:020d}.json"
            try:
                if self.remote:
                    key = f"{self.location(name).split('://', 1)[1]}/{log}"
                    with _s3_filesystem(self.storage_options).open_input_stream(key) as stream:
                        text = stream.read().decode()
                else:
                    text = (self.path(name) / log).read_text()
            except FileNotFoundError:
                break
            if write_id in text:
                return version
        raise LakeError(f"{name}: write {write_id} committed, but no commit from version {first} on carries it")

    def replace_table(self, name: str, frame: pl.DataFrame, partition_by: list[str] | None = None) -> int:
        """Replace the whole table (its schema too: a rebuilt mart may gain a column) in one commit."""
        data = _to_arrow(frame)
        self._make_parent(name)

        def write() -> int:
            return self._commit(name, data, mode="overwrite", schema_mode="overwrite", partition_by=partition_by)

        return _with_retry(f"{name} replace", write)

    def append(self, name: str, frame: pl.DataFrame, partition_by: list[str] | None = None) -> int:
        """Append rows in one commit (streams, logs). A failed commit added nothing, so a retry
        appends exactly once."""
        data = _to_arrow(frame)
        self._create_if_missing(name, data, partition_by)

        def write() -> int:
            return self._commit(name, data, mode="append", partition_by=partition_by)

        return _with_retry(f"{name} append", write)

    # ------------------------------------------------------------------ reads
    def version(self, name: str) -> int | None:
        """The table's latest committed version, or None when it does not exist yet. A local table's
        is read from its log folder's file names: every writer opens the views' versions, and
        opening the table replays its log (about 14 ms a table at 120 days, bench/README.md)."""
        if not self.remote:
            return latest_local_version(self.path(name))
        return self._table(name).version() if self.exists(name) else None

    def check_readable_by_files(self, name: str, version: int | None = None) -> None:
        """Raise UnreadableByFileList unless the version's Parquet files are exactly its rows."""
        table = self._table(name, version)
        why = _not_a_file_list(table)
        if why:
            raise UnreadableByFileList(
                f"{name} (version {table.version()}) uses {why}: its Parquet files alone are not the "
                "table, so it cannot be published as a file list")

    def data_files(self, name: str, version: int | None = None, bounds_of: str | None = None) -> list[DataFile]:
        """That version's Parquet files with their partition values (from the Delta log), and with
        `bounds_of`, each file's min and max of that column as the log's statistics say (None where a
        file has none)."""
        self.check_readable_by_files(name, version)
        table = self._table(name, version)
        location = self.location(name)
        partition_columns = list(table.metadata().partition_columns)
        actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        return [DataFile(path=_remote_path(location, row["path"]) if self.remote
                         else _local_path(self.path(name), row["path"]),
                         partition={c: row.get(f"partition.{c}") for c in partition_columns},
                         rows=row.get("num_records"),
                         bounds=_bounds(row, bounds_of))
                for row in sorted(actions, key=lambda r: r["path"])]

    def files(self, name: str, version: int | None = None) -> list[str]:
        """Absolute local paths (URIs for a remote table) of that version's Parquet files. Partition
        columns are not inside the files (Delta keeps them in the log): see data_files for them."""
        return [str(f.path) for f in self.data_files(name, version)]

    def partition_columns(self, name: str, version: int | None = None) -> list[str]:
        return list(self._table(name, version).metadata().partition_columns)

    def schema(self, name: str, version: int | None = None) -> pa.Schema:
        """The table's logical schema as Arrow (partition columns included, in table order)."""
        return pa.schema(self._table(name, version).schema().to_arrow())

    def read(self, name: str, version: int | None = None) -> pl.DataFrame:
        """The whole version as a Polars frame (tests, small tables; readers go through DuckDB)."""
        return pl.read_delta(self.location(name), version=version, storage_options=self.storage_options)

    def scan(self, name: str, version: int | None = None) -> pl.LazyFrame:
        """The version as a lazy Polars frame (filters pushed down to the partitions)."""
        return pl.scan_delta(self.location(name), version=version, storage_options=self.storage_options)

    # ------------------------------------------------------------------ maintenance
    def vacuum(self, retention_hours: int, keep_versions: dict[str, Iterable[int]] | None = None,
               dry_run: bool = False) -> dict[str, list[str]]:
        """Delete files no version younger than `retention_hours` needs, in every table; returns the
        removed files per table (with `dry_run`, those it would remove, deleting nothing). Published
        releases list Parquet files of a version: keep the retention longer than the longest query,
        and pass the versions of releases still kept in `keep_versions` ({"schema.table": [version, ...]})."""
        keep_versions = keep_versions or {}
        removed = {}
        for name in self.tables():
            keep = sorted(set(keep_versions.get(name, ())))
            removed[name] = self._table(name).vacuum(
                retention_hours=retention_hours, dry_run=dry_run, enforce_retention_duration=False,
                keep_versions=keep or None)
        return removed

    def compact(self, name: str) -> dict[str, Any]:
        """Merge small files (appends, streams) into fewer, in one commit; returns delta-rs's metrics.
        A no-op for day partitions that are already one file each."""
        metrics = _with_retry(f"{name} compact",
                              lambda: self._table(name).optimize.compact(writer_properties=_writer_properties()))
        self._settle_modes(name, self._table(name).version())
        return metrics


class PartitionWrite:
    """One day's replacement (DeltaStore.replace_partition) given a slice at a time: each `add` writes
    its rows as a Parquet file of the table that no version holds yet, `commit` adds them all and
    removes the files they replace, in one Delta commit (with `append`, removes nothing: the rows join
    the day's). The memory is a slice's, whatever the day's size. Files of a write never committed (a crash, a rejected file's slices dropped by `rollback`,
    a commit overwriting by predicate) stay unreferenced until vacuum, as delta-rs' own writes left."""

    def __init__(self, store: DeltaStore, name: str, day: date, day_column: str, where: dict[str, str],
                 append: bool = False) -> None:
        self.store, self.name, self.day, self.day_column, self.where = store, name, day, day_column, where
        self.append = append
        self.files: list[tuple[AddAction, int]] = []  # written, with their row counts
        self._pending: pl.DataFrame | None = None  # a slice kept to be written only if a swap can commit it
        self._empty: pl.DataFrame | None = None  # the first slice's columns and types, as Delta stores them
        self._table: DeltaTable | None = None

    @property
    def rows(self) -> int:
        return sum(rows for _, rows in self.files) + (self._pending.height if self._pending is not None else 0)

    def add(self, frame: pl.DataFrame, now: bool = True) -> None:
        """Write the slice's rows (every one on the day, matching `where`) as a file of the table. With
        `now` False the slice is kept and written by the commit, and only when a file swap can commit it."""
        name, day_column = self.name, self.day_column
        if day_column not in frame.columns:
            raise LakeError(f"{name}: the frame has no day column {day_column!r}")
        values = frame.get_column(day_column)
        if values.dtype != pl.Date:
            raise LakeError(f"{name}.{day_column}: expected a Date column, got {values.dtype}")
        if frame.height and (values.null_count() or (values != self.day).any()):
            raise LakeError(f"{name}: rows outside {self.day.isoformat()} in {day_column!r}; "
                            "replace_partition writes exactly one day")
        for column, value in self.where.items():
            if column not in frame.columns:
                raise LakeError(f"{name}: the frame has no column {column!r} named in `where`")
            if frame.height and (frame.get_column(column).cast(pl.String) != value).fill_null(True).any():
                raise LakeError(f"{name}: rows with {column} other than {value!r}; they would not be replaced")
        frame = _for_delta(frame)
        if self._empty is None:
            self._empty = frame.head(0)
            self.store._create_if_missing(name, self._empty.to_arrow(), [day_column])
        elif frame.schema != self._empty.schema:
            raise LakeError(f"{name}: a slice's columns {dict(frame.schema)} differ from the first slice's "
                            f"{dict(self._empty.schema)}; every slice of a day must have the same")
        if self._pending is not None:
            raise LakeError(f"{name}: a slice kept for the commit must be the write's only one")
        if not now:
            self._pending = frame
        elif frame.height:
            self.files.append((self.store._write_file(name, self._table_for_stats(), frame, day_column, self.day),
                               frame.height))

    def mark(self) -> int:
        """A point to `rollback` to: the slices written so far."""
        return len(self.files)

    def rollback(self, mark: int) -> None:
        """Leave out of the commit the slices written after `mark` (their files stay unreferenced)."""
        del self.files[mark:]

    def commit(self) -> int:
        """Swap the written files in for the day's rows (`where`) in one commit (or add them, with
        `append`); returns the new version. Retried on conflict without writing a file again."""
        if self._empty is None:
            raise LakeError(f"{self.name}: nothing added to the write of {self.day.isoformat()}; "
                            "add at least an empty frame (it gives the table's columns)")
        replaced = {self.day_column: self.day.isoformat(), **self.where}

        def write() -> int:
            table = DeltaTable(self.store.location(self.name), storage_options=self.store.storage_options)
            if self.append:
                removals: list[RemoveAction] | None = []
                if not _appendable(table, self._empty, self.day_column):
                    raise AppendRefused(f"{self.name}: the rows cannot be added to {self.day.isoformat()} as files "
                                        "(the table's schema or layout differs): replace the day instead")
            else:
                removals = _swap_removals(table, self._empty, self.day_column, self.day, self.where)
            if removals is None:
                predicate = " and ".join(f"\"{column}\" = '{str(value).replace(chr(39), chr(39) * 2)}'"
                                         for column, value in replaced.items())
                return self.store._commit(self.name, self._all_rows().to_arrow(), mode="overwrite",
                                          predicate=predicate, partition_by=[self.day_column])
            if self._pending is not None:
                if self._pending.height:
                    self.files.append((self.store._write_file(self.name, table, self._pending, self.day_column,
                                                              self.day), self._pending.height))
                self._pending = None
            return self.store._commit_actions(self.name, table, [*(a for a, _ in self.files), *removals],
                                              [self.day_column], replaced)

        return _with_retry(f"{self.name} day {self.day.isoformat()}", write)

    def _table_for_stats(self) -> DeltaTable:
        # the table's settings name the columns a file keeps statistics for: read once per write
        if self._table is None:
            self._table = DeltaTable(self.store.location(self.name), storage_options=self.store.storage_options)
        return self._table

    def _all_rows(self) -> pl.DataFrame:
        """Every row added, in one frame, for delta-rs' predicate overwrite (a swap cannot replace the
        day's rows: see _swap_removals): the files written are read back."""
        assert self._empty is not None
        frames = [self._pending] if self._pending is not None else []
        if self.files:
            root = self.store.location(self.name)
            paths = [f"{root}/{unquote(a.path)}" for a, _ in self.files]
            read = pl.read_parquet(paths, storage_options=self.store.storage_options or None)
            frames.insert(0, read.with_columns(pl.lit(self.day, dtype=pl.Date).alias(self.day_column))
                          .select(self._empty.columns).cast(dict(self._empty.schema)))
        return pl.concat(frames, how="vertical") if frames else self._empty
