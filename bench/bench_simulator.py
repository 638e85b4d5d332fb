"""Benchmark: the simulator on the default pool (simulated days/s, samples/s).

    .venv/bin/python bench/bench_simulator.py                   # 7 days of the default pool, 3 runs
    .venv/bin/python bench/bench_simulator.py --days 30 --runs 1
    .venv/bin/python bench/bench_simulator.py --gpus 1024 --days 7 --runs 1

Each run simulates into a fresh temporary folder (deleted afterwards) and is timed end to end:
workload generation, the engine in virtual time, the event/audit/pool files and the Parquet
telemetry. It prints every run, the median, simulated days/s, samples/s and events/s, and the
process's peak resident memory (which includes the first run's imports).
"""
from __future__ import annotations

import argparse
import datetime as dt
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
        with tempfile.TemporaryDirectory(prefix="gpupool-bench-sim-") as tmp:
            began = time.perf_counter()
            report = simulate(
                Path(tmp), args.days, args.gpus, args.seed, dt.date(2026, 11, 1), interval_s=args.interval
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


if __name__ == "__main__":
    main()
