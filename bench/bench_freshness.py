"""How fresh the live chain keeps the metrics, and what one of its cycles costs.

A synthetic pool (bench_tick.py's: jobs of 1 to 8 GPUs, busy, idle, bursty...) lands a scrape round
every 15 s in landing/dcgm_parquet/<day>/, as the dcgm_scrape sensor does. Every --cadence-min minutes
(the live chain's default is 5: prometheus_pull, or dcgm_scrape's ingest_every_rounds) a cycle runs
what the live chain runs: the intraday ingest of the rounds landed since the last cycle
(`ingest_new_files`, as the ingest asset on a sensor's run; `--whole-day`: the day so far re-read at
every cycle, `ingest_partition`, as before) and the models' build of today's window with its publish
(`pipelines.build.build`, as `gpupool build`); then the bench reads metrics.gpu_status from the release,
as a dashboard would, to check the cycle's last round is there. With `--compare`, the cycles' home is
then compared (scripts/compare_metrics.py, every relation of marts and metrics) with a copy of its
landing files ingested whole and built from scratch: they must be equal.

Time is accelerated: a cycle's rounds are landed at once, and the clock is virtual. Cycle k starts at
k x cadence (or when the one before ended, if it ran past that) and its release is out when its measured
work is done; a round's freshness is the time from its scrape to that release. So the figures are
the real costs, on a virtual scrape timeline.

Prints, per pool size: the first build (a new home's full refresh), then each cycle's wall and CPU
seconds (this process, every thread) split into ingest and build+publish; freshness p50 and p95 over
every round; and the targets (issue 30): p95 at most 5 minutes at 1,024 GPUs, a cycle at 10,000 GPUs
under a minute of one core.

    PYTHONPATH=. .venv/bin/python bench/bench_freshness.py                      # 1,024 GPUs, an hour
    PYTHONPATH=. .venv/bin/python bench/bench_freshness.py --gpus 10000 --cycles 3
    PYTHONPATH=. .venv/bin/python bench/bench_freshness.py --cycles 4 --compare --whole-day   # the old ingest
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tick import ROUNDS_PER_MINUTE, build_pool, write_rounds

from pipelines.build import build
from pipelines.connectors.scrape import LANDING_SOURCE
from pipelines.ingest import ingest_new_files, ingest_partition
from pipelines.paths import REPO_ROOT
from pipelines.warehouse import Warehouse

MIDNIGHT = dt.datetime(2026, 11, 2)
P95_TARGET = dt.timedelta(minutes=5)
CYCLE_CPU_TARGET_S = 60.0  # at 10,000 GPUs


def timed(work) -> tuple[float, float]:
    began, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - began, time.process_time() - cpu


def latest_in_metrics(wh: Warehouse) -> dt.datetime | None:
    with wh.connect(read_only=True) as con:
        return con.execute("select max(last_telemetry_at) from metrics.gpu_status").fetchone()[0]


def same_as_built_whole(wh: Warehouse, root: Path) -> None:
    """Compare every relation of marts and metrics with a new home of the same landing files, ingested whole
    and built from scratch (scripts/compare_metrics.py); raise on a difference."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    from compare_metrics import compare_homes

    whole = Warehouse(root / "whole")
    shutil.copytree(wh.landing, whole.landing)
    ingest_partition(whole, LANDING_SOURCE, MIDNIGHT.date())
    build(whole)
    compared, problems = compare_homes(whole.home, wh.home, ["marts", "metrics"])
    print(f"the cycles' home against the same files ingested whole and built from scratch: {compared} relations, "
          f"{len(problems)} differences", flush=True)
    if problems:
        raise SystemExit("\n".join(problems[:30]))


def run(n_gpus: int, cycles: int, cadence: dt.timedelta, start_hour: int, whole_day: bool, check: bool) -> None:
    ingest = ingest_partition if whole_day else ingest_new_files
    rounds_per_cycle = int(cadence / dt.timedelta(minutes=1)) * ROUNDS_PER_MINUTE
    first_round = start_hour * 60 * ROUNDS_PER_MINUTE
    end = MIDNIGHT + dt.timedelta(seconds=15 * (first_round + rounds_per_cycle * (cycles + 1)))
    pool = build_pool(n_gpus, MIDNIGHT, end)
    day = MIDNIGHT.date()
    with tempfile.TemporaryDirectory(prefix="bench_freshness_") as tmp:
        wh = Warehouse(Path(tmp) / "gpupool")
        # the day so far, then the first build: a new home's full refresh (not a cycle)
        write_rounds(pool, wh.landing, 0, first_round + rounds_per_cycle)
        wall, cpu = timed(lambda: (ingest(wh, LANDING_SOURCE, day), build(wh)))
        print(f"{n_gpus:,} GPUs, {len(pool.jobs):,} jobs; the day up to {start_hour:02d}:{cadence.seconds // 60:02d} "
              f"landed and built from scratch in {wall:.1f} s (CPU {cpu:.1f} s)", flush=True)
        landed = first_round + rounds_per_cycle
        released = MIDNIGHT + dt.timedelta(seconds=15 * landed)  # virtual time the last release came out
        freshness: list[float] = []
        rows = []
        for k in range(cycles):
            rounds = range(landed, landed + rounds_per_cycle)
            write_rounds(pool, wh.landing, rounds.start, rounds.stop)  # the scraper's work: not the cycle's
            landed = rounds.stop
            due = MIDNIGHT + dt.timedelta(seconds=15 * landed)
            ingest_wall, ingest_cpu = timed(lambda: ingest(wh, LANDING_SOURCE, day))
            build_wall, build_cpu = timed(lambda: build(wh))
            newest = MIDNIGHT + dt.timedelta(seconds=15 * (landed - 1))
            seen = latest_in_metrics(wh)
            assert seen is not None and seen >= newest.replace(second=0), f"cycle {k + 1}: metrics end at {seen}"
            start = max(due, released)
            released = start + dt.timedelta(seconds=ingest_wall + build_wall)
            scraped = [MIDNIGHT + dt.timedelta(seconds=15 * r) for r in rounds]
            freshness += [(released - t).total_seconds() for t in scraped]
            rows.append((ingest_wall + build_wall, ingest_cpu + build_cpu))
            print(f"  cycle {k + 1} (rounds to {newest:%H:%M:%S}): ingest {ingest_wall:.1f} s (CPU {ingest_cpu:.1f}), "
                  f"build and publish {build_wall:.1f} s (CPU {build_cpu:.1f}); metrics end at {seen:%H:%M}; "
                  f"release at {released:%H:%M:%S} virtual", flush=True)
        p50, p95 = np.percentile(freshness, [50, 95])
        walls, cpus = [w for w, _ in rows], [c for _, c in rows]
        verdict = "met" if p95 <= P95_TARGET.total_seconds() else "NOT met"
        print(f"RESULT {n_gpus:,} GPUs, {cycles} cycles every {cadence.seconds // 60} min, "
              f"{'the day so far re-read' if whole_day else 'new rounds added'} at each: freshness p50 "
              f"{p50 / 60:.1f} min, p95 {p95 / 60:.1f} min (target p95 <= 5 min: {verdict}); a cycle: wall median "
              f"{statistics.median(walls):.1f} s, max {max(walls):.1f} s; CPU median {statistics.median(cpus):.1f} s, "
              f"last {cpus[-1]:.1f} s" + (f" (target at 10,000 GPUs: under {CYCLE_CPU_TARGET_S:.0f} s of one core: "
                                        f"{'met' if cpus[-1] < CYCLE_CPU_TARGET_S else 'NOT met'})"
                                        if n_gpus >= 10000 else ""), flush=True)
        if check:
            same_as_built_whole(wh, Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1024])
    parser.add_argument("--cycles", type=int, default=12, help="cycles timed (default 12: an hour at 5 minutes)")
    parser.add_argument("--cadence-min", type=int, default=5, help="minutes between cycles (default 5)")
    parser.add_argument("--start-hour", type=int, default=9, help="the hour of the day the timed cycles start at: "
                        "with --whole-day each cycle re-ingests the day so far (default 9)")
    parser.add_argument("--whole-day", action="store_true",
                        help="each cycle re-reads the day so far (ingest_partition), as before the intraday ingest")
    parser.add_argument("--compare", action="store_true",
                        help="then compare the home with its landing files ingested whole and built from scratch")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs; "
          f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC", flush=True)
    for n in args.gpus:
        run(n, args.cycles, dt.timedelta(minutes=args.cadence_min), args.start_hour, args.whole_day, args.compare)


if __name__ == "__main__":
    main()
