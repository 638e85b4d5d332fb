"""Benchmark: GPU-hours lost at preemptions with and without the fresh-checkpoint victim rule.

    PYTHONPATH=. .venv/bin/python bench/bench_preemption_checkpoints.py            # the demo month
    PYTHONPATH=. .venv/bin/python bench/bench_preemption_checkpoints.py --days 7   # a quick week

Simulates the default demo month (the default pool, seed 7, from 2026-11-01, the idle-reclaim policies
acting as in `gpupool demo`: `SimulatedGovernance` over the shipped catalog) twice with the same seed:
once with the scheduler's rule on (among equally preemptible victims, the one whose preemption loses
the least work: GPUs x time since its last ok checkpoint, `allocator.scheduler.work_at_risk`), once
with it off (`Engine.prefer_fresh_checkpoints = False`: the most recently started first). Nothing is
written (`write=False`). For each run it prints the preemptions and the GPU-hours they lost, from the
simulation's own records (`SimulationReport.preemption_lost_gpu_hours`: at each preemption, the
victim's GPUs x the time since its attempt's last ok checkpoint, or its start without one; a
preempted attempt resumes from that checkpoint) and per preemption, then the ratio on/off. The
preemptions themselves differ between the runs: which job is preempted changes what runs later.
"""
from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

from allocator.sim.simulator import SimulatedPool, SimulationReport, simulate
from pipelines.governance.simulated import SimulatedGovernance
from pipelines.policies.catalog import load_catalog


class _Governance(SimulatedGovernance):
    """The demo's governance, on an engine with the fresh-checkpoint rule switched on or off."""

    def __init__(self, state_dir: Path, prefer_fresh_checkpoints: bool):
        super().__init__(load_catalog(), state_dir)
        self.prefer_fresh_checkpoints = prefer_fresh_checkpoints

    def attach(self, pool: SimulatedPool) -> None:
        pool.engine.prefer_fresh_checkpoints = self.prefer_fresh_checkpoints  # before the first schedule
        super().attach(pool)


def run(days: int, gpus: int | None, seed: int, prefer: bool) -> tuple[SimulationReport, float]:
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-preempt-") as tmp:
        began = time.perf_counter()
        report = simulate(Path(tmp) / "landing", days, gpus, seed, dt.date(2026, 11, 1), write=False,
                          governance=_Governance(Path(tmp) / "governance", prefer))
        return report, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=30, help="days to simulate (default: the demo month)")
    parser.add_argument("--gpus", type=int, default=None, help="scale the default pool (default: 256 GPUs)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    lost = {}
    for prefer in (True, False):
        report, wall = run(args.days, args.gpus, args.seed, prefer)
        lost[prefer] = report.preemption_lost_gpu_hours
        label = "on " if prefer else "off"
        print(f"rule {label}: {report.preemptions:,} preemptions, {report.preemption_lost_gpu_hours:,.1f} GPU-hours "
              f"lost at them, {report.preemption_lost_gpu_hours / max(report.preemptions, 1):.3f} per preemption "
              f"({report.gpus} GPUs, {report.days} days, seed {report.seed}; {wall:.0f} s)")
    ratio = lost[True] / lost[False] if lost[False] else float("nan")
    print(f"lost GPU-hours, rule on / off: {ratio:.3f} ({lost[False] - lost[True]:,.1f} GPU-hours saved)")


if __name__ == "__main__":
    main()
