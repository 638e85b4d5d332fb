"""Benchmark: the what-if replay of a month (wall time of one replay, median of runs).

    .venv/bin/python bench/bench_replay.py --home /tmp/demomonth            # policies on (as observed)
    .venv/bin/python bench/bench_replay.py --home /tmp/demomonth/baseline   # policies off
    .venv/bin/python bench/bench_replay.py --home /tmp/demomonth --runs 1 --days 7

Reads the month's demand from the warehouse once (timed apart), then replays it `--runs` times on the
observed pool and prints every run, the median, the machine's load, and the baseline's figures next
to the observed month's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from pipelines.capacity.demand import load_demand
from pipelines.capacity.replay import observed, replay
from pipelines.warehouse import Warehouse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="gpupool home holding warehouse.duckdb")
    parser.add_argument("--month", default=None, help="YYYY-MM (default: the latest)")
    parser.add_argument("--days", type=int, default=None)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    con = Warehouse(args.home).connect(read_only=True)
    began = time.perf_counter()
    demand = load_demand(con, args.month, args.days)
    load_s = time.perf_counter() - began
    seen = observed(con, demand.start, demand.days)
    con.close()
    print(f"demand: {len(demand.workload.jobs):,} jobs, {demand.days} days from {demand.start:%Y-%m-%d}, "
          f"policies {'on' if demand.governed else 'off'}; read in {load_s:.1f} s")
    times = []
    figures = None
    for i in range(args.runs):
        began = time.perf_counter()
        figures, _ = replay(demand)
        times.append(time.perf_counter() - began)
        print(f"run {i + 1}: {times[-1]:.1f} s")
    print(f"median {statistics.median(times):.1f} s over {len(times)} run(s); cpus {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    assert figures is not None
    print(f"wait p95     observed {seen.wait_p95_s / 60:8.1f} min   replay {figures.wait_p95_s / 60:8.1f} min")
    print(f"utilisation  observed {seen.pool_utilisation_pct:8.1f} %     replay {figures.pool_utilisation_pct:8.1f} %")
    print(f"allocation   observed {seen.allocation_rate_pct:8.1f} %     replay {figures.allocation_rate_pct:8.1f} %")
    print(f"idle GPU-h   observed {seen.idle_gpu_hours:8,.0f}       replay {figures.idle_gpu_hours:8,.0f}")


if __name__ == "__main__":
    main()
