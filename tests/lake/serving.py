"""Serving while loading, a scenario of the lake tests: readers in other processes query the published
warehouse in a loop (each idle as long as its last answer took: tests/lake/workers.py) while an ingest
and a full rebuild run on the same home; none is refused or fails, and every answer is one committed
release.

It runs where its full rebuild is built anyway: on the SQLite registry as the build that follows the
killed ones of tests/lake/test_kill_writer.py (test_kill_9_mid_build_leaves_the_previous_release), on
PostgreSQL in tests/lake/test_lakehouse_postgres.py."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from pipelines.paths import REPO_ROOT
from pipelines.runner import build_models, ingest_days
from pipelines.warehouse import Warehouse
from tests.lake.workers import SOURCE

READERS = 2
WAIT_S = 120


def start_reader(home: Path, out: Path, stop: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.lake.workers", "reader", str(home), str(out), str(stop)],
                            cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                            stderr=subprocess.PIPE, text=True)


def answers(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def wait_until(what: str, ready, readers: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        dead = [r for r in readers if r.poll() is not None]
        if dead:
            pytest.fail(f"a reader exited ({dead[0].returncode}): {dead[0].stderr.read()}")
        if time.monotonic() > deadline:
            pytest.fail(f"readers: {what} within {WAIT_S} s")
        time.sleep(0.1)


def thin_landing_day(home: Path) -> dt.date:
    """Drop the afternoon of one host from the last day's landed telemetry, so that re-ingesting the
    day changes the samples and the marts (each release's answers differ, not only its id)."""
    folder = max((home / "landing" / SOURCE).iterdir())
    for path in folder.glob("*.parquet"):
        frame = pl.read_parquet(path)
        host = frame.get_column("host").min()
        frame.filter(~((pl.col("host") == host) & (pl.col("sampled_at").dt.hour() >= 12))).write_parquet(path)
    return dt.date.fromisoformat(folder.name)


def readers_see_whole_releases(home: Path, run: Path) -> None:
    """READERS readers of `home` (a demo month, written here) during an ingest of its last day, thinned,
    and a full rebuild; `run`: a folder for the readers' answers."""
    wh = Warehouse(home)
    first = wh.current_release()
    day = thin_landing_day(home)
    stop = run / "stop"
    outs = [run / f"reader-{n}.jsonl" for n in range(READERS)]
    readers = [start_reader(home, out, stop) for out in outs]
    try:
        wait_until("a first answer", lambda: all(answers(out) for out in outs), readers)
        ingest_days(wh, [SOURCE], day, day)
        build_models(wh, full_refresh=True)
        last = wh.current_release()
        # every reader's next open gets the last release
        wait_until(f"an answer from release {last}",
                   lambda: all(any(a.get("release") == last for a in answers(out)) for out in outs), readers)
    finally:
        stop.touch()
        for r in readers:
            r.wait(timeout=WAIT_S)
    published = {r.release_id: r for r in wh.registry.list(limit=1000)}
    seen = set()
    for out in outs:
        got = answers(out)
        errors = [a["error"] for a in got if "error" in a]
        assert not errors, f"{len(errors)} of {len(got)} answers failed; the first:\n{errors[0]}"
        releases = [a["release"] for a in got]
        assert releases == sorted(releases), f"{out.name}: a reader went back to an older release: {releases}"
        assert {a["via"] for a in got} == {"plain", "analyst"}
        for a in got:
            assert a["release"] in published and a["release"] >= first
            broken = {name: rows for name, rows in a["violations"].items() if rows}
            assert not broken, f"release {a['release']}: invariants broken {broken}"
            # the release's lake views read the Delta versions the registry recorded for it
            assert a["lake_versions"] == published[a["release"]].tables
            # the telemetry of each (day, source) is what the release's last ingest of it loaded
            assert all(logged == lake for _day, _source, logged, lake in a["telemetry"]), a["telemetry"]
        seen |= set(releases)
    assert first < last and {first, last} <= seen
    # the re-ingest changed the day: the answers before and after it differ, each whole
    counts = {a["release"]: {d: lake for d, s, _, lake in a["telemetry"] if s == SOURCE}
              for out in outs for a in answers(out)}
    assert counts[first][day.isoformat()] > counts[last][day.isoformat()]
