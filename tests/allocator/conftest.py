"""A small pool for the engine's rules, job-spec helpers and a seeded driver in virtual time.

The small pool (12 H100, 6 A100, 2 L40S):
- h-01..h-03: 4 whole H100 each (node size 4);
- a-01: 4 whole A100; a-02: 2 MIG A100, each 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb;
- l-01: 2 L40S time-sliced, 4 replicas each.
Queues: vision-train (vision, H100 4, A100 2, L40S 1), nlp-train (nlp, H100 4, priority 50),
research (research, no quota: borrows, priority 40), serve (inference, shared, H100 2, A100 1,
non-preemptible, priority 90), backfill (low priority, shared, priority 10).
"""
from __future__ import annotations

import datetime as dt
import heapq
import random
from collections.abc import Iterable

from allocator.engine import Engine
from allocator.model import JobSpec, JobState, PoolConfig, ShareMode, Template
from allocator.pool import parse_pool
from allocator.records import MemorySink

T0 = dt.datetime(2026, 11, 2, 8, 0, 0)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def small_pool_doc(grace: int = 0, reservations: Iterable[dict] = ()) -> dict:
    return {
        "prices_per_gpu_hour": {"H100": 4.0, "A100": 2.5, "L40S": 1.2},
        "preemption_grace_s": grace,
        "tenants": ["vision", "nlp", "research", "platform"],
        "nodes": [
            {"hosts": "h-01..h-03", "node_pool": "h100", "gpu_model": "H100", "gpus": 4},
            {"hosts": "a-01", "node_pool": "a100", "gpu_model": "A100", "gpus": 4},
            {"hosts": "a-02", "node_pool": "a100-mig", "gpu_model": "A100", "gpus": 2, "share_mode": "mig",
             "mig_layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
            {"hosts": "l-01", "node_pool": "l40s", "gpu_model": "L40S", "gpus": 2, "share_mode": "timeslice",
             "replicas": 4},
        ],
        "queues": [
            {"name": "vision-train", "tenant": "vision", "gpu_models": ["H100", "A100", "L40S"],
             "quota": {"H100": 4, "A100": 2, "L40S": 1}, "priority": 50, "max_gpus_per_request": 8,
             "max_runtime_s": 86400, "retry_budget": 2, "templates": ["training", "experiment", "interactive"]},
            {"name": "nlp-train", "tenant": "nlp", "gpu_models": ["H100", "A100"], "quota": {"H100": 4},
             "priority": 50, "max_gpus_per_request": 8, "retry_budget": 1, "templates": ["training"]},
            {"name": "research", "tenant": "research", "gpu_models": ["H100", "A100", "L40S"], "quota": {},
             "priority": 40, "max_gpus_per_request": 8, "templates": ["training", "experiment"]},
            {"name": "serve", "tenant": "platform", "shared_with": ["*"], "gpu_models": ["H100", "A100", "L40S"],
             "quota": {"H100": 2, "A100": 1, "L40S": 1}, "priority": 90, "preemptible": False,
             "can_borrow": False, "max_gpus_per_request": 4, "templates": ["inference"]},
            {"name": "backfill", "tenant": "platform", "shared_with": ["*"], "gpu_models": ["H100", "A100", "L40S"],
             "priority": 10, "low_priority": True, "max_gpus_per_request": 8, "max_runtime_s": 43200,
             "retry_budget": 0, "templates": ["experiment", "training"]},
        ],
        "reservations": list(reservations),
    }


def small_pool(grace: int = 0, reservations: Iterable[dict] = ()) -> PoolConfig:
    return parse_pool(small_pool_doc(grace, reservations))


def make_engine(grace: int = 0, reservations: Iterable[dict] = ()) -> tuple[Engine, MemorySink]:
    sink = MemorySink()
    return Engine(small_pool(grace, reservations), sink), sink


def training(tenant: str = "vision", queue: str | None = None, model: str = "H100", gpus: int = 1,
             **fields: object) -> JobSpec:
    fields.setdefault("expected_runtime_s", 3600)
    fields.setdefault("checkpoint_policy", "hourly")
    return JobSpec(tenant, queue or f"{tenant}-train", f"{tenant}-alice", Template.TRAINING, model, gpus, **fields)


def experiment(tenant: str = "research", model: str = "H100", gpus: int = 1, queue: str = "backfill",
               **fields: object) -> JobSpec:
    return JobSpec(tenant, queue, f"{tenant}-bob", Template.EXPERIMENT, model, gpus, **fields)


def inference(tenant: str = "vision", model: str = "H100", gpus: int = 1, **fields: object) -> JobSpec:
    fields.setdefault("min_replicas", 1)
    fields.setdefault("rollback", "previous-revision")
    return JobSpec(tenant, "serve", f"{tenant}-carol", Template.INFERENCE, model, gpus, **fields)


def events_of(sink: MemorySink, job_id: str) -> list[tuple[str, int]]:
    return [(e["type"], e["attempt"]) for e in sink.events if e["job_id"] == job_id]


# --- a seeded workload driven in virtual time (for round trips and record checks) -------------------


def random_specs(seed: int, n: int) -> list[tuple[float, JobSpec, float, JobState]]:
    """(arrival minute, spec, run minutes, how it ends) for a mixed workload on the small pool."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        minute = rng.uniform(0, 48 * 60)
        run = rng.uniform(10, 600)
        ends = JobState.FAILED if rng.random() < 0.1 else JobState.COMPLETED
        pick = rng.random()
        if pick < 0.45:
            tenant = rng.choice(["vision", "nlp"])
            spec = training(tenant, model="H100", gpus=rng.choice([1, 1, 2, 4, 8]),
                            time_limit_s=rng.choice([None, 7200, 36000]))
        elif pick < 0.6:
            spec = training("research", queue="research", model=rng.choice(["H100", "A100"]), gpus=rng.choice([1, 2]))
        elif pick < 0.75:
            model = rng.choice(["H100", "A100", "L40S"])
            mode = {"H100": ShareMode.WHOLE, "A100": ShareMode.MIG, "L40S": ShareMode.TIMESLICE}[model]
            spec = experiment(rng.choice(["research", "vision"]), model=model, gpus=1, share_mode=mode,
                              mig_profile=rng.choice(["1g.10gb", "2g.20gb"]) if mode == ShareMode.MIG else None)
        elif pick < 0.85:
            model = rng.choice(["H100", "A100"])
            spec = inference(rng.choice(["vision", "nlp"]), model=model, gpus=1)
        else:
            spec = JobSpec("vision", "vision-train", "vision-dan", Template.INTERACTIVE, "L40S", 1,
                           ShareMode.TIMESLICE, idle_reminder_s=1800)
        out.append((minute, spec, run, ends))
    out.sort(key=lambda item: item[0])
    return out


class Driver:
    """Feeds a workload to an engine in virtual time; `run_until` stops at a given instant so that
    the engine can be saved and restored midway. All decisions depend only on the engine's answers."""

    def __init__(self, engine: Engine, workload: list[tuple[float, JobSpec, float, JobState]]) -> None:
        self.engine = engine
        self.plan: dict[str, tuple[float, JobState]] = {}
        self.heap: list[tuple[dt.datetime, int, str, object]] = [
            (at(m), i, "submit", (spec, run, ends)) for i, (m, spec, run, ends) in enumerate(workload)]
        heapq.heapify(self.heap)
        self.seq = len(workload)
        self.log: list[str] = []

    def step(self, now: dt.datetime) -> None:
        engine = self.engine
        while self.heap and self.heap[0][0] <= now:
            _, _, kind, payload = heapq.heappop(self.heap)
            if kind == "submit":
                spec, run, ends = payload
                job = engine.submit(spec, now, spec.user)
                self.plan[job.job_id] = (run, ends)
            else:
                job_id, attempt = payload
                job = engine.jobs[job_id]
                if job.state == JobState.RUNNING and job.attempt == attempt:
                    run, ends = self.plan[job_id]
                    state = ends if job.retries_used == 0 else JobState.COMPLETED
                    engine.finish(job_id, now, state, 0 if state == JobState.COMPLETED else 2, "test failure")
        for job in engine.tick(now):
            self.log.append(f"{now} tick {job.job_id} {job.state.value}")
        for job in engine.schedule(now):
            self.seq += 1
            run, _ = self.plan[job.job_id]
            heapq.heappush(self.heap, (now + dt.timedelta(minutes=run), self.seq, "finish",
                                       (job.job_id, job.attempt)))
            self.log.append(f"{now} start {job.job_id}")

    def next_time(self) -> dt.datetime | None:
        times = [t for t in (self.heap[0][0] if self.heap else None, self.engine.next_timer()) if t is not None]
        return min(times) if times else None

    def run_until(self, end: dt.datetime | None = None) -> None:
        while True:
            now = self.next_time()
            if now is None or (end is not None and now > end):
                return
            self.step(now)
