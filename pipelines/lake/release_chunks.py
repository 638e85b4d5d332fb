"""A release written from the writers' file without copying it: its tables' rows as Parquet chunks that a
publish writes only when they changed (issue 30, docs/architecture.md "Releases").

A release used to be a copy of the writers' DuckDB file, so every publish wrote the whole history of
the job- and allocation-keyed marts and raw tables. Now a publish makes a new DuckDB file with the
writers' schemas, views and small tables (`copy from database ... (schema)`), and each other table
becomes a view over Parquet chunks: one chunk per month of the table's first date or timestamp column
(a table without one is one chunk), named by its rows' digest (their count and the sum of their
hashes) and the table's columns. A chunk whose file an earlier publish already wrote is reused, so
a day's publish writes the months the day's build changed, whatever the history. Chunks lie under
<home>/lake/marts/releases/, named relative to the home (DuckDB's file_search_path, as the day files);
the release lists them in RELEASE_CHUNKS, and `gpupool maintain` deletes a chunk once no kept release
lists it (pipelines/lake/mart_files.py `sweep`).

The views cast each column back to its type, so a release answers as the copied file did; a table
holding a type Parquet does not keep (an INTERVAL, a HUGEINT beyond 2^53) stays a table in the release
file.
"""
from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb

from allocator.filemodes import READER_DIR_MODE, READER_MODE, make_dirs
from pipelines.lake.mart_files import MARTS_FOLDER, RELEASE_CHUNKS
from pipelines.lake.reader import search_config

CHUNKS_FOLDER = MARTS_FOLDER / "releases"  # relative to the home
# kept as tables: the bookkeeping the publish and the maintenance read, the catalog (metrics.pooling_scorecard
# finds metrics.catalog among duckdb_tables()) and the seeds; small, and they do not grow with history
COPIED_SCHEMAS = ("ops", "lake", "metrics", "seeds")
NO_CHUNK = "all"  # the one chunk of a table without a date column
# the types a Parquet file gives back as they were (a DECIMAL and a list of these too); a HUGEINT (a sum()
# of integers) is written as a DOUBLE, exact while its values stay within 2^53, which write_release checks
KEPT_TYPES = re.compile(r"^(VARCHAR|DOUBLE|FLOAT|HUGEINT|BIGINT|INTEGER|SMALLINT|TINYINT|BOOLEAN|DATE|TIMESTAMP|"
                        r"DECIMAL\(\d+,\d+\))(\[\])*$")
EXACT_IN_DOUBLE = 2**53
DATE_TYPES = ("DATE", "TIMESTAMP")
T = TypeVar("T")


def chunks_dir(home: Path) -> Path:
    return Path(home) / CHUNKS_FOLDER


def write_release(writer_path: Path, target: Path, home: Path,
                  finish: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
    """Write the release file `target` from the writers' file (not open for writing: the caller holds the
    writers' lock), reusing every chunk already written with the same rows. `finish(con)` adds what the
    release says of itself, in the same transaction (the release is database `r` of `con`); its result
    is returned."""
    home = Path(home)
    con = duckdb.connect(config=search_config(home))
    try:
        con.execute(f"attach '{_sql_text(writer_path)}' as w (read_only)")
        con.execute(f"attach '{_sql_text(target)}' as r")
        con.execute("begin")  # one commit for the whole file: a commit per table's view cost more than its digest
        con.execute("copy from database w to r (schema)")
        con.execute(f"create table r.{RELEASE_CHUNKS} (table_name varchar not null, chunk varchar not null, "
                    "rows bigint not null, path varchar not null)")
        listed: list[tuple[str, str, int, str]] = []
        tables = con.execute(
                "select schema_name, table_name, list(column_name order by column_index), "
                "list(data_type order by column_index) from duckdb_columns() c join duckdb_tables() t "
                "using (database_name, schema_name, table_name) where database_name = 'w' "
                # no row ever stored (it counts deleted rows until a checkpoint drops them): copied as it is
                "and t.estimated_size > 0 group by all order by all").fetchall()
        chunked = []
        for schema, table, names, types in tables:
            columns = list(zip(names, types, strict=True))
            name = f'"{schema}"."{table}"'
            if schema in COPIED_SCHEMAS or not _kept_by_parquet(con, name, columns):
                con.execute(f"insert into r.{name} select * from w.{name}")
            else:
                chunked.append((schema, table, columns))
        digests = _digests(con, chunked)
        for schema, table, columns in chunked:
            _chunk_table(con, home, schema, table, columns, listed, digests.get((schema, table), []))
        # one statement for the list: a statement per chunk cost more than the chunks' digests
        con.execute(f"insert into r.{RELEASE_CHUNKS} select unnest(?), unnest(?), unnest(?), unnest(?)",
                    [list(column) for column in zip(*listed, strict=True)] if listed else [[], [], [], []])
        finished = finish(con)
        con.execute("commit")
        con.execute("checkpoint r")
    finally:
        con.close()
    target.chmod(READER_MODE)
    return finished


def _kept_by_parquet(con: duckdb.DuckDBPyConnection, name: str, columns: list[tuple[str, str]]) -> bool:
    if not all(KEPT_TYPES.match(t) for _, t in columns):
        return False
    wide = [c for c, t in columns if t == "HUGEINT"]
    return not wide or con.execute("select " + " and ".join(f'coalesce(max(abs("{c}")) <= {EXACT_IN_DOUBLE}, true)'
                                                            for c in wide) + f" from w.{name}").fetchone()[0]


def _month(columns: list[tuple[str, str]]) -> tuple[str | None, str]:
    date_column = next((c for c, t in columns if t in DATE_TYPES), None)
    return date_column, f"date_trunc('month', \"{date_column}\")" if date_column else "null"


def _digests(con: duckdb.DuckDBPyConnection, chunked: list[tuple[str, str, list[tuple[str, str]]]]) -> dict:
    """(schema, table) -> [(month, rows, digest)] of every chunked table, in one query: DuckDB runs its parts
    side by side, and one statement costs less than one per table."""
    if not chunked:
        return {}
    parts = []
    for i, (schema, table, columns) in enumerate(chunked):
        row_hash = "hash(" + ", ".join(f'"{c}"' for c, _ in columns) + ")"
        parts.append(f"select {i} as part, {_month(columns)[1]} as month, count(*) as n, sum({row_hash}) as digest "
                     f'from w."{schema}"."{table}" group by all')
    out: dict = {}
    for part, month, count, digest in con.execute(" union all ".join(parts) + " order by all").fetchall():
        schema, table, _ = chunked[part]
        out.setdefault((schema, table), []).append((month, count, digest))
    return out


def _chunk_table(con: duckdb.DuckDBPyConnection, home: Path, schema: str, table: str,
                 columns: list[tuple[str, str]], listed: list[tuple[str, str, int, str]],
                 digests: list[tuple]) -> None:
    """Make r's `schema.table` a view over its chunks, writing the chunks no earlier publish wrote (a chunk's
    name is its rows' digest: the same name is the same rows), and add them to `listed`."""
    name = f'"{schema}"."{table}"'
    date_column, month = _month(columns)  # a chunk's rows: its month
    shape = hashlib.sha1(repr(columns).encode()).hexdigest()[:12]  # a changed column list is a new chunk
    folder = chunks_dir(home) / f"{schema}.{table}"
    rows = []
    for start, count, digest in digests:
        chunk = start.strftime("%Y-%m") if start else ("none" if date_column else NO_CHUNK)
        path = folder / f"{chunk}-{count}-{digest & (2**128 - 1):032x}-{shape}.parquet"
        if not path.exists():
            _write_chunk(con, name, month, start, path)
        rows.append((f"{schema}.{table}", chunk, count, path.relative_to(home).as_posix()))
    if not rows:
        return  # no rows: the empty table copy from database made answers as the view would
    listed.extend(rows)
    casts = ", ".join(f'cast("{c}" as {t}) as "{c}"' for c, t in columns)
    files = ", ".join(f"'{_sql_text(path)}'" for *_, path in rows)
    con.execute(f"drop table r.{name}")
    con.execute(f"create view r.{name} as select {casts} from read_parquet([{files}], hive_partitioning = false)")


def _write_chunk(con: duckdb.DuckDBPyConnection, name: str, month: str, start: object, path: Path) -> None:
    """Write the rows whose `month` is `start` as a new file, renamed into place whole (a killed publish leaves a
    .tmp, not half a chunk)."""
    make_dirs(path.parent, READER_DIR_MODE)
    part = path.with_name(f".{uuid.uuid4().hex}.tmp")
    try:
        con.execute(f"copy (select * from w.{name} where {month} is not distinct from ?) to '{_sql_text(part)}' "
                    "(format parquet, compression zstd)", [start])
        part.chmod(READER_MODE)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def _sql_text(value: object) -> str:
    return str(value).replace("'", "''")
