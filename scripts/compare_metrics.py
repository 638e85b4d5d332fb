"""Compare every metrics view (and mart) of two gpupool homes: what a refactoring must leave unchanged.

    .venv/bin/python scripts/compare_metrics.py HOME_BEFORE HOME_AFTER [--schemas metrics,marts]

Each relation is read whole from both warehouses (read-only) and matched row for row after sorting
on its non-float columns (then its floats): exact for every non-float column, NULL equal only to
NULL; floats within 1e-9 (relative, or absolute below 1), since DuckDB's parallel sums may differ in
the last bits between two builds of the same data, and a NULL or NaN on one side only is a
difference. Every column of the data is compared, its times included (an attempt's started_at and
duration_s are data); only the columns that record when (and how often) the pipeline ran (PIPELINE_RUN_COLUMNS, the
one list) are left out, and each home's own path in a text column (source files) reads as
`<home>`. Exit code 0 when every relation matches, 1 otherwise, with each difference named.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb
import polars as pl

from pipelines.lake.reader import search_config

# The columns that record when the pipeline ran (an ingest, a build, a check), not what the data
# says: two builds of the same landing files differ there and nowhere else. A bare name is that
# column in every relation; "schema.relation.column" is that relation's only (the same name is data
# elsewhere: an attempt's started_at and duration_s in the marts).
PIPELINE_RUN_COLUMNS = frozenset({
    "ingested_at",  # when a partition or a quarantined record was loaded (metrics.ingest_daily, ...)
    "last_ingested_at",  # metrics.ingest_freshness
    "hours_since_last_ingest",  # metrics.ingest_freshness: the last ingest against the clock
    "built_at",  # metrics.catalog_version
    "checked_at",  # metrics.check_results
    "metrics.ingest_daily.started_at",  # the ingest run's start and length
    "metrics.ingest_daily.duration_s",
    "metrics.ingest_daily.runs",  # how many ingest runs loaded the day: a re-ingest is one more
    "metrics.ingest_freshness.runs",
})
TOLERANCE = 1e-9


def ignored(relation: str, column: str) -> bool:
    """Whether `column` of `relation` ("schema.name") records when the pipeline ran."""
    return column in PIPELINE_RUN_COLUMNS or f"{relation}.{column}" in PIPELINE_RUN_COLUMNS


def relations(con: duckdb.DuckDBPyConnection, schemas: list[str]) -> set[str]:
    rows = con.execute("select table_schema || '.' || table_name from information_schema.tables "
                       "where table_schema in (select unnest(?))", [schemas]).fetchall()
    return {r[0] for r in rows}


def read(con: duckdb.DuckDBPyConnection, name: str, home: Path) -> pl.DataFrame:
    frame = con.sql(f"select * from {name}").pl()
    prefix = str(home.resolve())
    return frame.with_columns(pl.col(pl.String).str.replace(prefix, "<home>", literal=True))


def _floats_off(x: pl.Series, y: pl.Series) -> pl.DataFrame:
    """The rows where two float columns differ: beyond the tolerance, or NULL/NaN on one side only."""
    pair = pl.DataFrame({"x": x, "y": y})
    bx, by = pl.col("x"), pl.col("y")
    same = (
        (bx.is_null() & by.is_null())
        | (bx.is_not_null() & by.is_not_null() & (
            (bx.is_nan() & by.is_nan())
            | (bx == by)  # equal infinities too
            | ((bx - by).abs() <= TOLERANCE * pl.max_horizontal(pl.lit(1.0), bx.abs()))
        ))
    )
    return pair.filter(~same.fill_null(False))


def differences(before: pl.DataFrame, after: pl.DataFrame, relation: str = "") -> list[str]:
    """Each difference between two reads of `relation` (its name selects the pipeline-run columns
    left out), one line per column, or the schemas or row counts when those differ."""
    if before.schema != after.schema:
        return [f"schema {dict(before.schema)} vs {dict(after.schema)}"]
    compared = [c for c in before.columns if not ignored(relation, c)]
    keys = [c for c in compared if not before.schema[c].is_float()]
    floats = [c for c in compared if before.schema[c].is_float()]
    if before.height != after.height:
        return [f"{before.height} rows vs {after.height}" + _example_unmatched(before, after, keys)]
    if compared:
        before = before.sort(keys + floats, nulls_last=True, maintain_order=True)
        after = after.sort(keys + floats, nulls_last=True, maintain_order=True)
    found = []
    for column in compared:
        x, y = before.get_column(column), after.get_column(column)
        if before.schema[column].is_float():
            off = _floats_off(x, y)
            if off.height:
                found.append(f"{column}: {off.height} rows beyond {TOLERANCE} or NULL on one side, "
                             f"e.g. {off.row(0)}")
        elif not x.equals(y, check_names=False, null_equal=True):
            unequal = x.ne_missing(y).arg_true()  # NULL against a value counts
            if unequal.len():
                first = unequal[0]
                found.append(f"{column}: {unequal.len()} rows, e.g. {x[first]!r} vs {y[first]!r}")
            else:
                found.append(f"{column}: differs")
    return found


def _example_unmatched(before: pl.DataFrame, after: pl.DataFrame, keys: list[str]) -> str:
    """A row of one side whose non-float values are on no row of the other, for the message."""
    if not keys:
        return ""
    try:
        only_before = before.select(keys).join(after.select(keys), on=keys, how="anti", nulls_equal=True)
        only_after = after.select(keys).join(before.select(keys), on=keys, how="anti", nulls_equal=True)
    except (pl.exceptions.PolarsError, TypeError):  # key types a join cannot take (nested lists)
        return ""
    if only_before.height:
        return f", e.g. only before: {only_before.row(0, named=True)}"
    if only_after.height:
        return f", e.g. only after: {only_after.row(0, named=True)}"
    return ""


def read_home(home: Path, schemas: list[str]) -> dict[str, pl.DataFrame]:
    """Every relation of the home's warehouse in `schemas`, read whole (read-only, searching the home for
    the lake files its views name): one side of compare_read, kept to compare with several homes."""
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home)) as con:
        return {name: read(con, name, home) for name in sorted(relations(con, schemas))}


def compare_read(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame], home_a: Path,
                 home_b: Path) -> tuple[int, list[str]]:
    """(relations compared, the differences named) of two homes' relations as read_home read them."""
    problems = [f"{r}: only in {home_a}" for r in sorted(a.keys() - b.keys())]
    problems += [f"{r}: only in {home_b}" for r in sorted(b.keys() - a.keys())]
    common = sorted(a.keys() & b.keys())
    for name in common:
        for found in differences(a[name], b[name], name):
            problems.append(f"{name}: {found}")
    return len(common), problems


def compare_homes(before: Path, after: Path, schemas: list[str]) -> tuple[int, list[str]]:
    """compare_read() of two homes' warehouses."""
    return compare_read(read_home(before, schemas), read_home(after, schemas), before, after)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--schemas", default="metrics,marts")
    args = parser.parse_args()
    compared, problems = compare_homes(args.before, args.after, args.schemas.split(","))
    print(f"{compared} relations compared, {len(problems)} differences")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
