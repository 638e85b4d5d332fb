"""Reader files: a small DuckDB database of views, one per table, over one release's Parquet files.

Why: readers (`gpupool sql`, dashboards, the data team's own DuckDB client) open one file read-only
and need no deltalake and no extension. The file holds no data, only views whose file lists come
from the Delta log at the release's versions, so a reader sees exactly one release. It is written
beside the target and renamed over it (`os.replace`): a reader that already opened the old file
keeps the old inode, its catalog and so the old release; every new open gets the new one. Nobody
ever holds a write lock on the file readers open. One caveat for long-lived reader processes: DuckDB
hands a second `duckdb.connect(path)` to a path the process still has open the same database
instance (the old release), while `duckdb.connect()` + `ATTACH path AS r (READ_ONLY)` opens the
file as it is now: long-lived readers (the dashboards) attach.

Delta keeps partition values in its log, not in the files, and its folder names are only a
convention, so the views read with `hive_partitioning = false` and put each partition column back as
a typed constant, one `union all` branch per partition value.
"""
from __future__ import annotations

import os
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from pipelines.lake.releases import Release
from pipelines.lake.tables import DataFile, DeltaStore, LakeError

RELEASE_TABLE = "lake.release"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def duckdb_types(schema: pa.Schema) -> dict[str, str]:
    """Each column's DuckDB type, as DuckDB itself maps the Arrow type (timestamp without zone ->
    TIMESTAMP, with -> TIMESTAMP WITH TIME ZONE, large_string -> VARCHAR, nested types spelled out)."""
    con = duckdb.connect()
    try:
        relation = con.from_arrow(schema.empty_table())
        return {column: str(dtype) for column, dtype in zip(relation.columns, relation.types, strict=True)}
    finally:
        con.close()


def _file_list(files: list[DataFile]) -> str:
    return "[" + ", ".join(_literal(f.path) for f in files) + "]"


def view_sql(schema: pa.Schema, partition_columns: list[str], files: list[DataFile]) -> str:
    """The select of one table version: typed and empty without files, else a read_parquet of its
    files per partition value, partition columns as constants, columns in the table's order."""
    types = duckdb_types(schema)
    if not files:
        columns = ", ".join(f"cast(null as {types[c]}) as {_ident(c)}" for c in schema.names)
        return f"select {columns} where false"
    groups: dict[tuple, list[DataFile]] = defaultdict(list)
    for f in files:
        groups[tuple(f.partition.get(c) for c in partition_columns)].append(f)
    branches = []
    for values, group in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        constants = dict(zip(partition_columns, values, strict=True))
        columns = ", ".join(
            (f"cast({'null' if constants[c] is None else _literal(constants[c])} as {types[c]}) as {_ident(c)}"
             if c in constants else _ident(c))
            for c in schema.names)
        branches.append(f"select {columns} from read_parquet({_file_list(group)}, "
                        "hive_partitioning = false, union_by_name = true)")
    return "\nunion all\n".join(branches)


def publish_reader_file(store: DeltaStore, release: Release, path: Path) -> Path:
    """Write the reader file for `release` at `path`, atomically replacing any older one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    if RELEASE_TABLE in release.tables:
        raise LakeError(f"{RELEASE_TABLE} is reserved for the reader file's own release row")
    try:
        con = duckdb.connect(str(temporary))
        try:
            con.execute("create schema lake")
            con.execute("create table lake.release (release_id bigint not null, created_at timestamp, "
                        "kind varchar, note varchar)")
            con.execute("insert into lake.release values (?, ?, ?, ?)",
                        [release.release_id, release.created_at, release.kind, release.note])
            for name, version in sorted(release.tables.items()):
                schema_name, table_name = name.split(".", 1)
                select = view_sql(store.schema(name, version), store.partition_columns(name, version),
                                  store.data_files(name, version))
                con.execute(f"create schema if not exists {_ident(schema_name)}")
                con.execute(f"create or replace view {_ident(schema_name)}.{_ident(table_name)} as\n{select}")
            con.execute("checkpoint")
        finally:
            con.close()
        os.replace(temporary, path)
    finally:
        for leftover in (temporary, temporary.with_name(temporary.name + ".wal")):
            leftover.unlink(missing_ok=True)
    return path


def release_of(path: Path) -> int:
    """The release id a reader file serves."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        row = con.execute(f"select release_id from {RELEASE_TABLE}").fetchone()
    finally:
        con.close()
    if row is None:
        raise LakeError(f"{path}: no release recorded in {RELEASE_TABLE}")
    return int(row[0])
