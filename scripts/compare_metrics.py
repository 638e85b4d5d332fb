"""Compare every metrics view (and mart) of two gpupool homes: what a refactoring must leave unchanged.

    .venv/bin/python scripts/compare_metrics.py HOME_BEFORE HOME_AFTER [--schemas metrics,marts]

Each relation is read whole from both warehouses (read-only) and matched row for row after sorting
on its non-float columns: exact for every non-float column, floats within 1e-9 (relative, or
absolute below 1), since DuckDB's parallel sums may differ in the last bits between two builds of
the same data. Columns that read the wall clock (ingest and build times) are left out, and each
home's own path in a text column (source files) reads as `<home>`. Exit code 0
when every relation matches, 1 otherwise, with each difference named.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb
import polars as pl

CLOCK_COLUMNS = {"started_at", "ingested_at", "duration_s", "built_at", "hours_since_last_ingest", "checked_at",
                 "last_ingested_at"}
TOLERANCE = 1e-9


def relations(con: duckdb.DuckDBPyConnection, schemas: list[str]) -> set[str]:
    rows = con.execute("select table_schema || '.' || table_name from information_schema.tables "
                       "where table_schema in (select unnest(?))", [schemas]).fetchall()
    return {r[0] for r in rows}


def read(con: duckdb.DuckDBPyConnection, name: str, home: Path) -> pl.DataFrame:
    frame = con.sql(f"select * from {name}").pl()
    prefix = str(home.resolve())
    return frame.with_columns(pl.col(pl.String).str.replace(prefix, "<home>", literal=True))


def differences(before: pl.DataFrame, after: pl.DataFrame) -> list[str]:
    if before.schema != after.schema:
        return [f"schema {dict(before.schema)} vs {dict(after.schema)}"]
    if before.height != after.height:
        return [f"{before.height} rows vs {after.height}"]
    keys = [c for c, t in before.schema.items() if c not in CLOCK_COLUMNS and not t.is_float()]
    before, after = before.sort(keys, nulls_last=True), after.sort(keys, nulls_last=True)
    found = []
    for column, dtype in before.schema.items():
        if column in CLOCK_COLUMNS:
            continue
        x, y = before.get_column(column), after.get_column(column)
        if dtype.is_float():
            pair = pl.DataFrame({"x": x, "y": y})
            off = pair.filter(~(
                (pl.col("x").is_null() & pl.col("y").is_null())
                | ((pl.col("x") - pl.col("y")).abs() <= TOLERANCE * pl.max_horizontal(pl.lit(1.0), pl.col("x").abs()))
            ))
            if off.height:
                found.append(f"{column}: {off.height} rows beyond {TOLERANCE}, e.g. {off.row(0)}")
        elif not x.equals(y, check_names=False):
            first = next(i for i in range(x.len()) if x[i] != y[i])
            found.append(f"{column}: e.g. {x[first]!r} vs {y[first]!r}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--schemas", default="metrics,marts")
    args = parser.parse_args()
    schemas = args.schemas.split(",")
    a = duckdb.connect(str(args.before / "warehouse.duckdb"), read_only=True)
    b = duckdb.connect(str(args.after / "warehouse.duckdb"), read_only=True)
    ra, rb = relations(a, schemas), relations(b, schemas)
    problems = [f"{r}: only in {args.before}" for r in sorted(ra - rb)]
    problems += [f"{r}: only in {args.after}" for r in sorted(rb - ra)]
    common = sorted(ra & rb)
    for name in common:
        for found in differences(read(a, name, args.before), read(b, name, args.after)):
            problems.append(f"{name}: {found}")
    print(f"{len(common)} relations compared, {len(problems)} differences")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
