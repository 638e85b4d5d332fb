"""Delta tables as DuckDB views: one table version as a select over its Parquet files.

Why: readers (`gpupool sql`, dashboards, the data team's own DuckDB client) open a published DuckDB
file read-only and need no deltalake and no extension; the lake's tables are views in it whose file
lists come from the Delta log at one version, so a release reads exactly the version it recorded
(Warehouse.publish). One caveat for long-lived reader processes: DuckDB hands a second
`duckdb.connect(path)` to a path the process still has open the same database instance (the old
release); close it, or ATTACH the file, to see a newer one.

A local lake's files are named relative to the home (`home_relative`), and every connection gpupool
opens searches the home for them (`search_config`, DuckDB's file_search_path): a release reads the
lake of the home it is opened in, so a home moved, or restored from a backup into another folder,
reads all its releases, pinned ones included. Another DuckDB client opens a release from the home's
folder, or sets `file_search_path` to it first. A lake on object storage keeps its URIs.

Delta keeps partition values in its log, not in the files, and its folder names are only a
convention, so the views read with `hive_partitioning = false` and put each partition column back as
a typed constant, one `union all` branch per partition value.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from pipelines.lake.tables import DataFile, LakeError

RELEASE_TABLE = "lake.release"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def duckdb_types(schema: pa.Schema) -> dict[str, str]:
    """Each column's DuckDB type, as DuckDB itself maps the Arrow type (timestamp without zone ->
    TIMESTAMP, with -> TIMESTAMP WITH TIME ZONE, large_string -> VARCHAR, nested types spelled out)."""
    return dict(_duckdb_types(schema))


@functools.lru_cache(maxsize=64)
def _duckdb_types(schema: pa.Schema) -> dict[str, str]:
    # kept per schema: a DuckDB instance of its own costs about 35 ms, and an ingest re-points a lake
    # table's view after each of its commits, always with the same few schemas
    con = duckdb.connect()
    try:
        relation = con.from_arrow(schema.empty_table())
        return {column: str(dtype) for column, dtype in zip(relation.columns, relation.types, strict=True)}
    finally:
        con.close()


def search_config(home: Path) -> dict[str, str]:
    """The duckdb.connect config under which a home's views find its lake files (`home_relative`)."""
    folder = str(Path(home).resolve())
    if "," in folder:  # DuckDB's file_search_path is a comma-separated list of folders
        raise LakeError(f"the gpupool home {folder} has a comma in its path, which DuckDB cannot search: "
                        "move it to a folder whose path has none")
    return {"file_search_path": folder}


def home_relative(files: list[DataFile], home: Path) -> list[DataFile]:
    """The files with local paths under `home` named relative to it (what `view_sql` writes into a
    release, found through `search_config`); URIs and paths elsewhere stay as they are."""
    root = Path(home).absolute()  # the store's paths are built on the same home path: no resolve per file
    return [dataclasses.replace(f, path=Path(os.path.relpath(f.path.absolute(), root)))
            if isinstance(f.path, Path) and f.path.absolute().is_relative_to(root) else f
            for f in files]


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


def release_read(con: duckdb.DuckDBPyConnection) -> int:
    """The id of the release a connection reads (every published warehouse file records its own)."""
    rows = con.execute(f"select release_id from {RELEASE_TABLE}").fetchall()  # whole: the connection stays usable
    if not rows:
        raise LakeError(f"no release recorded in {RELEASE_TABLE}")
    return int(rows[0][0])
