"""The dashboards' only door to the warehouse: read-only, cached queries on the `metrics` views.

Connections come from the analysts' factory (Warehouse.analyst_connect, pipelines/sandbox.py): they
read the warehouse and the lake its views read, and no other file; queries pass the read-only
statement allow-list first.

Pages never open DuckDB themselves and never compute a metric: they ask for rows of a metric view
(filtered, already aggregated by its model) and draw them. Connections are read-only and short;
DuckDB refuses a read-only open while the pipeline's writer holds the file, so an open is retried
for a few seconds (the writer's transactions are short) before the page says the warehouse is busy.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import polars as pl
import streamlit as st

from pipelines.paths import default_home
from pipelines.sandbox import check_read_only
from pipelines.warehouse import Warehouse

TTL_S = int(os.environ.get("GPUPOOL_DASHBOARD_TTL_S", "60"))
OPEN_RETRY_S = 5.0


class WarehouseMissing(RuntimeError):
    """No warehouse file at the configured home."""


class WarehouseBusy(RuntimeError):
    """The pipeline held the warehouse for longer than the readers wait."""


def home() -> Path:
    configured = os.environ.get("GPUPOOL_HOME")
    return Path(configured) if configured else default_home()


def db_path() -> Path:
    return home() / "warehouse.duckdb"


def _connect() -> duckdb.DuckDBPyConnection:
    path = db_path()
    if not path.exists():
        raise WarehouseMissing(f"no warehouse at {path}: run `gpupool demo` (or ingest data) first")
    deadline = time.monotonic() + OPEN_RETRY_S
    while True:
        try:
            # read-only, and no file but the warehouse and its lake (pipelines/sandbox.py)
            return Warehouse(home()).analyst_connect(memory_limit="2GB")
        except duckdb.IOException as exc:  # the writer holds the lock
            if time.monotonic() > deadline:
                raise WarehouseBusy(f"the pipeline is writing to {path}; try again in a moment ({exc})") from None
            time.sleep(0.2)


def query(sql: str, params: tuple = ()) -> pl.DataFrame:
    """Rows of a read-only query (cached for TTL_S seconds per warehouse, query and parameters)."""
    return _query(str(db_path()), sql, params)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _query(path: str, sql: str, params: tuple) -> pl.DataFrame:
    check_read_only(sql)  # the pages' SQL is ours; a second line of defence all the same
    con = _connect()
    try:
        frame = pl.from_arrow(con.sql(sql, params=list(params)).to_arrow_table())
        # DuckDB's sums of integers are DECIMAL; charts and number formats want floats
        return frame.with_columns(pl.col(pl.Decimal).cast(pl.Float64))
    finally:
        con.close()


def view(name: str, where: str = "", params: tuple = (), order: str = "", columns: str = "*") -> pl.DataFrame:
    """Rows of metrics.<name>; `where`/`order` are SQL fragments with ? parameters."""
    if not name.isidentifier():
        raise ValueError(f"view {name!r}: not a view name")
    sql = f"select {columns} from metrics.{name}"
    if where:
        sql += f" where {where}"
    if order:
        sql += f" order by {order}"
    return query(sql, params)


def catalog() -> pl.DataFrame:
    """The metric catalog (metrics.catalog): definitions, formulas, units, English and Chinese labels."""
    return query("select * from metrics.catalog order by metric_group, metric_name")


def metric(column: str, view_name: str) -> dict | None:
    """The catalog entry behind a view's column (for the definition one click away)."""
    rows = catalog().filter((pl.col("view_name") == f"metrics.{view_name}") & (pl.col("column_name") == column))
    if rows.is_empty():
        rows = catalog().filter(pl.col("also_in").str.contains(f"metrics.{view_name}.{column}", literal=True))
    return rows.row(0, named=True) if rows.height else None


def bounds() -> tuple | None:
    """First and last day with pool data (metrics.pool_daily), or None when the warehouse is empty."""
    row = query("select min(day) as first, max(day) as last from metrics.pool_daily").row(0)
    return None if row[0] is None else row
