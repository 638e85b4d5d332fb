"""Analysts' access cannot change the warehouse: `gpupool sql` and DuckDB opened read-only refuse writes."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from pipelines.cli import main
from pipelines.lake.reader import search_config
from pipelines.warehouse import Warehouse

WRITES = (
    "insert into metrics.catalog_version values ('9.9.9', 0, now()::timestamp)",
    "create table metrics.scratch as select 1 as x",
    "drop view metrics.pool_daily",
    "delete from ops.ingest_log",
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("statement", WRITES)
def test_gpupool_sql_refuses_writes(demo_home: Path, statement: str) -> None:
    result = CliRunner().invoke(main, ["sql", "--home", str(demo_home), statement])
    assert result.exit_code != 0
    assert "read-only" in result.output.lower()


@pytest.mark.parametrize("statement", WRITES)
def test_duckdb_read_only_refuses_writes(demo_home: Path, statement: str) -> None:
    con = duckdb.connect(str(Warehouse(demo_home).db_path), read_only=True, config=search_config(demo_home))
    try:
        with pytest.raises(duckdb.Error, match="(?i)read-only"):
            con.execute(statement)
    finally:
        con.close()


def test_attached_read_only_refuses_writes_and_reads(demo_home: Path) -> None:
    con = duckdb.connect(config=search_config(demo_home))  # the views name their files relative to the home
    con.execute(f"attach '{Warehouse(demo_home).db_path}' as gp (read_only)")
    assert con.sql("select count(*) from gp.metrics.pool_daily").fetchall()[0][0] > 0
    with pytest.raises(duckdb.Error, match="(?i)read-only"):
        con.execute("create table gp.metrics.scratch as select 1 as x")
    con.close()


def test_nothing_changed(demo_home: Path) -> None:
    con = duckdb.connect(str(Warehouse(demo_home).db_path), read_only=True, config=search_config(demo_home))
    try:
        assert con.sql("select catalog_version from metrics.catalog_version").fetchall()[0][0] != "9.9.9"
        tables = {r[0] for r in con.sql("select table_name from information_schema.tables "
                                         "where table_schema = 'metrics'").fetchall()}
    finally:
        con.close()
    assert "scratch" not in tables and "pool_daily" in tables
