"""Parquet exports of the metrics views for Trino, Spark or DuckDB elsewhere (`gpupool export`).

A view with a `day` column is written Hive-style, one folder per day:
  OUT/<view>/day=YYYY-MM-DD/part-0.parquet
any other view as one file, OUT/<view>/part-0.parquet. Each view is written to a hidden temporary
folder beside its target and renamed into place, so a reader never sees half an export and a
failed view leaves the previous export of it.

The export writes through its own internal connection, never an analyst's SQL: read-only on the
warehouse and sandboxed like theirs (pipelines/sandbox.py), with OUT as the one folder it may
write; the COPY statements are built here from validated view names. OUT may not be inside the
home's landing zone, lake or governance folders, which the pipeline reads as input.
"""
from __future__ import annotations

import datetime as dt
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pipelines.warehouse import Warehouse


@dataclass(frozen=True)
class Exported:
    view: str  # without the schema
    rows: int
    days: int  # day folders written (0 for an unpartitioned view)
    path: Path


def metrics_views(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Every relation of the metrics schema -> its columns, by name."""
    rows = con.sql(
        "select table_name, column_name from information_schema.columns where table_schema = 'metrics' "
        "order by table_name, ordinal_position"
    ).fetchall()
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(table, []).append(column)
    return out


def _quote(path: Path) -> str:
    return "'" + path.as_posix().replace("'", "''") + "'"


def export_views(wh: Warehouse, out: Path, views: list[str] | None = None, first: dt.date | None = None,
                 last: dt.date | None = None) -> list[Exported]:
    """Write the views (default: every metrics view) under OUT; --from/--to filter views with a day."""
    out = out.resolve()
    for inbound in (wh.landing, wh.lake, wh.home / "governance"):
        if out == inbound or inbound in out.parents:
            raise ValueError(f"cannot export into {out}: it is inside {inbound}, which the pipeline reads as "
                             "input; pick a folder outside it (default: HOME/exports)")
    if not wh.db_path.exists():
        raise FileNotFoundError(f"no warehouse at {wh.db_path}: run `gpupool demo` or `gpupool ingest` first")
    out.mkdir(parents=True, exist_ok=True)
    con = wh.analyst_connect(writable_dir=out)
    try:
        available = metrics_views(con)
        names = sorted(available) if not views else [v.removeprefix("metrics.") for v in views]
        unknown = [v for v in names if v not in available]
        if unknown:
            raise ValueError(f"not metrics views: {', '.join(unknown)} (known: {', '.join(sorted(available))})")
        return [_export_one(con, name, "day" in available[name], out, first, last) for name in names]
    finally:
        con.close()


def _export_one(con: duckdb.DuckDBPyConnection, view: str, by_day: bool, out: Path, first: dt.date | None,
                last: dt.date | None) -> Exported:
    where, params = [], []
    if by_day and first:
        where.append("day >= ?")
        params.append(first)
    if by_day and last:
        where.append("day <= ?")
        params.append(last)
    query = f"select * from metrics.{view}" + (f" where {' and '.join(where)}" if where else "")
    if by_day:
        query += " order by day"
    target = out / view
    tmp = out / f".{view}.{uuid.uuid4().hex}.tmp"
    tmp.mkdir()
    try:
        rows = con.sql(f"select count(*) from ({query})", params=params).fetchall()[0][0]
        if by_day:
            if rows:
                # PARTITION_BY takes the literal query; bind parameters by inlining the two dates.
                literal = query.replace("?", "{}").format(*(f"date '{d.isoformat()}'" for d in params))
                con.execute(f"copy ({literal}) to {_quote(tmp)} (format parquet, partition_by (day), "
                        "filename_pattern 'part-{i}', overwrite_or_ignore true)")
        else:
            con.execute(f"copy ({query}) to {_quote(tmp / 'part-0.parquet')} (format parquet)", params)
        days = len(list(tmp.glob("day=*"))) if by_day else 0
        old = out / f".{view}.{uuid.uuid4().hex}.old"
        if target.exists():
            target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Exported(view=view, rows=rows, days=days, path=target)
