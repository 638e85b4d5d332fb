"""A tiny pool whose smallest sufficient change is known by construction: one H100 node held all day by
one job while 2-GPU jobs queue behind it. Each replay is one simulated day (~0.1 s)."""
from __future__ import annotations

import datetime as dt

from allocator.model import GpuSpec, JobSpec, JobState, NodeSpec, PoolConfig, QueueSpec, Template
from allocator.sim.workload import Behaviour, PlannedJob, Workload
from allocator.telemetry import ActivityProfile
from pipelines.capacity.demand import Demand
from pipelines.capacity.replay import Change
from pipelines.capacity.store import Recommendation

START = dt.datetime(2026, 11, 2)


def demand(waiting: int) -> Demand:
    """One 8-GPU H100 node, held 20 h by the first job; `waiting` 2-GPU jobs of 6 h submitted an hour in."""
    nodes = (NodeSpec("h01", tuple(GpuSpec("h01", i, "H100") for i in range(8))),)
    pool = PoolConfig(nodes=nodes, queues=(QueueSpec("train", "t", ("H100",), {"H100": 8.0}),), tenants=("t",))

    def job(i: int, at: dt.datetime, gpus: int, hours: int) -> PlannedJob:
        spec = JobSpec("t", "train", "u", Template.TRAINING, "H100", gpus=gpus, expected_runtime_s=hours * 3600,
                       checkpoint_policy="hourly")
        return PlannedJob(f"j{i}", at, spec, Behaviour(hours * 3600, JobState.COMPLETED, 0, None, ActivityProfile()))

    jobs = [job(0, START, 8, 20)] + [job(i, START + dt.timedelta(hours=1, minutes=i), 2, 6)
                                     for i in range(1, waiting + 1)]
    return Demand(START, 1, pool, Workload(tuple(jobs), (), None, None, {}), (), False, {})


def advice(nodes: int) -> Recommendation:
    return Recommendation(kind="add_nodes", target="H100", recommendation="", recommendation_zh="", quantity=nodes,
                          unit="nodes", confidence_score=0.5, impact_gpu_hours=1.0, evidence={}, gpu_model="H100")


def sizes(nodes: int) -> dict[int, Change]:
    return {n: Change(add_nodes={"H100": n}) for n in range(1, nodes + 1)}
