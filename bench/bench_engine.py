"""Allocator engine throughput: a virtual month of mixed work on the default 256-GPU pool.

    .venv/bin/python bench/bench_engine.py                    # 10,000 jobs over 30 days, records in memory
    .venv/bin/python bench/bench_engine.py --jobs 20000 --sink jsonl   # records to daily JSONL files (temp dir)

It generates a seeded stream of jobs (training in the tenants' queues, experiments in the backfill
queue, inference, interactive sessions on MIG slices and time-sliced shares; lognormal run times,
some failures and some runs past their caps), drives `allocator.engine.Engine` in virtual time
(submit, finish, `tick` at `next_timer()`, `schedule` after every instant with activity) and prints
the records written per second of wall time, with a breakdown of what happened. The workload is
deliberately heavier than the pool (H100s are oversubscribed) so that queues, borrowing,
preemption and backfill all occur. No assertions: the figures are for the report.
"""
from __future__ import annotations

import argparse
import datetime as dt
import heapq
import random
import tempfile
import time
from collections import Counter

from allocator.engine import Engine
from allocator.model import Action, ActionKind, AdmissionError, JobSpec, JobState, ShareMode, Template
from allocator.pool import default_pool
from allocator.records import JsonlDaySink, MemorySink

START = dt.datetime(2026, 11, 1)
TRAIN_QUEUES = {"vision": "vision-train", "nlp": "nlp-train", "speech": "speech-train", "recsys": "recsys-train",
                "research": "research-train"}


def workload(n: int, days: int, seed: int) -> list[tuple[dt.datetime, JobSpec, float, JobState]]:
    """(arrival, spec, run time in seconds, how it ends) for n jobs, sorted by arrival."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        at = START + dt.timedelta(seconds=rng.uniform(0, days * 86400))
        tenant = rng.choice(list(TRAIN_QUEUES))
        user = f"{tenant}-user{rng.randint(1, 6)}"
        kind = rng.random()
        ends = JobState.FAILED if rng.random() < 0.06 else JobState.COMPLETED
        if kind < 0.55:
            model = rng.choices(["H100", "A100", "L40S"], [0.45, 0.4, 0.15])[0]
            if model == "L40S" and tenant in ("vision", "nlp"):
                model = "A100"
            gpus = rng.choices([1, 2, 4, 8, 16], [0.35, 0.2, 0.2, 0.18, 0.07])[0]
            run = min(rng.lognormvariate(8.6, 1.1), 170_000)
            spec = JobSpec(tenant, TRAIN_QUEUES[tenant], user, Template.TRAINING, model, gpus, job_name=f"train-{i}",
                           expected_runtime_s=int(run * rng.uniform(0.8, 1.5)) + 60, checkpoint_policy="hourly")
        elif kind < 0.75:
            model = rng.choice(["H100", "A100", "L40S"])
            mode, profile, gpus = ShareMode.WHOLE, None, rng.choice([1, 1, 2, 4])
            if model == "A100" and rng.random() < 0.4:
                mode, profile, gpus = ShareMode.MIG, rng.choice(["1g.10gb", "2g.20gb", "3g.40gb"]), 1
            run = min(rng.lognormvariate(7.8, 1.0), 80_000)
            spec = JobSpec(tenant, "backfill", user, Template.EXPERIMENT, model, gpus, mode, profile,
                           job_name=f"exp-{i}", time_limit_s=rng.choice([None, 14_400, 43_200]))
        elif kind < 0.83:
            model = rng.choice(["A100", "L40S"])
            mode = ShareMode.TIMESLICE if model == "L40S" and rng.random() < 0.5 else ShareMode.WHOLE
            run = rng.uniform(3_600, 5 * 86_400)
            spec = JobSpec(tenant, "platform-serve", user, Template.INFERENCE, model, rng.choice([1, 1, 2]), mode,
                           job_name=f"serve-{i}", min_replicas=1, rollback="previous-revision")
        else:
            if rng.random() < 0.5:
                model, mode, profile = "A100", ShareMode.MIG, "1g.10gb"
            else:
                model, mode, profile = "L40S", ShareMode.TIMESLICE, None
            run = rng.uniform(1_800, 60_000)
            spec = JobSpec(tenant, "interactive", user, Template.INTERACTIVE, model, 1, mode, profile,
                           job_name=f"notebook-{i}", idle_reminder_s=3_600)
        out.append((at, spec, run, ends))
    out.sort(key=lambda item: item[0])
    return out


def drive(engine: Engine, jobs: list[tuple[dt.datetime, JobSpec, float, JobState]]) -> Counter:
    """Runs the workload to the end in virtual time; returns counts of what the driver did."""
    stats: Counter = Counter()
    plan: dict[str, tuple[float, JobState]] = {}
    heap: list[tuple[dt.datetime, int, str, object]] = []
    for n, (at, spec, run, ends) in enumerate(jobs):
        heap.append((at, n, "submit", (spec, run, ends)))
    days = int((jobs[-1][0] - START).total_seconds() // 86400) + 1 if jobs else 0
    for k in range(days * 4):  # governance rounds every 6 hours
        heap.append((START + dt.timedelta(hours=6 * k + 3), -1, "govern", k))
    heapq.heapify(heap)
    seq = len(jobs)
    while True:
        timer = engine.next_timer()
        if not heap and timer is None:
            break
        now = min(t for t in (heap[0][0] if heap else None, timer) if t is not None)
        while heap and heap[0][0] <= now:
            _, _, kind, payload = heapq.heappop(heap)
            if kind == "submit":
                spec, run, ends = payload
                try:
                    job = engine.submit(spec, now, spec.user)
                except AdmissionError as error:
                    stats[f"refused:{error.rule}"] += 1
                    continue
                plan[job.job_id] = (run, ends)
                stats["submitted"] += 1
            elif kind == "govern":
                govern(engine, now, payload, stats)
            else:
                job_id, attempt = payload
                job = engine.jobs[job_id]
                if job.state == JobState.RUNNING and job.attempt == attempt:
                    run, ends = plan[job_id]
                    state = ends if ends != JobState.FAILED or job.retries_used < 1 else JobState.COMPLETED
                    engine.finish(job_id, now, state, 0 if state == JobState.COMPLETED else 1,
                                  None if state == JobState.COMPLETED else "CUDA error: an illegal memory access")
                    stats[f"finish:{state.value}"] += 1
        engine.tick(now)
        started = engine.schedule(now)
        stats["schedule_calls"] += 1
        for job in started:
            run, _ = plan[job.job_id]
            seq += 1
            # a failing attempt dies early; a resumed training job runs what was left (checkpoints hourly)
            if plan[job.job_id][1] == JobState.FAILED and job.retries_used < 1:
                run = run * 0.3
            heapq.heappush(heap, (now + dt.timedelta(seconds=run), seq, "finish", (job.job_id, job.attempt)))
    return stats


def govern(engine: Engine, now: dt.datetime, round_no: int, stats: Counter) -> None:
    """What the pipeline's policies would send: remind then reclaim long interactive sessions, try to
    reclaim inference (refused), cap a long backfill run, and once a week propose and approve a quota."""
    running = sorted((j for j in engine.holders().values()), key=lambda j: j.job_id)
    seen: set[str] = set()
    for job in running:
        if job.job_id in seen:
            continue
        seen.add(job.job_id)
        hours = (now - job.started_at).total_seconds() / 3600
        template = job.spec.template
        kind = None
        if template == Template.INTERACTIVE and hours > 8:
            kind = ActionKind.RECLAIM
        elif template == Template.INTERACTIVE and hours > 4:
            kind = ActionKind.REMIND
        elif template == Template.INFERENCE and hours > 72:
            kind = ActionKind.RECLAIM
        elif template == Template.EXPERIMENT and hours > 10:
            kind = ActionKind.CAP_RUNTIME
        if kind is None:
            continue
        action = Action(kind, f"bench/v1:{job.job_id}:{job.attempt}:{kind.value}", job.job_id, "governance-bot",
                        reason=f"{kind.value} after {hours:.0f} h", policy="bench", policy_version="v1",
                        runtime_s=int(hours * 3600) + 1800 if kind == ActionKind.CAP_RUNTIME else None)
        result = engine.apply_action(action, now)
        stats[f"action:{kind.value}:{result.outcome.value}"] += 1
    if round_no % 28 == 27:
        queue = engine.queues["research-train"]
        quota = {**queue.quota, "H100": queue.quota.get("H100", 0) + (4 if round_no % 56 == 27 else -4)}
        result = engine.apply_action(Action(ActionKind.QUOTA_CHANGE, f"bench/v1:quota:{round_no}", queue.name,
                                            "governance-bot", reason="research waits for H100", quota=quota), now)
        stats[f"action:quota_change:{result.outcome.value}"] += 1
        if result.proposal_id:
            approved = engine.approve(result.proposal_id, now, "ops-admin")
            stats[f"approve:{approved.outcome.value}"] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sink", choices=("memory", "jsonl"), default="memory")
    args = parser.parse_args()

    pool = default_pool()
    jobs = workload(args.jobs, args.days, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        memory = MemorySink()
        sink = JsonlDaySink(tmp) if args.sink == "jsonl" else memory
        engine = Engine(pool, sink)
        began = time.perf_counter()
        stats = drive(engine, jobs)
        if isinstance(sink, JsonlDaySink):
            sink.close()
            events = sum(sum(1 for _ in p.open()) for p in sink.paths if "allocator_events" in str(p))
            audits = sum(sum(1 for _ in p.open()) for p in sink.paths if "allocator_audit" in str(p))
        else:
            events, audits = len(memory.events), len(memory.audits)
        elapsed = time.perf_counter() - began
        state_began = time.perf_counter()
        state = engine.state_dict()
        Engine.from_state(pool, state, MemorySink())
        state_s = time.perf_counter() - state_began

    types = Counter(e["type"] for e in memory.events) if memory.events else Counter()
    print(f"pool: {len(pool.slots())} slots on {len(pool.nodes)} nodes; workload: {args.jobs:,} jobs over "
          f"{args.days} days (seed {args.seed}), sink {args.sink}")
    print(f"engine: {events:,} events + {audits:,} audit records in {elapsed:.2f} s -> "
          f"{events / elapsed:,.0f} events/s ({stats['schedule_calls']:,} schedule calls, "
          f"{elapsed / max(stats['schedule_calls'], 1) * 1e6:.0f} us each)")
    if types:
        print("events: " + ", ".join(f"{k} {v:,}" for k, v in sorted(types.items())))
    finals = Counter(j.state.value for j in engine.jobs.values())
    print("jobs: " + ", ".join(f"{k} {v:,}" for k, v in sorted(finals.items())))
    refused = {k.split(":", 1)[1]: v for k, v in stats.items() if k.startswith("refused:")}
    if refused:
        print("refused at submit: " + ", ".join(f"{k} {v:,}" for k, v in sorted(refused.items())))
    actions = {k.removeprefix("action:"): v for k, v in stats.items() if k.startswith(("action:", "approve:"))}
    print("actions: " + ", ".join(f"{k} {v:,}" for k, v in sorted(actions.items())))
    print(f"state_dict + from_state of the final state: {state_s:.2f} s")


if __name__ == "__main__":
    main()
