"""Benchmark: the cost of a daily model build against a full one, and how it grows with history.

Prints, in one run on one machine (seconds, wall clock):

  (a) a full build (`gpupool build --full-refresh`) of the demo month: 256 GPUs x 30 days;
  (b) ingest plus (incremental) build of one more day on top of those 30 days;
  (c) the same on top of 120 days of a smaller pool (--small-gpus, 32 by default);

and the ratios (b)/(a) (target <= 0.1) and (c)/(b) (target <= 1.3). Builds go through
pipelines.build.build, the in-process dbt build the CLI runs; ingest through pipelines.runner.ingest_days,
as `gpupool ingest` does. Every home lives in a temporary folder.

The month comes from the simulator (31 days landed, the first 30 ingested, untimed) or, with
--demo-home, from a copy of a home that holds the demo month already; the 31st day is then simulated
alone and landed next to it. (c) simulates 121 days of the small pool and ingests 120 (untimed).

Run:  PYTHONPATH=. .venv/bin/python bench/bench_build.py [--demo-home HOME] [--skip-c] [--keep DIR]
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
import time
from pathlib import Path

from allocator.sim.simulator import simulate
from pipelines import runner
from pipelines.build import build
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse

START = dt.date(2026, 11, 1)
SEED = 7


def landed_sources(wh: Warehouse) -> list[str]:
    return [name for name in SOURCES if (wh.landing / name).is_dir()]


def simulated_home(home: Path, days: int, gpus: int | None) -> Warehouse:
    """A home with `days` + 1 simulated days landed and the first `days` ingested and built."""
    wh = Warehouse(home)
    simulate(wh.landing, days=days + 1, gpus=gpus, seed=SEED, start=START)
    runner.ingest_days(wh, landed_sources(wh), START, START + dt.timedelta(days=days - 1))
    return wh


def demo_home(copy_of: Path, home: Path, scratch: Path) -> Warehouse:
    """A copy of a demo-month home, with the simulator's 31st day landed next to it."""
    shutil.copytree(copy_of, home)
    wh = Warehouse(home)
    sim = scratch / "sim31"
    simulate(sim, days=31, seed=SEED, start=START)
    day = (START + dt.timedelta(days=30)).isoformat()
    for folder in sim.glob(f"*/{day}"):
        shutil.copytree(folder, wh.landing / folder.parent.name / day, dirs_exist_ok=True)
    return wh


def timed(label: str, fn) -> float:
    """Run fn, print its seconds (and, for a build, its slowest models); the seconds."""
    started = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - started
    built = f", {len(result)} seeds and models" if label.startswith("build") else ""
    print(f"  {label}: {seconds:.1f} s{built}", flush=True)
    if label.startswith("build"):
        slowest = sorted(result, key=lambda b: -b.seconds)[:5]
        print("    slowest: " + ", ".join(f"{b.name} ({b.kind}) {b.seconds:.1f} s" for b in slowest), flush=True)
    return seconds


def next_day(wh: Warehouse, days: int) -> float:
    """Ingest the day after `days` days of history and build incrementally; the seconds taken."""
    day = START + dt.timedelta(days=days)
    ingest = timed(f"ingest {day}", lambda: runner.ingest_days(wh, landed_sources(wh), day, day))
    built = timed("build (incremental)", lambda: build(wh))
    return ingest + built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo-home", type=Path, help="a home holding the demo month (copied, not modified)")
    parser.add_argument("--small-gpus", type=int, default=32, help="pool size for (c)")
    parser.add_argument("--skip-c", action="store_true", help="leave out (c), 120 days of history")
    parser.add_argument("--keep", type=Path, help="build the homes under this new folder and keep them")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        scratch = args.keep or Path(tmp)
        print("(a) full build of the demo month (256 GPUs x 30 days)", flush=True)
        if args.demo_home:
            wh = demo_home(args.demo_home, scratch / "month", scratch)
        else:
            wh = simulated_home(scratch / "month", 30, None)
        a = timed("build --full-refresh", lambda: build(wh, full_refresh=True))
        print("(b) ingest + build of day 31 on top of 30 days", flush=True)
        b = next_day(wh, 30)
        if not args.keep:
            shutil.rmtree(wh.home)
        c = None
        if not args.skip_c:
            print(f"(c) ingest + build of day 121 on top of 120 days ({args.small_gpus} GPUs)", flush=True)
            small = simulated_home(scratch / "long", 120, args.small_gpus)
            timed("build --full-refresh (set-up, not compared)", lambda: build(small, full_refresh=True))
            c = next_day(small, 120)

    print(f"(a) {a:.1f} s   (b) {b:.1f} s   (b)/(a) = {b / a:.3f} (target <= 0.1)")
    if c is not None:
        print(f"(c) {c:.1f} s   (c)/(b) = {c / b:.2f} (target <= 1.3)")


if __name__ == "__main__":
    main()
