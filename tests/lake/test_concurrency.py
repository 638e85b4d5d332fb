"""Writer processes against one Delta table: concurrent days, the same day, and kill -9."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

from pipelines.lake.tables import DeltaStore
from pipelines.paths import REPO_ROOT
from tests.lake.frames import day, day_frame, rows_for

TABLE = "raw.samples"


def writer(root: Path, name: str, days: list[int], repeat: int, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.lake.writer", str(root), TABLE, name, ",".join(map(str, days)), str(repeat)],
        cwd=REPO_ROOT, env=env, **popen)


def per_day(store: DeltaStore) -> pl.DataFrame:
    return (store.read(TABLE).group_by("partition_date")
            .agg(pl.len().alias("rows"), pl.struct("writer", "seq").n_unique().alias("writes"))
            .sort("partition_date"))


def test_two_writers_different_days_and_the_same_day(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    store = DeltaStore(root)
    store.replace_partition(TABLE, day(0), day_frame(day(0)), "partition_date")  # the table exists
    a = writer(root, "a", [1, 2, 3], 2)
    b = writer(root, "b", [4, 5, 6], 2)
    assert (a.wait(timeout=60), b.wait(timeout=60)) == (0, 0)
    result = per_day(store)
    assert result["partition_date"].to_list() == [day(n) for n in range(7)]
    assert result["rows"].to_list() == [rows_for(day(n)) for n in range(7)]  # no lost, no duplicated rows
    assert set(result["writes"]) == {1}

    # the same day from both, three times each: conflicts are retried; the day is exactly one write
    before = store.version(TABLE)
    a = writer(root, "a", [3], 3, stdout=subprocess.PIPE, text=True)
    b = writer(root, "b", [3], 3, stdout=subprocess.PIPE, text=True)
    out_a, _ = a.communicate(timeout=60)
    out_b, _ = b.communicate(timeout=60)
    assert (a.returncode, b.returncode) == (0, 0)
    # each write reports the version of its own commit: six distinct versions, the next six
    versions = sorted(int(line.rpartition(" v")[2]) for line in (out_a + out_b).splitlines())
    assert versions == list(range(before + 1, before + 7))
    result = per_day(store)
    assert result["rows"].to_list() == [rows_for(day(n)) for n in range(7)]
    assert set(result["writes"]) == {1}
    assert store.read(TABLE).filter(pl.col("partition_date") == day(3))["seq"].unique().to_list() == [2]


def test_two_first_writers_create_the_table_once(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    a = writer(root, "a", [0, 1], 1)
    b = writer(root, "b", [1, 2], 1)
    assert (a.wait(timeout=60), b.wait(timeout=60)) == (0, 0)
    result = per_day(DeltaStore(root))
    assert result["rows"].to_list() == [rows_for(day(n)) for n in range(3)] and set(result["writes"]) == {1}


def test_kill_9_mid_write_leaves_a_committed_table(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    store = DeltaStore(root)
    days = [0, 1, 2, 3]
    for delay in (0.0, 0.05, 0.15, 0.3):
        process = writer(root, "k", days, -1, stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().startswith("committed")  # killed mid-loop, not mid-start
        time.sleep(delay)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        process.stdout.close()
        version = store.version(TABLE)
        result = per_day(store)  # readable at its last commit
        assert result["rows"].to_list() == [rows_for(day(n)) for n in days[:result.height]]
        assert set(result["writes"]) == {1}
        assert all(Path(f).exists() for f in store.files(TABLE, version))
        store.replace_partition(TABLE, day(0), day_frame(day(0), writer="rerun"), "partition_date")
        assert per_day(store)["rows"][0] == rows_for(day(0))
