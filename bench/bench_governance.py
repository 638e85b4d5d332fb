"""Benchmark: the simulated month with the idle-reclaim policies acting, against the same month without
them, in one process (nothing written: the simulator's own work and the policies').

Three runs of the same days and seed, in turn, `--runs` times:

  * off: no policies;
  * on: the policies acting, looks evaluated ahead (`SimulatedGovernance`, the default);
  * on, one minute at a time: each look evaluated at its own minute (`ahead_by=0`), as before looks
    were evaluated ahead.

Prints each run's wall time, looks, evaluation passes and looks that took findings evaluated ahead, the
medians and the ratios; exits 1 when the two runs with policies decide differently (their decision
logs compared with `difference`: floats within 1e-9 of each other, since a larger pass may sum a
finding's GPU-hours in another order).

Run:  .venv/bin/python bench/bench_governance.py [--days 7] [--gpus 256] [--runs 3]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
from pathlib import Path

from allocator.sim.simulator import simulate
from pipelines.governance.simulated import AHEAD, SimulatedGovernance, decision_log, difference
from pipelines.policies.catalog import load_catalog

START = dt.date(2026, 11, 1)


def run(days: int, gpus: int | None, seed: int, ahead_by: dt.timedelta | None) -> tuple[float, dict, list]:
    """(wall seconds, counters, decision log) of one simulated run; ahead_by None: no policies."""
    with tempfile.TemporaryDirectory() as tmp:
        governance = None if ahead_by is None else SimulatedGovernance(
            load_catalog(), Path(tmp) / "state", ahead_by=ahead_by)
        began = time.perf_counter()
        simulate(Path(tmp) / "out", days=days, gpus=gpus, seed=seed, start=START, governance=governance, write=False)
        wall = time.perf_counter() - began
        log = decision_log(Path(tmp) / "out")
    counters = {} if governance is None else {
        "looks": governance.checks, "passes": governance.passes, "reused": governance.reused,
        "decisions": sum(governance.decisions.values())}
    return wall, counters, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--gpus", type=int, default=None, help="scale the default pool (default: 256 GPUs)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    variants = {"off": None, "on": AHEAD,
                "on, one minute at a time": dt.timedelta(0)}
    walls: dict[str, list[float]] = {name: [] for name in variants}
    print(f"{args.days} days, {args.gpus or 'the default'} GPUs, seed {args.seed}, {os.cpu_count()} CPUs; "
          f"load {os.getloadavg()[0]:.1f}")
    for i in range(args.runs):
        logs = {}
        for name, ahead_by in variants.items():
            wall, counters, logs[name] = run(args.days, args.gpus, args.seed, ahead_by)
            walls[name].append(wall)
            print(f"  run {i + 1} {name:26s} {wall:7.1f} s  " + ", ".join(f"{k} {v:,}" for k, v in counters.items()),
                  flush=True)
        if (where := difference(logs["on"], logs["on, one minute at a time"])) is not None:
            raise SystemExit(f"the runs with policies decided differently ({where}): looks evaluated ahead are wrong")
    median = {name: statistics.median(w) for name, w in walls.items()}
    print("medians: " + ", ".join(f"{name} {s:.1f} s" for name, s in median.items()))
    print(f"policies on / off: {median['on'] / median['off']:.2f}x (one minute at a time: "
          f"{median['on, one minute at a time'] / median['off']:.2f}x); looks ahead / one minute at a time: "
          f"{median['on'] / median['on, one minute at a time']:.2f}")


if __name__ == "__main__":
    main()
