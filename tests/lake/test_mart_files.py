"""The per-minute marts as day files beside the warehouse (models/macros/day_files.sql,
pipelines/lake/mart_files.py): each build writes new files for the days it rebuilds and lists them
in the warehouse file, whose view reads them; an older release keeps reading the files it listed;
a mart built as a table before keeps its other days; `maintain` deletes the files nothing lists
once they have gone unread for the vacuum's hours."""
from __future__ import annotations

import datetime as dt
import stat
from pathlib import Path

import duckdb
import pytest

from allocator.filemodes import READER_MODE
from pipelines.build import build
from pipelines.lake.mart_files import MART_FILES, marts_dir, sweep
from pipelines.warehouse import Warehouse
from tests.models.builders import DAY1, load, series

DAY2 = DAY1 + dt.timedelta(days=1)
MART = "marts.fct_gpu_activity"


def samples(day: dt.date, value: float) -> list[dict]:
    start = dt.datetime.combine(day, dt.time(10, 0))
    return series("h1", 0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", start, 30, value)


def listed(con: duckdb.DuckDBPyConnection, table: str = MART) -> dict[dt.date, list[str]]:
    out: dict[dt.date, list[str]] = {}
    for day, path in con.execute(f"select day, path from {MART_FILES} where table_name = ? order by day, path",
                                 [table]).fetchall():
        out.setdefault(day, []).append(path)
    return out


def activity(con: duckdb.DuckDBPyConnection, day: dt.date) -> float:
    return con.execute(f"select avg(activity) from {MART} where activity_date = ?", [day]).fetchall()[0][0]


@pytest.fixture
def two_days(tmp_path: Path) -> Warehouse:
    wh = Warehouse(tmp_path / "home")
    load(wh, "dcgm_text", DAY1, dcgm_samples=samples(DAY1, 0.25))
    load(wh, "dcgm_text", DAY2, dcgm_samples=samples(DAY2, 0.5))
    build(wh)
    return wh


def test_a_build_writes_day_files_that_the_warehouse_lists_and_its_view_reads(two_days: Warehouse):
    wh = two_days
    with wh.connect(read_only=True) as con:
        kinds = dict(con.execute("select table_name, table_type from information_schema.tables "
                                 "where table_schema = 'marts'").fetchall())
        files = listed(con)
        assert activity(con, DAY1) == pytest.approx(0.25)
        assert activity(con, DAY2) == pytest.approx(0.5)
    for mart in ("fct_gpu_activity", "fct_host_activity", "fct_allocation_activity"):
        assert kinds[mart] == "VIEW", f"{mart} is read from its day files, not held in the warehouse file"
    assert sorted(files) == [DAY1, DAY2]
    for paths in files.values():
        for path in paths:
            assert path.startswith("lake/marts/fct_gpu_activity/activity_date="), "named relative to the home"
            assert stat.S_IMODE((wh.home / path).stat().st_mode) == READER_MODE


def test_a_rebuilt_day_gets_new_files_and_an_older_release_still_reads_its_own(two_days: Warehouse):
    wh = two_days
    before = wh.current_release()
    with wh.connect(read_only=True) as con:
        old = listed(con)
    load(wh, "dcgm_text", DAY2, dcgm_samples=samples(DAY2, 0.75))  # a correction to day 2
    build(wh)
    with wh.connect(read_only=True) as con:
        new = listed(con)
        assert activity(con, DAY2) == pytest.approx(0.75)
    assert new[DAY1] == old[DAY1], "a day outside the window keeps its files"
    assert not set(new[DAY2]) & set(old[DAY2]), "a rebuilt day is new files; the old ones stay for old releases"
    with wh.analyst_connect(release=before) as con:  # the sandbox lets a release read its day files
        assert activity(con, DAY2) == pytest.approx(0.5)


def test_a_full_refresh_lists_only_its_own_files(two_days: Warehouse):
    wh = two_days
    with wh.connect(read_only=True) as con:
        old = {p for paths in listed(con).values() for p in paths}
    build(wh, full_refresh=True)
    with wh.connect(read_only=True) as con:
        new = listed(con)
        assert activity(con, DAY1) == pytest.approx(0.25)
    assert sorted(new) == [DAY1, DAY2] and all(len(paths) == 1 for paths in new.values())
    assert not {p for paths in new.values() for p in paths} & old


def test_a_mart_built_as_a_table_before_keeps_its_other_days(two_days: Warehouse):
    wh = two_days
    with wh.writer() as con:  # the warehouse as a build before day files left it: the rows in a table
        con.execute(f"create table marts.legacy as select * from {MART}")
        con.execute(f"drop view {MART}")
        con.execute(f"alter table marts.legacy rename to {MART.split('.')[1]}")
        con.execute(f"delete from {MART_FILES} where table_name = ?", [MART])
        con.execute(f"update {MART} set activity = 0.125 where activity_date = ?", [DAY1])  # marks day 1's rows
    load(wh, "dcgm_text", DAY2, dcgm_samples=samples(DAY2, 0.75))
    build(wh)
    with wh.connect(read_only=True) as con:
        kind = con.execute("select table_type from information_schema.tables where table_schema = 'marts' "
                           "and table_name = 'fct_gpu_activity'").fetchall()[0][0]
        assert kind == "VIEW"
        assert activity(con, DAY1) == pytest.approx(0.125), "day 1 came from the old table, not a rebuild"
        assert activity(con, DAY2) == pytest.approx(0.75)
        assert sorted(listed(con)) == [DAY1, DAY2]


def test_maintain_deletes_files_nothing_lists_once_unread_for_the_vacuum_hours(two_days: Warehouse):
    wh = two_days
    with wh.connect(read_only=True) as con:
        first = listed(con)[DAY2]
    load(wh, "dcgm_text", DAY2, dcgm_samples=samples(DAY2, 0.75))
    build(wh)
    stray = marts_dir(wh.home) / "fct_gpu_activity" / "activity_date=2026-11-02" / "failed-build_x.parquet"
    stray.write_bytes((wh.home / first[0]).read_bytes())  # what a build killed mid-way leaves
    now = dt.datetime(2026, 11, 5, 12, 0)

    def sweep_now(at: dt.datetime, dry_run: bool = False):
        with wh.quiet():
            return sweep(wh.home, [wh.writer_path, *map(wh.release_path, wh.kept_releases())], 24, at, dry_run)

    assert sweep_now(now).files == 0, "the stray file is seen unread now: it is kept for 24 h"
    assert stray.exists() and all((wh.home / p).exists() for p in first), "a kept release still lists day 2's old files"
    wh.expire_releases(keep=1)  # only the newest release is kept: day 2's first files are listed by nothing
    assert sweep_now(now + dt.timedelta(hours=23)).files == 0, "the old files have been unread for 0 h of 24"
    assert sweep_now(now + dt.timedelta(hours=25), dry_run=True).files == 1, "a dry run deletes nothing"
    assert stray.exists()
    assert sweep_now(now + dt.timedelta(hours=25)).files == 1, "the stray file, unread since the first sweep"
    assert not stray.exists() and all((wh.home / p).exists() for p in first)
    # day 2's first files, and the files of no rows that gave the empty marts their columns before
    assert sweep_now(now + dt.timedelta(hours=49)).files >= len(first)
    assert not any((wh.home / p).exists() for p in first)
    with wh.connect(read_only=True) as con:  # the release served reads every file it lists
        assert activity(con, DAY1) == pytest.approx(0.25)
        assert activity(con, DAY2) == pytest.approx(0.75)
