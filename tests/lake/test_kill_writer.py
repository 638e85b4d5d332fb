"""kill -9 of a writer at random moments: mid partition write (Delta commit, warehouse transaction,
publish), mid publish, mid dbt build. Afterwards the published warehouse opens read-only and answers
with the last release, the Delta table loads, no lock is left held, the partition re-runs to exactly
its rows and the next publish works."""
from __future__ import annotations

import datetime as dt
import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from pipelines.lake.reader import search_config
from pipelines.lake.release_chunks import chunks_dir
from pipelines.paths import REPO_ROOT
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home
from tests.lake.serving import readers_see_whole_releases
from tests.lake.workers import NATURAL_KEY, SOURCE, answer, invariants, write_partition

DAY = dt.date(2026, 11, 1)
BIG_ROWS = 1_000_000  # about a second of Delta write here: kills land in every phase of the write
KILLS = 6
SEED = int(os.environ.get("GPUPOOL_KILL_SEED", "14"))  # set to explore other kill moments


def start(command: str, home: Path, *args: str, stdin: int | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.lake.workers", command, str(home), *args],
                            cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def await_line(process: subprocess.Popen, expected: str) -> None:
    line = process.stdout.readline()
    assert line.startswith(expected), f"worker said {line!r}, not {expected!r}: {process.stderr.read()}"


def kill(process: subprocess.Popen) -> str:
    """SIGKILL, then what the process printed that the test has not read."""
    process.send_signal(signal.SIGKILL)
    rest, _err = process.communicate(timeout=30)
    return rest


def until_ended(server: subprocess.Popen, child: int) -> str:
    """What the `builds` worker printed until it saw its child `child` exit."""
    said = []
    for line in server.stdout:
        if line == f"ended {child}\n":
            return "".join(said)
        said.append(line)
    raise AssertionError(f"the builds worker exited; it said {''.join(said)!r}: {server.stderr.read()[-2000:]}")


def assert_locks_free(wh: Warehouse) -> None:
    """The kernel released the dead writer's flocks: both are free at once (no stale lock files)."""
    for path in (wh.home / ".writer.lock", wh.home / ".publish.lock"):
        if path.exists():
            with open(path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError when held
                fcntl.flock(lock, fcntl.LOCK_UN)


def published_day(wh: Warehouse) -> tuple[int, int, int, int]:
    """(release, samples of DAY, their distinct natural keys, samples the day's last log row loaded)
    in the published warehouse, opened as a data-team client would."""
    con = duckdb.connect(str(wh.db_path), read_only=True, config=search_config(wh.home))
    try:
        (release,) = con.execute("select release_id from lake.release").fetchone()
        rows, keys = con.execute(f"select count(*), count(distinct ({', '.join(NATURAL_KEY)})) from raw.dcgm_samples "
                                 "where partition_date = ?", [DAY]).fetchone()
        (logged,) = con.execute("select arg_max(records_loaded, finished_at) from ops.ingest_log "
                                "where partition_date = ? and ingest_source = ?", [DAY, SOURCE]).fetchone()
    finally:
        con.close()
    return release, rows, keys, logged


def lake_day(wh: Warehouse) -> int:
    frame = wh.store.read(wh.lake_table("dcgm_samples"))
    return frame.filter(frame["partition_date"] == DAY).height


def leftovers(wh: Warehouse) -> list[str]:
    """Temporary files a publish leaves only when it dies."""
    return sorted(str(p.relative_to(wh.home)) for p in [*wh.releases.glob(".*.tmp*"), *wh.home.glob(".*.tmp"),
                                                         *chunks_dir(wh.home).glob("*/.*.tmp")])


@pytest.mark.slow
def test_kill_9_mid_partition_write_leaves_the_last_release_and_a_rerunnable_partition(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "gpupool")
    write_partition(wh, DAY, 1000, "seed")
    calibration = start("big", wh.home, DAY.isoformat(), str(BIG_ROWS))
    await_line(calibration, "ready")
    began = time.monotonic()
    await_line(calibration, "done")
    write_s = time.monotonic() - began  # the whole write: Delta commit, warehouse transaction, publish
    assert calibration.wait(timeout=30) == 0
    rng = random.Random(SEED)
    previous = BIG_ROWS
    landed = 0
    for n in range(1, KILLS + 1):
        rows = BIG_ROWS + n
        before = wh.current_release()
        process = start("big", wh.home, DAY.isoformat(), str(rows))
        await_line(process, "ready")
        delay = rng.uniform(0, write_s)
        time.sleep(delay)
        said = kill(process)
        context = f"kill {n} at {delay:.2f} s of {write_s:.2f} s (seed {SEED}), the worker said {said!r}"

        assert_locks_free(wh)
        release, got, keys, logged = published_day(wh)  # opens read-only and answers
        assert release >= before and release in {r.release_id for r in wh.registry.list(limit=1000)}, context
        assert got == keys == logged and got in (previous, rows), context  # one whole write, never a mix
        in_lake = lake_day(wh)  # the Delta table loads, at the old or the new commit
        assert in_lake in (previous, rows), context
        landed += in_lake == rows

        write_partition(wh, DAY, rows, f"rerun-{n}")  # the partition re-runs, and publishes
        assert lake_day(wh) == rows, context
        release_after, got, keys, logged = published_day(wh)
        assert release_after > release and got == keys == logged == rows, context
        previous = rows
    print(f"{KILLS} kills, {landed} after the Delta commit; write {write_s:.2f} s")


@pytest.mark.slow
def test_kill_9_mid_publish_leaves_the_last_release(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "gpupool")
    write_partition(wh, DAY, 1000, "seed")
    with wh.writer() as con:  # a writers' file of some size: a publish copies it for a while
        con.execute("create table ops.padding as select range as n, md5(range::varchar) as s from range(2000000)")
    rng = random.Random(SEED)
    acknowledged = 0
    for n in range(1, KILLS + 1):
        before = wh.current_release()
        process = start("publish-loop", wh.home)
        await_line(process, "committed")
        time.sleep(rng.uniform(0, 1.5))
        said = kill(process)
        acknowledged += 1 + said.count("committed")
        context = f"kill {n}, the worker said {said!r}"

        assert_locks_free(wh)
        release, got, _keys, _logged = published_day(wh)
        assert release > before and got == 1000, context
        wh.publish()  # the next publish works
        with wh.writer() as con:  # and the next write: every acknowledged row is there
            assert con.execute("select count(*) from ops.kill_test").fetchone()[0] >= acknowledged, context
        current = wh.current_release()
        with wh.connect() as con:
            assert con.execute("select count(*) from ops.kill_test").fetchone()[0] >= acknowledged, context
            assert con.execute("select release_id from lake.release").fetchone()[0] == current >= release, context
    print(f"{KILLS} kills, {len(leftovers(wh))} of them after a publish's copy, {acknowledged} rows acknowledged")


def test_a_publish_killed_mid_copy_leaves_no_copy_behind(tmp_path: Path) -> None:
    """A publish killed after it wrote the release's file (releases/.<uuid>.tmp) and before the rename
    leaves it behind; the next publish removes it."""
    wh = Warehouse(tmp_path / "gpupool")
    write_partition(wh, DAY, 1000, "seed")
    release = wh.current_release()
    process = start("publish-hold", wh.home)
    await_line(process, "written")
    kill(process)
    assert_locks_free(wh)
    assert published_day(wh)[0] == release  # the previous release still reads
    assert wh.publish() > release
    assert leftovers(wh) == []


@pytest.mark.slow
def test_kill_9_mid_build_leaves_the_previous_release(small_demo_home: Path, tmp_path: Path) -> None:
    """Three full rebuilds killed, each after the model at a random share of its run; then the next build
    works, with readers seeing whole releases during it (the scenario of tests/lake/serving.py: an ingest
    and a full rebuild; one full rebuild serves both tests)."""
    home = copy_home(small_demo_home, tmp_path / "gpupool")
    wh = Warehouse(home)
    release = wh.current_release()
    templates = invariants()
    rng = random.Random(SEED)
    # each build is a process of its own, forked by one that imported dbt once (`builds`), killed -9
    server = start("builds", home, stdin=subprocess.PIPE)
    try:
        # Kill points in the dbt run (after the model at a random share of it: early, mid, late) rather than
        # after a delay from the start, which mostly landed while dbt was still being imported.
        for n, share in enumerate(sorted(rng.uniform(0.02, 0.98) for _ in range(3))):
            server.stdin.write("build\n")
            server.stdin.flush()
            line = server.stdout.readline()
            assert line.startswith("child "), f"kill {n}: the worker said {line!r}: {server.stderr.read()[-2000:]}"
            child = int(line.split()[1])
            await_line(server, "ready")
            while True:
                line = server.stdout.readline()
                assert line.startswith("step "), f"kill {n}: the worker said {line!r}: {server.stderr.read()[-2000:]}"
                done, total = map(int, line.split()[1].split("/"))
                if done >= share * total:
                    break
            time.sleep(rng.uniform(0, 0.2))  # inside a model's statements, not only between models
            os.kill(child, signal.SIGKILL)
            said = until_ended(server, child)
            assert "done" not in said, f"kill {n}: the build finished after model {done} of {total}"
            assert_locks_free(wh)
            with wh.analyst_connect() as con:  # the previous release, whole
                got = answer(con, templates)
            assert got["release"] == release and not any(got["violations"].values()), (n, done, total, got)
        server.stdin.close()  # no more builds: the worker exits
        assert server.wait(timeout=30) == 0, server.stderr.read()[-2000:]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    run = tmp_path / "readers"
    run.mkdir()
    readers_see_whole_releases(home, run)  # the next ingest and full rebuild work, and readers see whole releases
    with wh.analyst_connect() as con:
        got = answer(con, templates)
    assert got["release"] > release and not any(got["violations"].values()), got
