"""`gpupool export` writes the metrics views as Parquet by day; read back, the rows match the views."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from pipelines.cli import main
from pipelines.lake.reader import search_config
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow


def _count(con: duckdb.DuckDBPyConnection, query: str) -> int:
    return con.sql(query).fetchall()[0][0]


def test_export_every_view_and_read_it_back(demo_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = CliRunner().invoke(main, ["export", "--home", str(demo_home), "--out", str(out)])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(Warehouse(demo_home).db_path), read_only=True, config=search_config(demo_home))
    try:
        views = {r[0]: r[1] for r in con.sql(
            "select table_name, bool_or(column_name = 'day') from information_schema.columns "
            "where table_schema = 'metrics' group by table_name").fetchall()}
        assert sorted(p.name for p in out.iterdir()) == sorted(views)
        assert not list(out.glob(".*")), "temporary folders left behind"
        for view, by_day in views.items():
            expected = _count(con, f"select count(*) from metrics.{view}")
            assert f"metrics.{view}" in result.output
            if by_day:
                files = list((out / view).glob("day=*/part-0.parquet"))
                assert not list((out / view).glob("*.parquet"))
                if expected == 0:
                    assert files == []
                    continue
                got = _count(con, f"select count(*) from read_parquet('{out / view}/*/*.parquet', "
                                  "hive_partitioning = true)")
                days = _count(con, f"select count(distinct coalesce(day::varchar, '-')) from metrics.{view}")
                assert len(files) == days  # a null day has a folder of its own
            else:
                got = _count(con, f"select count(*) from read_parquet('{out / view / 'part-0.parquet'}')")
            assert got == expected, view
        # the day comes back from the folder names, as a date, with the same per-day counts
        back = con.sql(f"select day, count(*) from read_parquet('{out}/pool_daily/*/*.parquet', "
                       "hive_partitioning = true) group by day order by day").fetchall()
        assert back == con.sql("select day, count(*) from metrics.pool_daily group by day order by day").fetchall()
    finally:
        con.close()


def test_export_some_views_for_some_days_replaces_the_previous_export(demo_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    args = ["export", "--home", str(demo_home), "--out", str(out), "--views", "pool_daily,cost_attribution"]
    assert CliRunner().invoke(main, args).exit_code == 0
    con = duckdb.connect(str(Warehouse(demo_home).db_path), read_only=True, config=search_config(demo_home))
    last = con.sql("select max(day) from metrics.pool_daily").fetchall()[0][0]
    con.close()  # one process may not hold the file with two configurations
    result = CliRunner().invoke(main, [*args, "--from", last.isoformat(), "--to", last.isoformat()])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["cost_attribution", "pool_daily"]
    assert [p.name for p in (out / "pool_daily").iterdir()] == [f"day={last.isoformat()}"]
    con = duckdb.connect(str(Warehouse(demo_home).db_path), read_only=True, config=search_config(demo_home))
    try:
        got = _count(con, f"select count(*) from read_parquet('{out}/pool_daily/*/*.parquet', hive_partitioning = true)")
        assert got == _count(con, f"select count(*) from metrics.pool_daily where day = date '{last.isoformat()}'")
    finally:
        con.close()


def test_export_unknown_view_fails(demo_home: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["export", "--home", str(demo_home), "--out", str(tmp_path), "--views", "nope"])
    assert result.exit_code != 0 and "not metrics views: nope" in result.output
