"""Benchmark: one live `idle_reclaim` tick (pipelines/governance/tick.py) on a synthetic pool.

    .venv/bin/python bench/bench_tick.py                       # 1,000 and 10,000 GPUs
    .venv/bin/python bench/bench_tick.py --gpus 1000 --runs 10
    .venv/bin/python bench/bench_tick.py --gpus 10000 --runs 1 --profile
    .venv/bin/python bench/bench_tick.py --scenario slurm mixed --telemetry rounds prometheus --runs 5

Scenarios: `allocator` (the allocator's jobs, `--gpus`), `slurm` (1,000 Slurm jobs on 8,000 GPUs,
read by parsing a generated `squeue --json` document with `slurm_running_work` at every tick) and
`mixed` (10,000 GPUs whose jobs are drawn to the allocator, Slurm and Kueue, 40/40/20; Kueue's as
job_view dicts). Telemetry: `rounds`, the landed scrape rounds, or `prometheus`, the same samples
answered over HTTP by a process of their own in Prometheus' encoding (raw samples of a range
vector, dcgm-exporter's labels), read by `PrometheusMinutes`.

Each pool size runs in its own process, so that its peak RSS is its own. The pool: nodes of 8 GPUs,
allocations of 1, 2, 4 or 8 GPUs covering about 70% of them, 8 tenants with a training, a dev and a
serving queue each, jobs that are busy, idle all along, gone idle, idle with keep-alive spikes,
partly idle (one GPU of several busy) or bursty; some training jobs past 1.5x their declared run
time (overrun); checkpoint events in the allocator's event log for the jobs that progress; one
tenant's training queue and one job allow-listed; the catalog's rate limits (models/policies).

The telemetry is landed as the `dcgm_scrape` sensor lands it: one Parquet file per 15 s round in
`landing/dcgm_parquet/<day>/`, with the three activity metrics the tick reads, from midnight on. The
rounds before each tick are written just before it, so a tick never sees the future. Ticks fall 31 s
past the minute, as a sensor's do, so the window's oldest minute is cut.

What is timed is `governance_tick` itself, with the transport stubbed: the engines' running jobs
and queues come from memory (no HTTP, nothing pulled; squeue's answer is parsed) and delivery goes
to enforcers that answer `dry_run` at once; Prometheus' answers are waited for, as a real one's
would be; everything else (reading the rounds, per-GPU and per-allocation minutes, the
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
import http.server
import io
import json
import math
import os
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import polars as pl

from allocator.model import ActionResult, Outcome
from pipelines.connectors.allocator import LANDING
from pipelines.connectors.prometheus import PrometheusConfig
from pipelines.connectors.slurm import SlurmGovernance
from pipelines.governance.live import SCRAPE_SOURCE
from pipelines.governance.outbox import Outbox
from pipelines.governance.running import AllocatorWork, RunningWork, slurm_running_work
from pipelines.governance.telemetry import PrometheusMinutes, ScrapeRounds
from pipelines.governance.tick import governance_tick, work_inputs
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


def build_pool(n_gpus: int, midnight: dt.datetime, end: dt.datetime, seed: int = 15,
               size_weights: tuple[float, ...] = (0.35, 0.2, 0.2, 0.25), max_jobs: int | None = None) -> Pool:
    """Jobs, queues and per-round activity of `n_gpus` GPUs from `midnight` to `end`, vectorised
    over GPUs and rounds (the only Python loop is over jobs, to build the API's job dicts); jobs of
    1, 2, 4 or 8 GPUs drawn with `size_weights`, at most `max_jobs` of them."""
    rng = np.random.default_rng(seed)
    n_nodes = -(-n_gpus // GPUS_PER_NODE)
    hosts = np.repeat(np.array([f"gpu-node-{i:05d}" for i in range(n_nodes)]), GPUS_PER_NODE)[:n_gpus]
    gpu_index = np.tile(np.arange(GPUS_PER_NODE), n_nodes)[:n_gpus]

    # Jobs packed in order: whole nodes for 8-GPU jobs, sizes 1/2/4 fill the rest of a node.
    sizes = rng.choice([1, 2, 4, 8], p=list(size_weights), size=n_gpus)
    sizes = sizes[np.cumsum(sizes) <= int(n_gpus * ALLOCATED_SHARE)][:max_jobs]
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

    def __init__(self, engine: str = "allocator"):
        self.engine = engine

    def apply(self, action, now):
        return ActionResult(action.idempotency_key, action.kind, action.target, Outcome.DRY_RUN, "benchmark")


# --- engines: which of the pool's jobs each one runs -----------------------------------------------
# scenario -> (pool size, job sizes' weights, at most this many jobs, engine -> share of the jobs)
SCENARIOS = {
    "allocator": (None, (0.35, 0.2, 0.2, 0.25), None, {"allocator": 1.0}),
    "slurm": (8000, (0.15, 0.15, 0.2, 0.5), 1000, {"slurm": 1.0}),
    "mixed": (10000, (0.35, 0.2, 0.2, 0.25), None, {"allocator": 0.4, "slurm": 0.4, "kueue": 0.2}),
}
PARTITIONS = {"train": "batch", "dev": "interactive", "serve": "inference"}
SLURM_SCOPE = SlurmGovernance(partitions=list(PARTITIONS.values()), queue_from="partition")


def _indices(gpus: list[int]) -> str:
    """`0-3,6`: squeue's IDX list."""
    runs, out = [], []
    for g in sorted(gpus):
        if runs and g == runs[-1][1] + 1:
            runs[-1][1] = g
        else:
            runs.append([g, g])
    for a, b in runs:
        out.append(str(a) if a == b else f"{a}-{b}")
    return ",".join(out)


def squeue_document(jobs: list[dict]) -> bytes:
    """The jobs as `squeue --json` (Slurm 22.05) lists them: numeric ids, the account as tenant, the
    queue's kind as partition, per node a `gres_detail` entry, the template in the Comment, the
    declared run time (or the queue's cap) as time limit."""
    out = []
    for n, job in enumerate(jobs):
        by_host: dict[str, list[int]] = {}
        for g in job["gpus"]:
            by_host.setdefault(g["host"], []).append(g["gpu"])
        hosts = sorted(by_host)
        spec = job["spec"]
        suffix = job["queue"].rsplit("-", 1)[1]
        limit_s = spec["expected_runtime_s"] or QUEUES[suffix][1] or 30 * 86400
        out.append({
            "job_id": 100000 + n, "job_state": "RUNNING", "partition": PARTITIONS[suffix], "account": job["tenant"],
            "user_name": job["user"], "qos": "normal", "comment": f"gpupool:{spec['template']}",
            "nodes": ",".join(hosts), "gres_detail": [f"gpu:h100:{len(by_host[h])}(IDX:{_indices(by_host[h])})" for h in hosts],
            "start_time": int(dt.datetime.fromisoformat(job["started_at"].rstrip("Z")).replace(tzinfo=dt.UTC).timestamp()),
            "restart_cnt": job["attempt"] - 1, "time_limit": -(-limit_s // 60),
        })
    return json.dumps({"meta": {"Slurm": {"release": "22.05.8"}}, "errors": [], "jobs": out}).encode()


class SqueueWork:
    """SlurmWork with `squeue --json`'s answer in memory: the tick parses it as it parses the real one."""

    source = "slurm"

    def __init__(self, document: bytes):
        self.document = document

    def read(self) -> RunningWork:
        return slurm_running_work(self.document, SLURM_SCOPE)


class KueueWork:
    """Kueue's admitted workloads, already in job_view (the Kueue reader's answer)."""

    source = "kueue"

    def __init__(self, jobs: list[dict]):
        self.jobs = jobs

    def read(self) -> RunningWork:
        return RunningWork(self.source, self.jobs)


def engines_of(pool: Pool, shares: dict[str, float], seed: int = 17) -> tuple[list, dict[str, list[dict]]]:
    """The tick's readers and each engine's jobs: every job drawn to one engine by `shares`."""
    rng = np.random.default_rng(seed)
    drawn = rng.choice(list(shares), p=list(shares.values()), size=len(pool.jobs))
    jobs = {engine: [j for j, e in zip(pool.jobs, drawn, strict=True) if e == engine] for engine in shares}
    readers = []
    if "allocator" in jobs:
        readers.append(AllocatorWork(MemoryAllocator(dataclasses.replace(pool, jobs=jobs["allocator"]))))
    if "slurm" in jobs:
        readers.append(SqueueWork(squeue_document(jobs["slurm"])))
    if "kueue" in jobs:
        readers.append(KueueWork([j | {"job_id": f"team/{j['job_id']}"} for j in jobs["kueue"]]))
    return readers, jobs


# --- Prometheus-shaped telemetry: the same rounds, answered as Prometheus answers ----------------------
DCGM_LABELS = ('"gpu":"{gpu}","UUID":"GPU-{n:08x}-5a1c-4b2e-9d3f-{n:012x}","device":"nvidia{gpu}",'
               '"modelName":"NVIDIA H100 80GB HBM3","Hostname":"{host}","DCGM_FI_DRIVER_VERSION":"550.54.15",'
               '"instance":"{host}:9400","job":"dcgm-exporter"')


class PrometheusAnswers:
    """/api/v1/query answers for `{__name__=~"..."}[<ms>ms]` at `time` over a pool's rounds: the raw
    samples in (time - range, time] (Prometheus 3), every series with dcgm-exporter's labels, values
    in the text Prometheus prints (the shortest that reads back as the same double)."""

    def __init__(self, folder: Path):
        self.activity = np.load(folder / "activity.npy", mmap_mode="r")
        self.fb = np.load(folder / "fb.npy", mmap_mode="r")
        hosts = np.load(folder / "hosts.npy")
        gpus = np.load(folder / "gpus.npy")
        self.midnight_s = int((dt.datetime.fromisoformat((folder / "midnight").read_text()) - dt.datetime(1970, 1, 1)).total_seconds())
        self.heads = [  # one per GPU and metric
            [f'{{"metric":{{"__name__":"{metric}",{DCGM_LABELS.format(gpu=g, n=n, host=h)}}},"values":['
             for metric in METRICS]
            for n, (h, g) in enumerate(zip(hosts, gpus, strict=True))]

    def answer(self, at_s: float, span_s: float) -> bytes:
        first = max(0, int((at_s - span_s - self.midnight_s) // 15) + 1)  # rounds after at - span
        last = min(self.activity.shape[1] - 1, int((at_s - self.midnight_s) // 15))
        if last < first:
            return b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
        act = np.asarray(self.activity[:, first:last + 1])
        fb = np.asarray(self.fb[:, first:last + 1])
        seen = ~np.isnan(act)
        gpu, k = np.nonzero(seen)
        metric_values = [act[seen], np.clip(act[seen] * 100 + 1, 0, 100), fb[seen]]  # as write_rounds
        times = (self.midnight_s + 15 * (first + k)).astype(np.int64)
        frame = pl.concat([
            pl.DataFrame({"series": gpu * 3 + m, "t": times, "v": pl.Series(v.astype(np.float64))})
            for m, v in enumerate(metric_values)
        ]).sort("series", "t")
        points = frame.group_by("series", maintain_order=True).agg(
            pl.concat_str(pl.lit("["), pl.col("t").cast(pl.String), pl.lit(',"'), pl.col("v").cast(pl.String),
                          pl.lit('"]')).str.join(",").alias("values"))
        heads = [self.heads[s // 3][s % 3] for s in points["series"].to_list()]
        result = ",".join(h + v + "]}" for h, v in zip(heads, points["values"].to_list(), strict=True))
        return b'{"status":"success","data":{"resultType":"matrix","result":[' + result.encode() + b"]}}"


def serve_prometheus(folder: Path) -> None:
    """The answers over HTTP on a loopback port (written to folder/port), until killed."""
    answers = PrometheusAnswers(folder)
    rendering = {"s": 0.0}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            params = parse_qs(urlsplit(self.path).query)
            span = re.search(r"\[(\d+)ms\]$", params["query"][0])
            began = time.process_time()
            body = answers.answer(float(params["time"][0]), int(span[1]) / 1000)
            with lock:  # the CPU this stand-in spent answering, for the bench to report apart
                rendering["s"] += time.process_time() - began
                (folder / "render_s.tmp").write_text(repr(rendering["s"]))
                os.replace(folder / "render_s.tmp", folder / "render_s")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    (folder / "port.tmp").write_text(str(server.server_port))
    os.replace(folder / "port.tmp", folder / "port")
    server.serve_forever()


def start_prometheus(pool: Pool, folder: Path) -> tuple[subprocess.Popen, str]:
    """The pool's rounds answered by `serve_prometheus` in a process of its own (its work is a real
    Prometheus' work, not the tick's; the wait for its answers is timed, as a real one's would be)."""
    folder.mkdir()
    np.save(folder / "activity.npy", pool.activity)
    np.save(folder / "fb.npy", pool.fb_used_mib)
    np.save(folder / "hosts.npy", pool.hosts)
    np.save(folder / "gpus.npy", pool.gpu_index)
    (folder / "midnight").write_text(pool.midnight.isoformat())
    process = subprocess.Popen([sys.executable, __file__, "--serve-prometheus", str(folder)])
    while not (folder / "port").exists():
        if process.poll() is not None:
            raise RuntimeError("the Prometheus-shaped server exited at start")
        time.sleep(0.05)
    return process, f"http://127.0.0.1:{(folder / 'port').read_text()}"


def _rendered(tmp: str) -> float:
    """The CPU seconds the stand-in Prometheus has spent answering so far (0 without one)."""
    path = Path(tmp) / "prometheus" / "render_s"
    return float(path.read_text()) if path.exists() else 0.0


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_one(scenario: str, n_gpus: int, telemetry_source: str, runs: int, profile: bool) -> None:
    _, size_weights, max_jobs, shares = SCENARIOS[scenario]
    catalog = load_catalog()
    lookback = default_lookback(catalog)
    midnight = dt.datetime(2026, 11, 2)
    # the day's folder holds a little more than the lookback; ticks 31 s past the minute, as a sensor's
    # fall, so the window's oldest minute is cut (the rounds' edge group, Prometheus' head piece)
    t0 = midnight + lookback + dt.timedelta(minutes=20, seconds=31)
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
    pool = build_pool(n_gpus, midnight, ticks[-1], size_weights=size_weights, max_jobs=max_jobs)
    readers, jobs = engines_of(pool, shares)
    server = None
    with tempfile.TemporaryDirectory(prefix="bench_tick_") as tmp:
        landing = Path(tmp) / "landing"
        round_of = lambda t: math.ceil((t - midnight).total_seconds() / 15)  # the rounds before t
        n_events = write_events(dataclasses.replace(pool, jobs=jobs["allocator"]), landing, ticks[-1]) if "allocator" in jobs else 0
        if telemetry_source == "prometheus":
            server, url = start_prometheus(pool, Path(tmp) / "prometheus")
            # the warm-up fills the whole lookback in one tick (40-50 s here), past the default fill budget
            telemetry = PrometheusMinutes(PrometheusConfig(url=url, retries=0, fill_budget_s=600))
        else:
            write_rounds(pool, landing, 0, round_of(t0))
            telemetry = ScrapeRounds(landing)
        allocated = sum(len(j["gpus"]) for j in pool.jobs)
        engines = ", ".join(f"{e} {len(js):,}" for e, js in jobs.items())
        print(f"pool: {n_gpus:,} GPUs on {len(set(pool.hosts)):,} nodes, {len(pool.jobs):,} running jobs ({engines}) "
              f"holding {allocated:,} GPUs ({allocated / n_gpus:.0%}); telemetry {telemetry.source}; lookback "
              f"{lookback}; {n_events:,} events in the log; built and landed in {time.perf_counter() - began:.1f} s")
        try:
            outbox = Outbox(Path(tmp) / "outbox.db", landing)
            enforcers = {e: DryRunEnforcer(e) for e in jobs}
            client = MemoryAllocator(dataclasses.replace(pool, jobs=jobs["allocator"])) if "allocator" in jobs else None

            def tick(now):
                return governance_tick(now, landing=landing, catalog=catalog, outbox=outbox, client=client,
                                       enforcers=enforcers, lookback=lookback, work=readers, telemetry=telemetry)

            warm = tick(t0)
            assert not warm.errors, warm.summary()
            print(f"warm-up tick at {t0:%H:%M:%S} (untimed): {warm.duration_s:.2f} s, {warm.findings.height} findings, "
                  f"{sum(warm.decisions.values())} decisions")
            landed, times, cpus, reports, renders, added = round_of(t0), [], [], [], [], 0.0
            for i, now in enumerate(ticks[:runs]):
                if telemetry_source == "rounds":
                    write_rounds(pool, landing, landed, round_of(now))
                    landed = round_of(now)
                rss_before = _rss_mib()
                rendered = _rendered(tmp)
                start, cpu = time.perf_counter(), time.process_time()
                report = tick(now)
                times.append(time.perf_counter() - start)
                cpus.append(time.process_time() - cpu)
                renders.append(_rendered(tmp) - rendered)
                assert not report.errors, report.summary()
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                added = max(added, peak - rss_before)
                reports.append(report)
                stand_in = f" (the stand-in Prometheus' CPU answering it: {renders[-1]:.3f} s)" if server else ""
                print(f"  tick {i + 1} at {now:%H:%M:%S}: {times[-1]:.3f} s, CPU {cpus[-1]:.3f} s{stand_in}; "
                      f"{report.summary()[:400]}")
            last, now = reports[-1], ticks[runs - 1]
            phases, inputs = _phases(landing, readers, telemetry, catalog, outbox, now, lookback)
            target = TARGETS_S.get(n_gpus) if scenario == "allocator" else 2.0
            verdict = "no target for this size" if target is None else (
                f"target < {target} s: {'met' if statistics.median(times) < target else 'NOT met'}")
            print(f"RESULT {scenario} {n_gpus:,} GPUs, telemetry {telemetry.source}: tick median "
                  f"{statistics.median(times):.3f} s, max {max(times):.3f} s of {runs} run(s); peak RSS added "
                  f"{added:,.0f} MiB (process peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB); "
                  f"{inputs.allocations.height:,} allocations of {last.running_jobs:,} jobs evaluated over "
                  f"{inputs.minutes.height:,} allocation-minutes; findings {last.findings.height:,} "
                  f"({last.findings_by_policy}); decisions {sum(last.decisions.values()):,} ({dict(last.decisions)}); "
                  f"{verdict}")
            print("  phases of one tick (s): " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
            # CPU seconds of this process (every thread): steadier than wall time on a shared machine
            print(f"  the tick's own CPU: median {statistics.median(cpus):.3f} s, max {max(cpus):.3f} s")
            if server is not None:  # on these 2 cores the stand-in's rendering competes with the tick
                net = [t - r for t, r in zip(times, renders, strict=True)]
                print(f"  the stand-in Prometheus' CPU answering a tick's requests: median {statistics.median(renders):.3f} s "
                      f"(a real Prometheus does this work on its own machine); tick less it: median "
                      f"{statistics.median(net):.3f} s")
            if telemetry_source == "prometheus":
                print(f"  Prometheus requests: {telemetry.client.requests:,} in all (the warm-up's fill of the "
                      f"lookback included); minutes kept: {len(telemetry.kept)}")
            if profile:
                if telemetry_source == "rounds":
                    write_rounds(pool, landing, landed, round_of(ticks[-1]))
                profiler = cProfile.Profile()
                profiler.enable()
                tick(ticks[-1])
                profiler.disable()
                for order in ("tottime", "cumulative"):
                    text = io.StringIO()
                    pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(50)
                    print(f"--- profile of one tick by {order} ---\n" + text.getvalue().split("\n\n", 2)[-1])
            outbox.close()
        finally:
            if server is not None:
                server.kill()
                server.wait()


def _phases(landing, readers, telemetry, catalog, outbox, now, lookback):
    """The tick's steps timed apart at `now` (nothing recorded): reading the engines, the telemetry,
    the inputs, evaluation, plan; and the inputs."""
    marks = [time.perf_counter()]
    work = [r.read() for r in readers]
    marks.append(time.perf_counter())
    minutes = telemetry.read(now, lookback).minutes
    marks.append(time.perf_counter())
    inputs = work_inputs(landing, work, now, lookback, minutes)
    marks.append(time.perf_counter())
    findings = evaluate(inputs, catalog, now, kinds=LIVE_KINDS)
    marks.append(time.perf_counter())
    plan(findings, catalog, outbox, now, jobs_ended=set(), evaluated_kinds=LIVE_KINDS)
    marks.append(time.perf_counter())
    names = ("running work", f"telemetry ({telemetry.source})", "inputs (work_inputs)", "evaluate", "plan")
    return dict(zip(names, np.diff(marks), strict=True)), inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", nargs="+", choices=list(SCENARIOS), default=["allocator"],
                        help="allocator: the allocator's jobs on --gpus; slurm: 1,000 Slurm jobs on 8,000 GPUs; "
                             "mixed: allocator, Slurm and Kueue jobs on 10,000 GPUs (default allocator)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000],
                        help="pool sizes of the allocator scenario (default 1000 10000)")
    parser.add_argument("--telemetry", nargs="+", choices=["rounds", "prometheus"], default=["rounds"],
                        help="the tick's telemetry: the landed scrape rounds, or Prometheus-shaped answers over HTTP")
    parser.add_argument("--runs", type=int, default=None,
                        help="timed ticks per size (default 5, and 2 from 5,000 GPUs up)")
    parser.add_argument("--profile", action="store_true", help="cProfile one more tick and print the top costs")
    parser.add_argument("--serve-prometheus", type=Path, help=argparse.SUPPRESS)  # the answers' own process
    args = parser.parse_args()
    if args.serve_prometheus:
        serve_prometheus(args.serve_prometheus)
        return
    cases = [(sc, n, t) for sc in args.scenario for n in ([SCENARIOS[sc][0]] if SCENARIOS[sc][0] else args.gpus)
             for t in args.telemetry]
    if len(cases) > 1:  # one process per case: each peak RSS is its own
        for sc, n, t in cases:
            extra = ["--runs", str(args.runs)] if args.runs else []
            subprocess.run([sys.executable, __file__, "--scenario", sc, "--gpus", str(n), "--telemetry", t, *extra,
                            *(["--profile"] if args.profile else [])], check=True)
        return
    scenario, n, telemetry = cases[0]
    load = os.getloadavg()
    print(f"== {scenario}, {n:,} GPUs, telemetry {telemetry}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"on {os.cpu_count()} CPUs; {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    run_one(scenario, n, telemetry, args.runs or (5 if n < 5000 else 2), args.profile)


if __name__ == "__main__":
    main()
