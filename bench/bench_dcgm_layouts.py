"""Benchmark: the staging pivot of a day of DCGM samples, as `raw.dcgm_samples` stores them and as three
other layouts would (the decision issue 34 leaves open: the labels out of the sample rows).

Reads one day of `raw.dcgm_samples` from a built home (read-only), copies it into an in-memory DuckDB
and times, `--runs` times each, the grouping `models/staging/dcgm/stg_dcgm__samples.sql` does (one row
per series and sample time, nine fields as columns, each field's value from the latest ingest):

  * long, eight label keys: the rows as stored (one per field, the labels on every row): today's model;
  * long, series id: the same rows keyed by a series id, the labels in a series table joined once;
  * wide, deduplicated: a row per series and sample time and delivery, the fields as columns, keyed by
    a series id; the build still takes each field's latest delivery;
  * wide, no duplicates: the same rows when no sample arrived twice (the build joins the labels only).

It also times what an ingest would add for the other layouts (Polars, once: the day's long rows to
series ids from the label columns, then to wide rows) and the Parquet write of each layout's rows (pipelines/lake/tables.py PARQUET_WRITE),
and checks every layout gives the rows today's grouping gives (exits 1 if not).

Run:  .venv/bin/python bench/bench_dcgm_layouts.py --home ~/.gpupool [--day 2026-11-15] [--runs 5]
"""
from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import polars as pl

from pipelines.lake.retention import MINUTE_AGGREGATES
from pipelines.lake.tables import PARQUET_WRITE
from pipelines.warehouse import Warehouse

FIELDS = list(MINUTE_AGGREGATES)  # the nine fields stg_dcgm__samples pivots and fct_gpu_activity reads
KEYS = ["host", "gpu", "gpu_instance_id", "k8s_namespace", "k8s_pod", "k8s_container", "hpc_job"]
LABELS = ["uuid", "model_name", "gpu_instance_profile", "source"]
WANTED = ", ".join(f"'{m}'" for m in FIELDS)
COLUMNS = [f"f{i}" for i in range(len(FIELDS))]


def _latest(of: str) -> str:
    """Each field's value from the latest delivery: over long rows filtered by metric, over wide rows by
    the field being there."""
    if of == "long":
        return ", ".join(f"arg_max(value, ingested_at) filter (where metric = '{m}') as {c}" for m, c in zip(FIELDS, COLUMNS))
    return ", ".join(f"arg_max({c}, ingested_at) filter (where {c} is not null) as {c}" for c in COLUMNS)


LAYOUTS = {
    "long, eight label keys (today)": f"""
        select sampled_at, {', '.join(KEYS)}, {_latest('long')}, {', '.join(f'any_value({c}) as {c}' for c in LABELS)}
        from raw where metric in ({WANTED}) group by sampled_at, {', '.join(KEYS)}""",
    "long, series id": f"""
        with pivoted as (select series_id, sampled_at, {_latest('long')} from narrow
                         where metric in ({WANTED}) group by series_id, sampled_at)
        select pivoted.* exclude (series_id), series.* exclude (series_id) from pivoted join series using (series_id)""",
    "wide, deduplicated": f"""
        with latest as (select series_id, sampled_at, {_latest('wide')} from wide group by series_id, sampled_at)
        select latest.* exclude (series_id), series.* exclude (series_id) from latest join series using (series_id)""",
    "wide, no duplicates": """
        select wide.* exclude (series_id, ingested_at), series.* exclude (series_id) from wide join series using (series_id)""",
}


def _timed(con: duckdb.DuckDBPyConnection, query: str, runs: int) -> tuple[float, int]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        con.execute(f"create or replace temp table pivoted as {query}")
        times.append(time.perf_counter() - start)
    return statistics.median(times), con.execute("select count(*) from pivoted").fetchone()[0]


def _same_rows(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the layout's last timed pivot holds today's rows, no more and no fewer."""
    columns = ", ".join(["sampled_at", *KEYS, *COLUMNS, *LABELS])
    return not any(con.execute(f"select count(*) from (select {columns} from {a} except all select {columns} from {b})").fetchone()[0]
                   for a, b in (("today", "pivoted"), ("pivoted", "today")))


def _by_series(long: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What an ingest would do for the other layouts, from the labels as columns: the series (labels
    once) and the long rows by series id."""
    series = long.select(*KEYS, *LABELS).unique(KEYS, keep="first", maintain_order=True).with_row_index("series_id")
    narrow = long.join(series.select("series_id", *KEYS), on=KEYS, nulls_equal=True).select(
        "series_id", "sampled_at", "metric", "value", "ingested_at")
    return series, narrow


def _widened(narrow: pl.DataFrame) -> pl.DataFrame:
    """The wide rows: one per series, time and delivery, the nine fields as columns."""
    wide = (narrow.filter(pl.col("metric").is_in(FIELDS))
            .with_columns(field=pl.col("metric").replace_strict(dict(zip(FIELDS, COLUMNS))))
            .pivot("field", index=["series_id", "sampled_at", "ingested_at"], values="value", aggregate_function="first"))
    # a field the day never sampled gets no column from the pivot: every layout has all nine
    return wide.select("series_id", "sampled_at", "ingested_at",
                       *(pl.col(c) if c in wide.columns else pl.lit(None, pl.Float64).alias(c) for c in COLUMNS))


def _written(frame: pl.DataFrame, folder: Path, runs: int) -> tuple[float, int]:
    path, times = folder / "rows.parquet", []
    for _ in range(runs):
        start = time.perf_counter()
        frame.write_parquet(path, **PARQUET_WRITE)
        times.append(time.perf_counter() - start)
    return statistics.median(times), path.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path("~/.gpupool").expanduser(), help="a built home")
    parser.add_argument("--day", type=dt.date.fromisoformat, help="default: the middle day with DCGM samples")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    with Warehouse(args.home).connect() as source:
        days = [d for (d,) in source.execute(
            "select distinct cast(sampled_at as date) from raw.dcgm_samples order by 1").fetchall()]
        if not days:
            raise SystemExit(f"{args.home}: no DCGM samples; build a home first (gpupool demo --home ...)")
        day = args.day or days[len(days) // 2]
        long = source.sql(
            f"select sampled_at, {', '.join(KEYS)}, metric, value, ingested_at, {', '.join(LABELS)} from raw.dcgm_samples "
            "where sampled_at >= $1 and sampled_at < $2", params=[day, day + dt.timedelta(days=1)]).pl()
    print(f"{args.home}, {day}: {long.height:,} long rows")

    start = time.perf_counter()
    series, narrow = _by_series(long)
    middle = time.perf_counter()
    wide = _widened(narrow)
    end = time.perf_counter()
    print(f"ingest side (Polars, once): {series.height:,} series and the rows by series id {middle - start:.3f} s, "
          f"{wide.height:,} wide rows {end - middle:.3f} s")

    con = duckdb.connect()
    for name, frame in (("raw", long), ("series", series), ("narrow", narrow), ("wide", wide)):
        con.register(f"{name}_frame", frame)
        con.execute(f"create table {name} as select * from {name}_frame")
    failed = False
    duplicated = not wide.select("series_id", "sampled_at").is_unique().all()  # then "no duplicates" is not this day
    print(f"{'the staging pivot':34s} {'median':>9s} {'rows':>10s}  same rows as today")
    for name, query in LAYOUTS.items():
        seconds, rows = _timed(con, query, args.runs)
        if name.endswith("(today)"):
            con.execute("create table today as select * from pivoted")
            same = True
        else:
            same = None if duplicated and name == "wide, no duplicates" else _same_rows(con)
        failed |= same is False
        print(f"{name:34s} {seconds:8.3f}s {rows:10,}  {'-' if same is None else same}")
    with tempfile.TemporaryDirectory() as folder:
        for name, frame in (("long rows with labels (today)", long), ("long rows by series id", narrow),
                            ("wide rows by series id", wide)):
            seconds, size = _written(frame, Path(folder), args.runs)
            print(f"Parquet write, {name:30s} {seconds:7.3f}s {size / 1e6:7.1f} MB")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
