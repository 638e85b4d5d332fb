"""Benchmark (issue 30): what a publish would write if a release did not copy the writers' file.

Today a release is a copy of the writers' DuckDB file (pipelines/warehouse.py `publish`), so a publish
writes the whole history's job- and allocation-keyed marts and raw tables each time. The alternative
measured here: each base table stored as zstd Parquet chunks, one per month of its first date or
timestamp column (--chunk day: one per day; a table without one is one chunk), named by a digest of their rows (count and sum of
row hashes); a release is a small DuckDB file of views over the chunks it reads, and a publish writes
only the chunks whose digest changed since the last release (plus that small file).

For each home given, it compares two of its releases (by default the current one and the one --publishes
earlier, 2: a day's ingest and build each publish once; run it on a copy where one more day was
ingested and built, as bench/bench_build.py --keep leaves them, e.g. h30-day31/ and h120-day121/) and prints per layout the bytes the later publish wrote
or would write: today's copy (the release files after the first), the chunked layout's changed chunks
and schema file, and for scale every chunk of the later release. It also lists the tables whose chunks
changed, the heaviest first.

Run:  PYTHONPATH=. .venv/bin/python bench/bench_publish_layouts.py HOME [HOME ...] [--publishes 2] [--chunk month|day]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import duckdb

from pipelines.lake.reader import search_config
from pipelines.warehouse import Warehouse

DATE_TYPES = ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS", "TIMESTAMP_MS", "TIMESTAMP_S")


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def chunked_tables(con: duckdb.DuckDBPyConnection, unit: str) -> dict[str, str]:
    """Each base table of the release -> the SQL expression of its chunk (the month or day of its first date
    column)."""
    tables = con.execute("select schema_name, table_name from duckdb_tables() where database_name = current_database() "
                         "and not internal order by 1, 2").fetchall()
    chunks = {}
    for schema, table in tables:
        first = con.execute("select column_name from duckdb_columns() where database_name = current_database() "
                            "and schema_name = ? and table_name = ? and data_type in "
                            f"({', '.join('?' * len(DATE_TYPES))}) order by column_index limit 1",
                            [schema, table, *DATE_TYPES]).fetchone()
        chunks[f'"{schema}"."{table}"'] = (f"cast(date_trunc('{unit}', \"{first[0]}\") as date)" if first
                                          else "date '1970-01-01'")
    return chunks


def digests(con: duckdb.DuckDBPyConnection, chunks: dict[str, str]) -> dict[tuple[str, object], tuple[int, int]]:
    out = {}
    for table, expr in chunks.items():
        for chunk, n, digest in con.execute(f"select {expr} as chunk, count(*), sum(hash(t)) from {table} t "
                                            "group by all").fetchall():
            out[(table, chunk)] = (n, digest)
    return out


def chunk_bytes(con: duckdb.DuckDBPyConnection, chunks: dict[str, str], keys: list[tuple[str, object]],
                folder: Path) -> dict[tuple[str, object], int]:
    sizes = {}
    for i, (table, chunk) in enumerate(keys):
        path = folder / f"{i}.parquet"
        where = f"{chunks[table]} is null" if chunk is None else f"{chunks[table]} = ?"
        con.execute(f"copy (select * from {table} where {where}) to '{path}' (format parquet, compression zstd)",
                    [] if chunk is None else [chunk])
        sizes[(table, chunk)] = path.stat().st_size
    return sizes


def schema_bytes(release: Path, home: Path, folder: Path) -> int:
    """A DuckDB file with the release's schemas, views and empty tables: what the views over chunks weigh."""
    target = folder / "schema.duckdb"
    with duckdb.connect(config=search_config(home)) as con:
        con.execute(f"attach '{release}' as src (read_only)")
        con.execute(f"attach '{target}' as dst")
        con.execute("copy from database src to dst (schema)")
    return target.stat().st_size


def measure(home: Path, publishes: int, unit: str) -> None:
    wh = Warehouse(home)
    kept = wh.kept_releases()
    after = wh.current_release()
    before = after - publishes
    copied = sum(wh.release_path(r).stat().st_size for r in kept if before < r <= after)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        with duckdb.connect(str(wh.release_path(before)), read_only=True, config=search_config(home)) as con:
            old = digests(con, chunked_tables(con, unit))
        with duckdb.connect(str(wh.release_path(after)), read_only=True, config=search_config(home)) as con:
            chunks = chunked_tables(con, unit)
            new = digests(con, chunks)
            sizes = chunk_bytes(con, chunks, list(new), folder)
        changed = [key for key, digest in new.items() if old.get(key) != digest]
        schema = schema_bytes(wh.release_path(after), home, folder)
    written = sum(sizes[key] for key in changed) + schema
    per_table: dict[str, int] = {}
    for key in changed:
        per_table[key[0]] = per_table.get(key[0], 0) + sizes[key]
    print(f"== {home}: releases {before} -> {after}")
    print(f"  today's copy: {mib(copied)} written ({after - before} release(s); the release file "
          f"{mib(wh.release_path(after).stat().st_size)})")
    print(f"  chunked by {unit}: {mib(written)} written ({len(changed)} of {len(new)} chunks changed, "
          f"{mib(written - schema)}, and the schema file {mib(schema)}); every chunk of the release "
          f"{mib(sum(sizes.values()))}")
    print("  changed: " + ", ".join(f"{t} {mib(b)}" for t, b in sorted(per_table.items(), key=lambda x: -x[1])[:8]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("homes", nargs="+", type=Path)
    parser.add_argument("--publishes", type=int, default=2, help="the publishes to measure: the current release "
                        "against the one this many publishes earlier")
    parser.add_argument("--chunk", choices=("month", "day"), default="month", help="a chunk's span of time")
    args = parser.parse_args()
    for home in args.homes:
        measure(home.resolve(), args.publishes, args.chunk)


if __name__ == "__main__":
    main()
