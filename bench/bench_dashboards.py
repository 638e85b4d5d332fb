"""Benchmark: how long each dashboard page takes to render, first load and after it (cached).

    .venv/bin/python bench/bench_dashboards.py --home .gpupool          # the demo month
    .venv/bin/python bench/bench_dashboards.py --home .gpupool --runs 5 --user vic

Runs the app's script for each page in Streamlit's AppTest (the server side of a page view: every
query, every chart spec; the browser's drawing is not included), signed in as an operator (or a
tenant member with --user vic), and prints the first load and the median of the next runs. Target
(issue 7): every page under 1 s after the first load on a month of the default pool.

--copied reads, in a temporary copy of the home, a copy of the writers' file as the release, as every
release was before releases were written with their large tables as Parquet chunks (issue 30): run it
beside a plain run to compare the two.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: the tests' users and app path

PAGES = ("pool", "queues", "tenants", "idle", "jobs", "capacity", "quality", "audit", "catalog")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", required=True, help="gpupool home with a built warehouse")
    parser.add_argument("--runs", type=int, default=3, help="runs after the first load (median reported)")
    parser.add_argument("--user", default="ops", choices=("ops", "vic"), help="operator or a vision member")
    parser.add_argument("--copied", action="store_true", help="read a copy of the writers' file as the release")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dashboards-") as scratch:
        os.environ["GPUPOOL_HOME"] = copied_release_home(Path(args.home), Path(scratch)) if args.copied else args.home
        run_pages(args.runs, args.user)


def copied_release_home(home: Path, scratch: Path) -> str:
    """A copy of `home` whose release is a copy of its writers' file, with the release's own row (without the
    landing, the releases and their chunks, which that file does not read)."""
    import duckdb

    copy = scratch / "gpupool"
    shutil.copytree(home, copy, symlinks=True, ignore=shutil.ignore_patterns("landing", "releases", "warehouse.duckdb"))
    shutil.copy(home / "writer" / "warehouse.duckdb", copy / "warehouse.duckdb")
    with duckdb.connect(str(copy / "warehouse.duckdb")) as con:
        con.execute(f"attach '{home / 'warehouse.duckdb'}' as published (read_only)")
        con.execute("create schema if not exists lake")
        con.execute("create or replace table lake.release as select * from published.lake.release")
    return str(copy)


def run_pages(runs: int, user: str) -> None:
    logging.getLogger("streamlit").setLevel(logging.ERROR)  # AppTest's "missing ScriptRunContext" chatter
    from tests.dashboards.conftest import USERS  # the test users: ops (operator), vic (vision)

    os.environ["GPUPOOL_DASHBOARD_USERS"] = json.dumps(USERS)
    from streamlit.testing.v1 import AppTest

    from tests.dashboards.conftest import APP

    print(f"{'page':<10} {'first load':>11} {'after (median)':>15}  runs")
    worst = 0.0
    for page in PAGES:
        at = AppTest.from_file(APP, default_timeout=120)
        at.session_state["gpupool_user"] = user
        at.run()
        at.switch_page(f"views/{page}.py")
        began = time.perf_counter()
        at.run()
        first = time.perf_counter() - began
        if at.exception:
            raise SystemExit(f"{page}: {at.exception[0].value}")
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - began)
        median = statistics.median(times)
        worst = max(worst, median)
        print(f"{page:<10} {first:>10.2f}s {median:>14.2f}s  {len(times)}")
    print(f"slowest page after the first load: {worst:.2f} s (target < 1 s)")


if __name__ == "__main__":
    main()
