"""Benchmark: one live `idle_reclaim` tick (pipelines/governance/tick.py) on a synthetic pool.

    .venv/bin/python bench/bench_tick.py                       # 1,000 and 10,000 GPUs
    .venv/bin/python bench/bench_tick.py --gpus 1000 --runs 10
    .venv/bin/python bench/bench_tick.py --gpus 10000 --runs 1 --profile

Each pool size runs in its own process, so that its peak RSS is its own. The pool: nodes of 8 GPUs,
allocations of 1, 2, 4 or 8 GPUs covering about 70% of them, 8 tenants with a training, a dev and a
serving queue each, jobs that are busy, idle all along, gone idle, idle with keep-alive spikes,
partly idle (one GPU of several busy) or bursty; some training jobs past 1.5x their declared run
time (overrun); checkpoint events in the allocator's event log for the jobs that progress; one
tenant's training queue and one job allow-listed; the catalog's rate limits (models/policies).

The telemetry is landed as the `dcgm_scrape` sensor lands it: one Parquet file per 15 s round in
`landing/dcgm_parquet/<day>/`, with the three activity metrics the tick reads, from midnight on. The
rounds of each minute are written just before that minute's tick, so a tick never sees the future.

What is timed is `governance_tick` itself, with the transport stubbed: the allocator's running jobs
and queues come from memory (no HTTP, nothing pulled) and delivery goes to an enforcer that answers
`dry_run` at once; everything else (reading the rounds, per-GPU and per-allocation minutes, the
progress log, evaluating the live kinds, planning against the SQLite outbox, recording, the
decision log) runs as in production. An untimed warm-up tick 16 minutes before the first timed one
leaves reminders in the outbox, so the timed ticks find reclaims due and the hourly rate limit
biting: the steady state, not a first tick on an empty outbox.
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import datetime as dt
import io
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from allocator.model import ActionResult, Outcome
from pipelines.connectors.allocator import LANDING
from pipelines.governance.live import SCRAPE_SOURCE
from pipelines.governance.outbox import Outbox
from pipelines.governance.tick import governance_tick, live_inputs
from pipelines.policies.catalog import default_lookback, load_catalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.model import LIVE_KINDS, Exemption
from pipelines.policies.planner import plan

TARGETS_S = {1000: 0.3, 10000: 2.0}
GPUS_PER_NODE = 8
ROUNDS_PER_MINUTE = 4  # the scrape's default interval_s is 15
ALLOCATED_SHARE = 0.7
TENANTS = [f"tenant-{i:02d}" for i in range(8)]
QUEUES = {  # queue suffix -> (templates with their weights, max_runtime_s, low_priority)
    "train": ({"training": 0.85, "experiment": 0.15}, 7 * 86400, False),
    "dev": ({"interactive": 0.6, "experiment": 0.4}, 8 * 3600, True),
    "serve": ({"inference": 1.0}, None, False),
}
QUEUE_WEIGHTS = {"train": 0.6, "dev": 0.25, "serve": 0.15}
# job behaviour -> weight; see `activity`
BEHAVIOURS = {"busy": 0.55, "idle": 0.12, "went_idle": 0.10, "keepalive": 0.06, "partial": 0.09, "bursty": 0.08}
WARMUP = dt.timedelta(minutes=16)  # past idle-allocation's 15-minute grace: reclaims are due
METRICS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")


@dataclasses.dataclass
class Pool:
    """The synthetic pool: running jobs and queues as the allocator's API lists them, and the
    per-sample activity of every GPU (rows: GPUs, columns: rounds since midnight)."""

    jobs: list[dict]
    queues: list[dict]
    hosts: np.ndarray
    gpu_index: np.ndarray
    activity: np.ndarray  # float32 0..1, NaN where the round has no sample
    fb_used_mib: np.ndarray
    midnight: dt.datetime


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def build_pool(n_gpus: int, midnight: dt.datetime, end: dt.datetime, seed: int = 15) -> Pool:
    """Jobs, queues and per-round activity of `n_gpus` GPUs from `midnight` to `end`, vectorised
    over GPUs and rounds (the only Python loop is over jobs, to build the API's job dicts)."""
    rng = np.random.default_rng(seed)
    n_nodes = -(-n_gpus // GPUS_PER_NODE)
    hosts = np.repeat(np.array([f"gpu-node-{i:05d}" for i in range(n_nodes)]), GPUS_PER_NODE)[:n_gpus]
    gpu_index = np.tile(np.arange(GPUS_PER_NODE), n_nodes)[:n_gpus]

    # Jobs packed in order: whole nodes for 8-GPU jobs, sizes 1/2/4 fill the rest of a node.
    sizes = rng.choice([1, 2, 4, 8], p=[0.35, 0.2, 0.2, 0.25], size=n_gpus)
    sizes = sizes[np.cumsum(sizes) <= int(n_gpus * ALLOCATED_SHARE)]
    n_jobs = len(sizes)
    job_of_gpu = np.full(n_gpus, -1)
    job_of_gpu[: sizes.sum()] = np.repeat(np.arange(n_jobs), sizes)
    # the unallocated 30% spread over the pool rather than all at its end
    order = rng.permutation(n_nodes)
    node_perm = (order[:, None] * GPUS_PER_NODE + np.arange(GPUS_PER_NODE)).ravel()
    job_of_gpu = job_of_gpu[np.argsort(node_perm[node_perm < n_gpus])]

    tenant = rng.integers(0, len(TENANTS), n_jobs)
    suffix = rng.choice(list(QUEUE_WEIGHTS), p=list(QUEUE_WEIGHTS.values()), size=n_jobs)
    behaviour = rng.choice(list(BEHAVIOURS), p=list(BEHAVIOURS.values()), size=n_jobs)
    now_span_min = (end - midnight).total_seconds() / 60
    # a fifth started within the last two hours, the rest up to three days ago; dev work (8 h cap)
    # mostly within its cap, a few past it (overrun)
    started_min_ago = np.where(rng.random(n_jobs) < 0.2, rng.uniform(5, 120, n_jobs), rng.uniform(120, 3 * 1440, n_jobs))
    started_min_ago = np.where((suffix == "dev") & (rng.random(n_jobs) < 0.95),
                               np.minimum(started_min_ago, rng.uniform(5, 7 * 60, n_jobs)), started_min_ago)
    onset = rng.uniform(0, now_span_min, n_jobs)  # when a went_idle job stopped working (minutes from midnight)
    phase = rng.integers(0, 40, n_jobs)
    period = rng.integers(8, 20, n_jobs)

    queues = [
        {"name": f"{t}-{s}", "tenant": t, "max_runtime_s": QUEUES[s][1], "low_priority": QUEUES[s][2]}
        for t in TENANTS for s in QUEUES
    ]
    jobs = []
    gpus_of_job = np.argsort(job_of_gpu, kind="stable")[np.sum(job_of_gpu < 0):]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(job_of_gpu[job_of_gpu >= 0], minlength=n_jobs))])
    for j in range(n_jobs):  # one dict per job, as GET /v1/jobs?state=RUNNING lists them
        templates = QUEUES[suffix[j]][0]
        template = rng.choice(list(templates), p=list(templates.values()))
        started = end - dt.timedelta(minutes=float(started_min_ago[j]))
        elapsed_s = started_min_ago[j] * 60
        spec = {"template": str(template), "gpu_model": "H100", "share_mode": None,
                "expected_runtime_s": None, "idle_reminder_s": None, "checkpoint_policy": None,
                "min_replicas": None, "rollback": None, "reservation": None}
        if template == "training":
            # one in twenty past 1.5x its declared time: an overrun
            factor = rng.uniform(1.6, 3.0) if rng.random() < 0.05 else rng.uniform(0.2, 0.9)
            spec.update(expected_runtime_s=int(elapsed_s / factor), checkpoint_policy="every-30m")
        elif template == "inference":
            spec.update(min_replicas=1, rollback="previous")
        elif template == "interactive" and rng.random() < 0.3:
            spec.update(idle_reminder_s=int(rng.choice([1800, 2700])))
        jobs.append({
            "job_id": f"j-{j:06d}", "state": "RUNNING", "tenant": TENANTS[tenant[j]],
            "queue": f"{TENANTS[tenant[j]]}-{suffix[j]}", "user": f"user-{tenant[j]}-{j % 7}",
            "attempt": 1 + int(rng.random() < 0.05), "started_at": _iso(started), "ended_at": None,
            "gpus": [{"host": str(hosts[g]), "gpu": int(gpu_index[g]), "gpu_instance_id": None,
                      "gpu_instance_profile": None, "fraction": 1.0}
                     for g in gpus_of_job[bounds[j]:bounds[j + 1]]],
            "spec": spec,
        })

    first_of_job = np.zeros(n_gpus, dtype=bool)
    first_of_job[gpus_of_job[bounds[:-1]]] = True
    activity, fb = activity_matrix(rng, job_of_gpu, first_of_job, behaviour, onset, phase, period,
                                   int(now_span_min) + 1)
    return Pool(jobs=jobs, queues=queues, hosts=hosts, gpu_index=gpu_index, activity=activity,
                fb_used_mib=fb, midnight=midnight)


def activity_matrix(rng, job_of_gpu, first_of_job, behaviour, onset, phase, period, minutes):
    """Per GPU and 15 s round: activity 0..1 (NaN: no sample, 0.5% of rounds) and framebuffer MiB.
    A partly idle job's first GPU works and the others idle."""
    n_gpus = len(job_of_gpu)
    m = np.arange(minutes)[None, :]
    job = np.maximum(job_of_gpu, 0)
    b = np.where(job_of_gpu >= 0, behaviour[job], "free")[:, None]
    first_of_job = first_of_job[:, None]
    busy = (
        (b == "busy")
        | ((b == "went_idle") & (m < onset[job][:, None]))
        | ((b == "keepalive") & ((m + phase[job][:, None]) % period[job][:, None] == 0))
        | ((b == "partial") & first_of_job)
        | ((b == "bursty") & (((m + phase[job][:, None]) // (period[job][:, None] * 2)) % 2 == 0))
    )
    rounds = np.repeat(busy, ROUNDS_PER_MINUTE, axis=1)
    shape = rounds.shape
    level = np.where(rounds, rng.uniform(0.3, 0.95, shape), rng.uniform(0.0, 0.015, shape)).astype(np.float32)
    level[(b == "free")[:, 0]] = 0.0
    level[rng.random(shape) < 0.005] = np.nan
    fb = np.where(rounds, rng.uniform(30000, 70000, shape), 18000.0).astype(np.float32)
    fb[(b == "free")[:, 0]] = 0.0
    assert level.shape == (n_gpus, minutes * ROUNDS_PER_MINUTE)
    return level, fb


def write_rounds(pool: Pool, landing: Path, start: int, stop: int) -> None:
    """Land rounds [start, stop) (indexes from midnight) as the scrape does: one Parquet file each."""
    folder = landing / SCRAPE_SOURCE / pool.midnight.date().isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    hosts = pl.Series("host", pool.hosts, pl.String)
    gpus = pl.Series("gpu", pool.gpu_index, pl.Int64)
    for r in range(start, stop):
        at = pool.midnight + dt.timedelta(seconds=15 * r)
        act = pool.activity[:, r]
        seen = ~np.isnan(act)
        values = [act[seen], np.clip(act[seen] * 100 + 1, 0, 100), pool.fb_used_mib[seen, r]]
        frame = pl.concat([
            pl.DataFrame({"host": hosts.filter(seen), "gpu": gpus.filter(seen),
                          "value": pl.Series(v.astype(np.float64))}).with_columns(metric=pl.lit(name))
            for name, v in zip(METRICS, values, strict=True)
        ]).with_columns(sampled_at=pl.lit(at, pl.Datetime("us")), gpu_instance_id=pl.lit(None, pl.Int64))
        frame.select("sampled_at", "host", "gpu", "gpu_instance_id", "metric", "value").write_parquet(
            folder / f"scrape-{at:%H%M%S}-r{r:05d}.parquet", compression="zstd")


def write_events(pool: Pool, landing: Path, end: dt.datetime, seed: int = 16) -> int:
    """The allocator's event log of the day as the tick's pull leaves it: each job's start (when it
    was today) and, for training jobs that work, a checkpoint every 30 minutes; written in one go."""
    rng = np.random.default_rng(seed)
    frame = pl.DataFrame({
        "job_id": [j["job_id"] for j in pool.jobs], "attempt": [j["attempt"] for j in pool.jobs],
        "started_at": [dt.datetime.fromisoformat(j["started_at"].rstrip("Z")) for j in pool.jobs],
        "checkpoints": [j["spec"]["checkpoint_policy"] is not None and rng.random() < 0.7 for j in pool.jobs],
    })
    day_start = pl.lit(pool.midnight, pl.Datetime("us"))
    starts = frame.filter(pl.col("started_at") >= day_start).select(
        "job_id", "attempt", ts=pl.col("started_at"), type=pl.lit("start"))
    checkpoints = (
        frame.filter("checkpoints")
        .with_columns(ts=pl.datetime_ranges(pl.max_horizontal("started_at", day_start), pl.lit(end), "30m"))
        .explode("ts").drop_nulls("ts")
        .select("job_id", "attempt", "ts", type=pl.lit("checkpoint"))
    )
    events = pl.concat([starts, checkpoints]).sort("ts").with_columns(pl.col("ts").dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    folder = landing / LANDING["events"] / pool.midnight.date().isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    events.select("ts", "type", "job_id", "attempt").write_ndjson(folder / "api.jsonl")
    return events.height


@dataclasses.dataclass
class _Pulled:
    records: int = 0


class MemoryAllocator:
    """The tick's AllocatorReader without HTTP: the event log is already in the landing zone."""

    def __init__(self, pool: Pool):
        self.pool = pool

    def pull(self, landing, source, max_pages=None):
        return _Pulled()

    def running_jobs(self) -> list[dict]:
        return self.pool.jobs

    def queues(self) -> list[dict]:
        return self.pool.queues


class DryRunEnforcer:
    """Answers every action `dry_run` at once: delivery's bookkeeping without the HTTP call."""

    engine = "allocator"

    def apply(self, action, now):
        return ActionResult(action.idempotency_key, action.kind, action.target, Outcome.DRY_RUN, "benchmark")


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_one(n_gpus: int, runs: int, profile: bool) -> None:
    catalog = load_catalog()
    lookback = default_lookback(catalog)
    midnight = dt.datetime(2026, 11, 2)
    t0 = midnight + lookback + dt.timedelta(minutes=20)  # the day's folder holds a little more than the lookback
    ticks = [t0 + WARMUP + dt.timedelta(minutes=i) for i in range(runs + int(profile))]
    # allow-listed: one tenant's training queue (idle-allocation) and one job (every policy)
    catalog = dataclasses.replace(catalog, exemptions=(
        *catalog.exemptions,
        Exemption(tenant=TENANTS[3], policy="idle-allocation", queue=f"{TENANTS[3]}-train",
                  reason="benchmark allow-list", expires_at=t0 + dt.timedelta(days=30), granted_by="bench"),
        Exemption(tenant=TENANTS[5], job_id="j-000005", reason="benchmark allow-list",
                  expires_at=t0 + dt.timedelta(days=30), granted_by="bench"),
    ))
    began = time.perf_counter()
    pool = build_pool(n_gpus, midnight, ticks[-1])
    with tempfile.TemporaryDirectory(prefix="bench_tick_") as tmp:
        landing = Path(tmp) / "landing"
        round_of = lambda t: int((t - midnight).total_seconds() // 15)
        write_rounds(pool, landing, 0, round_of(t0))
        n_events = write_events(pool, landing, ticks[-1])
        allocated = sum(len(j["gpus"]) for j in pool.jobs)
        print(f"pool: {n_gpus:,} GPUs on {len(set(pool.hosts)):,} nodes, {len(pool.jobs):,} running jobs holding "
              f"{allocated:,} GPUs ({allocated / n_gpus:.0%}); lookback {lookback}; {n_events:,} events in the log; "
              f"built and landed in {time.perf_counter() - began:.1f} s")
        outbox = Outbox(Path(tmp) / "outbox.db", landing)
        client, enforcers = MemoryAllocator(pool), {"allocator": DryRunEnforcer()}
        warm = governance_tick(t0, landing=landing, catalog=catalog, outbox=outbox, client=client,
                               enforcers=enforcers, lookback=lookback)
        print(f"warm-up tick at {t0:%H:%M} (untimed): {warm.duration_s:.2f} s, {warm.findings.height} findings, "
              f"{sum(warm.decisions.values())} decisions")
        landed, times, reports, added = round_of(t0), [], [], 0.0
        for i, now in enumerate(ticks[:runs]):
            write_rounds(pool, landing, landed, round_of(now))
            landed = round_of(now)
            rss_before = _rss_mib()
            start = time.perf_counter()
            report = governance_tick(now, landing=landing, catalog=catalog, outbox=outbox, client=client,
                                     enforcers=enforcers, lookback=lookback)
            times.append(time.perf_counter() - start)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            added = max(added, peak - rss_before)
            reports.append(report)
            print(f"  tick {i + 1} at {now:%H:%M}: {times[-1]:.3f} s; {report.summary()[:400]}")
        last = reports[-1]
        inputs = live_inputs(landing, pool.jobs, pool.queues, ticks[runs - 1], lookback)
        phases = _phases(landing, pool, catalog, outbox, ticks[runs - 1], lookback)
        target = TARGETS_S.get(n_gpus)
        verdict = "no target for this size" if target is None else (
            f"target < {target} s: {'met' if statistics.median(times) < target else 'NOT met'}")
        print(f"RESULT {n_gpus:,} GPUs: tick median {statistics.median(times):.3f} s, max {max(times):.3f} s "
              f"of {runs} run(s); peak RSS added {added:,.0f} MiB (process peak "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB); "
              f"{inputs.allocations.height:,} allocations of {last.running_jobs:,} jobs evaluated over "
              f"{inputs.minutes.height:,} allocation-minutes; findings {last.findings.height:,} "
              f"({last.findings_by_policy}); decisions {sum(last.decisions.values()):,} ({dict(last.decisions)}); "
              f"{verdict}")
        print("  phases of one tick (s): " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
        if profile:
            write_rounds(pool, landing, landed, round_of(ticks[-1]))
            profiler = cProfile.Profile()
            profiler.enable()
            governance_tick(ticks[-1], landing=landing, catalog=catalog, outbox=outbox, client=client,
                            enforcers=enforcers, lookback=lookback)
            profiler.disable()
            for order in ("tottime", "cumulative"):
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(25)
                print(f"--- profile of one tick by {order} ---\n" + text.getvalue().split("\n\n", 2)[-1])
        outbox.close()


def _phases(landing, pool, catalog, outbox, now, lookback) -> dict[str, float]:
    """The tick's pure steps timed apart at `now` (nothing recorded): inputs, evaluation, plan."""
    marks = [time.perf_counter()]
    inputs = live_inputs(landing, pool.jobs, pool.queues, now, lookback)
    marks.append(time.perf_counter())
    findings = evaluate(inputs, catalog, now, kinds=LIVE_KINDS)
    marks.append(time.perf_counter())
    plan(findings, catalog, outbox, now, jobs_ended=set(), evaluated_kinds=LIVE_KINDS)
    marks.append(time.perf_counter())
    return dict(zip(("inputs (live_inputs)", "evaluate", "plan"), np.diff(marks), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000], help="pool sizes (default 1000 10000)")
    parser.add_argument("--runs", type=int, default=None,
                        help="timed ticks per size (default 5, and 2 from 5,000 GPUs up)")
    parser.add_argument("--profile", action="store_true", help="cProfile one more tick and print the top costs")
    args = parser.parse_args()
    if len(args.gpus) > 1:  # one process per size: each peak RSS is its own
        for n in args.gpus:
            extra = ["--runs", str(args.runs)] if args.runs else []
            subprocess.run([sys.executable, __file__, "--gpus", str(n), *extra,
                            *(["--profile"] if args.profile else [])], check=True)
        return
    n = args.gpus[0]
    load = os.getloadavg()
    print(f"== {n:,} GPUs; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs; "
          f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    run_one(n, args.runs or (5 if n < 5000 else 2), args.profile)


if __name__ == "__main__":
    main()
