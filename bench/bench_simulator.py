"""Benchmark: the simulator on the default pool (simulated days/s, samples/s).

    .venv/bin/python bench/bench_simulator.py                   # 7 days of the default pool, 3 runs
    .venv/bin/python bench/bench_simulator.py --days 30 --runs 1
    .venv/bin/python bench/bench_simulator.py --gpus 1024 --days 7 --runs 1

Each run simulates into a fresh temporary folder (deleted afterwards) and is timed end to end:
workload generation, the engine in virtual time, the event/audit/pool files and the Parquet
telemetry. It prints every run, the median, simulated days/s, samples/s and events/s, the
process's peak resident memory (which includes the first run's imports), and the resident memory
after each simulated day of the last run (flat in the days: the simulator keeps one day of telemetry).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from allocator.sim.simulator import simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=7, help="days to simulate per run")
    parser.add_argument("--gpus", type=int, default=None, help="scale the default pool (default: 256 GPUs)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3, help="timed runs")
    parser.add_argument("--interval", type=int, default=60, help="telemetry resolution, seconds")
    args = parser.parse_args()

    times: list[float] = []
    report = None
    for _ in range(args.runs):
        after_day: list[int] = []  # resident bytes after each simulated day of this run
        with tempfile.TemporaryDirectory(prefix="gpupool-bench-sim-") as tmp:
            began = time.perf_counter()
            report = simulate(
                Path(tmp), args.days, args.gpus, args.seed, dt.date(2026, 11, 1), interval_s=args.interval,
                on_progress=lambda *_, into=after_day: into.append(_resident()),
            )
            times.append(time.perf_counter() - began)
            size = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file())
    assert report is not None
    median = statistics.median(times)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"pool: {report.gpus} GPUs on {report.nodes} nodes; {report.days} days at {report.interval_s} s, "
        f"seed {report.seed}"
    )
    print(
        f"output: {report.jobs_submitted:,} jobs, {report.events:,} events, {report.samples:,} samples, "
        f"{size / 1e6:.0f} MB on disk"
    )
    print(f"wall: median {median:.2f} s of {len(times)} runs ({', '.join(f'{t:.2f}' for t in times)})")
    print(
        f"rate: {report.days / median:.2f} simulated days/s, {report.samples / median:,.0f} samples/s, "
        f"{report.events / median:,.0f} events/s"
    )
    print(f"peak resident memory: {peak_mib:,.0f} MiB")
    if after_day and after_day[0]:
        mib = [b / 2**20 for b in after_day]
        print(f"resident after each day (last run): first {mib[0]:,.0f} MiB, last {mib[-1]:,.0f} MiB, "
              f"max {max(mib):,.0f} MiB")


def _resident() -> int:
    """This process's resident memory now, bytes (0 without Linux's /proc)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


if __name__ == "__main__":
    main()
