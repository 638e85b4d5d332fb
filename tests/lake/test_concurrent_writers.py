"""Two writer processes replace partitions of one home at the same time: different days, and the
same (day, source). No row is lost or duplicated, every write is logged once, the published release
sees both writers, and a (day, source) written twice ends as one whole write."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl

from pipelines.contracts import LAKE_TABLES
from pipelines.paths import REPO_ROOT
from pipelines.warehouse import Warehouse
from tests.lake.workers import NATURAL_KEY, SOURCE, samples, write_partition

DAY0 = dt.date(2026, 11, 1)
TIMEOUT_S = 180


def writer(home: Path, barrier: Path, name: str, writes: list[tuple[dt.date, int, str]],
           hold_after_lake: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if hold_after_lake:
        env["HOLD_AFTER_LAKE"] = "1"
    specs = [f"{d.isoformat()}:{rows}:{tag}" for d, rows, tag in writes]
    return subprocess.Popen([sys.executable, "-m", "tests.lake.workers", "write", str(home), str(barrier), name, *specs],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(*processes: subprocess.Popen) -> None:
    for p in processes:
        _out, err = p.communicate(timeout=TIMEOUT_S)
        assert p.returncode == 0, err


def partitions(con: duckdb.DuckDBPyConnection) -> dict[dt.date, tuple[int, int, list[str]]]:
    """(day) -> (rows, distinct natural keys, the writers' tags) of raw.dcgm_samples."""
    key = ", ".join(NATURAL_KEY)
    return {day: (rows, keys, sorted(tags)) for day, rows, keys, tags in con.execute(
        f"select partition_date, count(*), count(distinct ({key})), list(distinct source_file) "
        "from raw.dcgm_samples group by all").fetchall()}


def quarantined(con: duckdb.DuckDBPyConnection) -> dict[dt.date, list[str]]:
    return dict(con.execute("select partition_date, list(distinct source_file order by source_file) "
                            "from ops.quarantine group by all").fetchall())


def last_logged(con: duckdb.DuckDBPyConnection) -> dict[dt.date, int]:
    """(day) -> the samples the last logged write of (day, SOURCE) loaded."""
    return {day: json.loads(rows)["dcgm_samples"] for day, rows in con.execute(
        "select partition_date, arg_max(rows_by_table, finished_at) from ops.ingest_log "
        "where ingest_source = ? group by all", [SOURCE]).fetchall()}


def test_two_writers_of_different_days_and_of_the_same_day(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "gpupool")
    write_partition(wh, DAY0, 500, "seed")  # the home and the Delta table exist before the race
    d = [DAY0 + dt.timedelta(days=n) for n in range(6)]
    # step by step at the same moment: days 1 and 2, days 3 and 4, then both day 5
    a = [(d[1], 1100, "a1"), (d[3], 1300, "a3"), (d[5], 1500, "a5")]
    b = [(d[2], 1200, "b2"), (d[4], 1400, "b4"), (d[5], 2500, "b5")]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    finish(writer(wh.home, barrier, "a", a), writer(wh.home, barrier, "b", b))

    lake = wh.store.read(wh.lake_table("dcgm_samples"))
    assert lake.height == lake.select(pl.struct(*NATURAL_KEY).n_unique()).item()
    expected = {day: (rows, rows, [f"synthetic/{tag}"]) for day, rows, tag in [(DAY0, 500, "seed"), *a[:2], *b[:2]]}
    with wh.connect() as con:  # the published release
        got = partitions(con)
        assert {day: got[day] for day in expected} == expected  # no lost, no duplicated rows
        winner = got[d[5]]  # one of the two writes of day 5, whole
        assert winner in [(1500, 1500, ["synthetic/a5"]), (2500, 2500, ["synthetic/b5"])]
        assert con.execute("select count(*), count(distinct run_id) from ops.ingest_log").fetchone() == (7, 7)
        logs = dict(con.execute("select partition_date, count(*) from ops.ingest_log group by all").fetchall())
        assert logs == {DAY0: 1, d[1]: 1, d[2]: 1, d[3]: 1, d[4]: 1, d[5]: 2}
        assert con.execute("select release_id from lake.release").fetchone()[0] == wh.registry.latest().release_id
        assert dict(con.execute("select table_name, version from ops.lake_versions").fetchall()) == {
            wh.lake_table(name): wh.store.version(wh.lake_table(name)) for name in LAKE_TABLES}
    assert lake.group_by("partition_date").len().sort("partition_date")["len"].to_list() == \
        [500, 1100, 1200, 1300, 1400, winner[0]]


def test_a_day_written_twice_at_once_is_one_whole_write(tmp_path: Path) -> None:
    """Writer a commits its Delta rows of the day and holds; writer b starts a write of the same
    (day, source) meanwhile. b must wait for a's whole write (the partition lock spans the lake's
    commit and the warehouse's), so the day ends as b's write, whole: its samples, its quarantine
    and a last log row that counts them. (Before the lock, b committed in between and the day
    ended with b's samples and a's quarantine.)"""
    wh = Warehouse(tmp_path / "gpupool")
    write_partition(wh, DAY0, 500, "seed")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    a = writer(wh.home, barrier, "a", [(DAY0, 1500, "a")], hold_after_lake=True)
    (barrier / "0.b").touch()  # a's barrier: it goes alone
    while not (barrier / "a.lake").exists():
        assert a.poll() is None, a.communicate()[1]
    b = writer(wh.home, barrier, "b", [(DAY0, 2500, "b")])
    time.sleep(3)
    assert b.poll() is None, "b wrote the day while a's write of it was half done"
    (barrier / "a.go").touch()
    finish(a, b)
    assert wh.store.read(wh.lake_table("dcgm_samples")).height == samples(DAY0, 2500, "b").height  # b's commit is last
    with wh.connect() as con:
        (rows, _keys, tags), = partitions(con).values()
        assert tags == ["synthetic/b"]
        assert (quarantined(con)[DAY0], last_logged(con)[DAY0]) == (tags, rows), (
            f"day {DAY0} is a mix of two writes: samples {tags} ({rows} rows), "
            f"quarantine {quarantined(con)[DAY0]}, last log row says {last_logged(con)[DAY0]} samples")
