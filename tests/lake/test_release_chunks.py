"""A release is written, not copied: the writers' small tables in its file, the others as Parquet chunks
(one per month of their first date column) written only when their rows changed
(pipelines/lake/release_chunks.py)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from pipelines.lake.mart_files import sweep
from pipelines.lake.reader import search_config
from pipelines.lake.release_chunks import EXACT_IN_DOUBLE, RELEASE_CHUNKS, chunks_dir
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home

NOW = dt.datetime(2026, 12, 1)


def chunk_files(home: Path) -> set[str]:
    return {p.relative_to(home).as_posix() for p in chunks_dir(home).rglob("*.parquet")}


def relations(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The writers' tables: the views read them, in the release as in the writers' file."""
    return [f'"{s}"."{t}"' for s, t in con.execute(
        "select table_schema, table_name from information_schema.tables where table_type = 'BASE TABLE' "
        "and table_schema not in ('lake') and table_name <> 'release_chunks' order by all").fetchall()]


def same_answers(home: Path, release: Path) -> None:
    """Every table of the writers' file answers in the release with the same columns, types and rows."""
    with duckdb.connect(config=search_config(home)) as con:
        con.execute(f"attach '{Warehouse(home).writer_path}' as w (read_only)")
        con.execute(f"attach '{release}' as r (read_only)")
        con.execute("use w")
        names = relations(con)
        assert names
        for name in names:
            columns = con.execute(f"describe w.{name}").fetchall()
            assert con.execute(f"describe r.{name}").fetchall() == columns, name
            # a sum of doubles may end in another last digit as DuckDB's threads add it in another order
            values = ", ".join(f'round("{c}", 9)' if t in ("DOUBLE", "FLOAT") else f'"{c}"' for c, t, *_ in columns)
            differ = con.execute(f"select count(*) from ((select {values} from w.{name} except all select {values} "
                                 f"from r.{name}) union all (select {values} from r.{name} except all select {values} "
                                 f"from w.{name}))").fetchone()[0]
            assert differ == 0, f"{name}: {differ} rows differ between the writers' file and the release"


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    """Three months of a mart, a table without a date column, a sum too wide for a double, an interval."""
    wh = Warehouse(tmp_path / "gpupool")
    with wh.writer() as con:
        con.execute("create table marts.fct_months (day date, tenant varchar, gpu_hours double, "
                    "minutes hugeint, seen_at timestamp[], share decimal(3, 1))")
        con.execute("insert into marts.fct_months select date '2026-09-01' + i::integer, 'team-' || (i % 3), i / 7, i * 60, "
                    "[timestamp '2026-09-01 00:00:00' + to_minutes(i)], 0.5 from range(90) t (i)")
        con.execute("create table marts.dim_plain (name varchar, n integer)")
        con.execute("insert into marts.dim_plain values ('a', 1), ('b', 2)")
        con.execute("create table marts.fct_wide (day date, total hugeint)")
        con.execute(f"insert into marts.fct_wide values (date '2026-09-01', {EXACT_IN_DOUBLE} + 1)")
        con.execute("create table marts.fct_spans (day date, span interval)")
        con.execute("insert into marts.fct_spans values (date '2026-09-01', interval 90 minute)")
        con.execute("create table marts.fct_empty (day date, n integer)")
    return wh


def chunked(wh: Warehouse, release: int) -> dict[str, list[str]]:
    with duckdb.connect(str(wh.release_path(release)), read_only=True) as con:
        rows = con.execute(f"select table_name, chunk from {RELEASE_CHUNKS} order by all").fetchall()
    out: dict[str, list[str]] = {}
    for table, chunk in rows:
        out.setdefault(table, []).append(chunk)
    return out


def test_a_release_answers_as_the_writers_file_with_its_large_tables_in_monthly_chunks(wh: Warehouse):
    release = wh.current_release()
    same_answers(wh.home, wh.release_path(release))
    assert chunked(wh, release) == {"marts.dim_plain": ["all"], "marts.fct_months": ["2026-09", "2026-10", "2026-11"]}
    with wh.connect() as con:
        kinds = dict(con.execute("select table_name, table_type from information_schema.tables "
                                 "where table_schema = 'marts'").fetchall())
    # a sum beyond 2^53 and an interval are not what Parquet gives back: they stay in the release's file
    assert kinds == {"fct_months": "VIEW", "dim_plain": "VIEW", "fct_wide": "BASE TABLE",
                     "fct_spans": "BASE TABLE", "fct_empty": "BASE TABLE"}


def test_a_publish_writes_the_changed_months_only_and_an_older_release_reads_its_own(wh: Warehouse):
    first = wh.current_release()
    before = chunk_files(wh.home)
    with wh.writer() as con:
        con.execute("update marts.fct_months set gpu_hours = -1 where day = date '2026-11-29'")
    second = wh.current_release()
    new = chunk_files(wh.home) - before
    assert len(new) == 1 and "/marts.fct_months/2026-11-" in f"/{next(iter(new))}", new
    same_answers(wh.home, wh.release_path(second))
    with wh.analyst_connect(release=first) as con:
        assert con.execute("select gpu_hours from marts.fct_months where day = date '2026-11-29'").fetchone()[0] > 0
    with wh.analyst_connect() as con:
        assert con.execute("select gpu_hours from marts.fct_months where day = date '2026-11-29'").fetchone()[0] == -1


def test_rows_back_as_they_were_reuse_the_chunk_already_written(wh: Warehouse):
    before = chunk_files(wh.home)
    with wh.writer() as con:
        con.execute("update marts.fct_months set gpu_hours = gpu_hours + 1 where day = date '2026-10-05'")
    with wh.writer() as con:
        con.execute("update marts.fct_months set gpu_hours = gpu_hours - 1 where day = date '2026-10-05'")
    assert len(chunk_files(wh.home) - before) == 1  # the changed October; back as it was, the first October
    third = wh.current_release()
    with duckdb.connect(str(wh.release_path(third)), read_only=True) as con:
        paths = {p for (p,) in con.execute(f"select path from {RELEASE_CHUNKS}").fetchall()}
    assert paths <= before


def test_a_chunk_no_kept_release_lists_is_swept_and_the_listed_ones_stay(wh: Warehouse):
    with wh.writer() as con:
        con.execute("update marts.fct_months set tenant = 'moved' where day = date '2026-09-02'")
    assert len(chunk_files(wh.home)) == 5  # September twice, October, November, the plain table
    wh.expire_releases(keep=1)
    kept = wh.kept_releases()
    with wh.quiet():
        assert sweep(wh.home, [wh.writer_path, *map(wh.release_path, kept)], 1, NOW).files == 0  # first seen unread
        swept = sweep(wh.home, [wh.writer_path, *map(wh.release_path, kept)], 1, NOW + dt.timedelta(hours=1))
    assert swept.files == 1
    assert len(chunk_files(wh.home)) == 4
    same_answers(wh.home, wh.release_path(kept[-1]))


@pytest.mark.slow
def test_the_demo_release_answers_as_its_writers_file(small_demo_home: Path, tmp_path: Path):
    """Every table of a demo month, through the chunks, as the writers' file answers it."""
    home = copy_home(small_demo_home, tmp_path / "gpupool")
    wh = Warehouse(home)
    same_answers(home, wh.release_path(wh.current_release()))
    assert len(chunked(wh, wh.current_release())) >= 20


def test_a_change_in_any_column_is_a_new_chunk_whatever_the_columns_are_named(wh: Warehouse):
    """The digest hashes every column by name: a column named like a row alias (t) cannot stand for the row."""
    with wh.writer() as con:
        con.execute("create table marts.fct_named (t varchar, day date, n integer)")
        con.execute("insert into marts.fct_named values ('same', date '2026-09-01', 1)")
    before = chunk_files(wh.home)
    with wh.writer() as con:
        con.execute("update marts.fct_named set n = 2")
    assert len(chunk_files(wh.home) - before) == 1
    with wh.analyst_connect() as con:
        assert con.execute("select n from marts.fct_named").fetchone()[0] == 2
