"""DCGM telemetry for the sample: one dcgm-exporter text exposition file per node per UTC day.

Built as arrays: activity and memory for every GPU (or MIG instance) x scrape, filled from the
workload's placements with numpy, then turned into lines with Polars string expressions and
written once. Labels follow dcgm-exporter 4.x (gpu, UUID, pci_bus_id, device, modelName,
[GPU_I_PROFILE, GPU_I_ID], Hostname, DCGM_FI_DRIVER_VERSION) plus `hpc_job` from the exporter's
HPC job mapping: a whole or time-sliced GPU carries one series per job on it (file `<gpu>`), a MIG
instance the jobs on that instance (file `<gpu>.<instance>`), a MIG parent none.

What each kind of GPU exports:
  whole GPU, profiling exporter: GPU_TEMP, POWER_USAGE, GPU_UTIL, FB_FREE, FB_USED, PROF_GR_ENGINE_ACTIVE
  whole GPU, exporter without DCP metrics (l40s-01): the same without PROF_GR_ENGINE_ACTIVE
  MIG parent: GPU_TEMP, POWER_USAGE; MIG instance: PROF_GR_ENGINE_ACTIVE, FB_USED (no GPU_UTIL)
"""
from __future__ import annotations

import datetime as dt
import hashlib

import numpy as np
import polars as pl

from pipelines.sample.pool import NODES, Gpu, Node
from pipelines.sample.workload import Job, RogueLoad

DEFAULT_INTERVAL_S = 60  # one scrape a minute

# name -> (HELP text as in dcgm-exporter's counters CSV, integer-valued); the order is the file's.
METRICS: dict[str, tuple[str, bool]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("GPU temperature (in C).", True),
    "DCGM_FI_DEV_POWER_USAGE": ("Power draw (in W).", False),
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", True),
    "DCGM_FI_DEV_FB_FREE": ("Framebuffer memory free (in MiB).", True),
    "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (in MiB).", True),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("Ratio of time the graphics engine is active.", False),
}
METRIC_RANK = {name: i for i, name in enumerate(METRICS)}
WHOLE_METRICS = tuple(METRICS)
NO_PROFILING_METRICS = tuple(m for m in METRICS if not m.startswith("DCGM_FI_PROF_"))
MIG_PARENT_METRICS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
MIG_INSTANCE_METRICS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
NO_INSTANCE = -1  # join key for series that are not a MIG instance

_BLOCK_MS = 20 * 60_000  # experiments and interactive sessions alternate busy and quiet 20-minute blocks


def _to_ms(t: dt.datetime) -> int:
    if t == dt.datetime.max:
        return np.iinfo(np.int64).max
    return int((t - dt.datetime(1970, 1, 1)).total_seconds() * 1000)


def scrape_offset_ms(host: str) -> int:
    """Each node's exporter is scraped at its own fixed phase within the minute."""
    return 1000 + int(hashlib.sha256(host.encode()).hexdigest()[:8], 16) % 4000


def sample_times_ms(host: str, day: dt.date, interval_s: int = DEFAULT_INTERVAL_S) -> np.ndarray:
    """The node's scrape times during the UTC day, epoch milliseconds."""
    if interval_s < 1 or 86400 % interval_s:
        raise ValueError(f"sample telemetry: scrape interval must divide a day into whole seconds, got {interval_s}")
    day_ms = _to_ms(dt.datetime.combine(day, dt.time()))
    n = 86400 // interval_s
    return day_ms + scrape_offset_ms(host) % (interval_s * 1000) + np.arange(n, dtype=np.int64) * interval_s * 1000


def _blocks_busy(t_ms: np.ndarray, rng: np.random.Generator, p_busy: float) -> np.ndarray:
    blocks, inverse = np.unique(t_ms // _BLOCK_MS, return_inverse=True)
    return (rng.random(len(blocks)) < p_busy)[inverse]


def profile(kind: str, t_ms: np.ndarray, rng: np.random.Generator, mem_cap: float) -> tuple[np.ndarray, np.ndarray]:
    """Activity (0..1) and framebuffer use (MiB) of one slot at the given sample times."""
    n = len(t_ms)
    if kind == "training":
        act = np.clip(rng.normal(0.86, 0.035, n), 0.5, 0.99)
        mem = mem_cap * 0.87 + rng.normal(0, 120, n)
    elif kind == "inference":
        hours = (t_ms / 3_600_000.0) % 24
        act = np.clip(0.45 + 0.25 * np.cos(2 * np.pi * (hours - 15) / 24) + rng.normal(0, 0.025, n), 0.15, 0.75)
        mem = mem_cap * 0.62 + rng.normal(0, 40, n)
    elif kind in ("experiment", "interactive"):
        busy = _blocks_busy(t_ms, rng, 0.6 if kind == "experiment" else 0.5)
        high, low = (0.78, 0.14) if kind == "experiment" else (0.42, 0.09)
        act = np.clip(np.where(busy, rng.normal(high, 0.06, n), rng.normal(low, 0.02, n)), 0.06, 0.98)
        mem = mem_cap * np.where(busy, 0.5, 0.35) + rng.normal(0, 80, n)
    elif kind == "idle":  # a session that holds its GPU and does nothing
        act = np.clip(rng.normal(0.008, 0.004, n), 0.0, 0.03)
        mem = mem_cap * 0.06 + rng.normal(0, 5, n)
    elif kind == "held":  # allocated, CUDA context only
        act = np.clip(rng.normal(0.0, 0.001, n), 0.0, 0.004)
        mem = 520 + rng.normal(0, 2, n)
    elif kind == "rogue":
        act = np.clip(rng.normal(0.55, 0.05, n), 0.3, 0.8)
        mem = 30000 + rng.normal(0, 30, n)
    else:
        raise ValueError(f"sample telemetry: unknown activity profile {kind!r}")
    return act, mem


def _units(node: Node) -> list[tuple[Gpu, int, int]]:
    """(GPU, instance id, memory MiB) of every activity unit: a whole or time-sliced GPU, or a MIG instance."""
    out = []
    for g in node.gpus:
        if g.share_mode == "mig":
            out.extend((g, s.instance_id, s.memory_mib) for s in g.slots())
        else:
            out.append((g, NO_INSTANCE, g.model.memory_mib))
    return out


def node_day_grid(node: Node, day: dt.date, jobs: tuple[Job, ...], rogues: tuple[RogueLoad, ...],
                  seed: int, interval_s: int = DEFAULT_INTERVAL_S,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, pl.DataFrame]:
    """Sample times, activity and memory per unit x sample, and the (gpu, instance, sample, hpc_job) map."""
    t = sample_times_ms(node.host, day, interval_s)
    rng = np.random.default_rng([seed, day.toordinal(), NODES.index(node)])
    units = _units(node)
    index = {(g.index, i): k for k, (g, i, _) in enumerate(units)}
    act = np.zeros((len(units), len(t)))
    mem = np.zeros((len(units), len(t)))
    hpc: list[pl.DataFrame] = []
    lo, hi = int(t[0]), int(t[-1]) + 1
    for job in jobs:
        for attempt in job.attempts:
            a0, a1 = _to_ms(attempt.start_at), _to_ms(attempt.end_at)
            if a1 <= lo or a0 >= hi:
                continue
            for n, s in enumerate(attempt.slots):
                if s.host != node.host:
                    continue
                inst = s.instance_id if s.share_mode == "mig" else NO_INSTANCE
                u = index[(s.gpu, inst)]
                held = np.flatnonzero((t >= a0) & (t < a1))
                hpc.append(pl.DataFrame({"hpc_gpu": s.gpu, "hpc_instance": inst, "sample": held,
                                         "hpc_job": job.job_id},
                                        schema={"hpc_gpu": pl.Int32, "hpc_instance": pl.Int32,
                                                "sample": pl.Int32, "hpc_job": pl.String}))
                mem_cap = s.memory_mib * (s.fraction if s.share_mode == "timeslice" else 1.0)
                for seg in attempt.segments:
                    if seg.slots is not None and n not in seg.slots:
                        continue
                    s0, s1 = max(_to_ms(seg.start), a0), min(_to_ms(seg.end), a1)
                    idx = np.flatnonzero((t >= s0) & (t < s1))
                    a, m = profile(seg.kind, t[idx], rng, mem_cap)
                    act[u, idx] += a  # time-sliced shares add up on their GPU
                    mem[u, idx] += m
    for r in rogues:
        if r.host == node.host:
            idx = np.flatnonzero((t >= _to_ms(r.start)) & (t < _to_ms(r.end)))
            a, m = profile("rogue", t[idx], rng, 0)
            act[index[(r.gpu, NO_INSTANCE)], idx] += a
            mem[index[(r.gpu, NO_INSTANCE)], idx] += m
    usable = np.array([[cap - g.model.reserved_mib] for g, _, cap in units], dtype=float)
    act = np.clip(act, 0.0, 1.0)
    mem = np.clip(np.rint(mem), 0.0, usable)
    hpc_map = pl.concat(hpc) if hpc else pl.DataFrame(
        schema={"hpc_gpu": pl.Int32, "hpc_instance": pl.Int32, "sample": pl.Int32, "hpc_job": pl.String})
    return t, act, mem, hpc_map.unique().sort("hpc_gpu", "hpc_instance", "sample", "hpc_job")


def _labels(g: Gpu, host: str, instance: int) -> str:
    mig = ""
    if instance != NO_INSTANCE:
        profile_name = next(s.profile for s in g.slots() if s.instance_id == instance)
        mig = f'GPU_I_PROFILE="{profile_name}",GPU_I_ID="{instance}",'
    return (f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="{g.pci_bus_id}",device="nvidia{g.index}",'
            f'modelName="{g.model.model_name}",{mig}Hostname="{host}",DCGM_FI_DRIVER_VERSION="{g.driver}"')


def node_day_series(node: Node, day: dt.date, jobs: tuple[Job, ...], rogues: tuple[RogueLoad, ...],
                    seed: int, interval_s: int = DEFAULT_INTERVAL_S,
                    ) -> tuple[np.ndarray, pl.DataFrame, np.ndarray, pl.DataFrame]:
    """Sample times, series metadata (one row per metric x GPU/instance), values (series x sample), hpc map."""
    t, act, mem, hpc = node_day_grid(node, day, jobs, rogues, seed, interval_s)
    rng = np.random.default_rng([seed, day.toordinal(), NODES.index(node), 1])
    units = _units(node)
    meta: list[dict] = []
    values: list[np.ndarray] = []

    def emit(metric: str, g: Gpu, instance: int, v: np.ndarray, hpc_instance: int | None) -> None:
        meta.append({"metric": metric, "gpu": g.index, "instance": instance,
                     "labels": _labels(g, node.host, instance),
                     # MIG parents carry no hpc_job: no mapping file is named after them.
                     "hpc_gpu": g.index, "hpc_instance": NO_INSTANCE - 1 if hpc_instance is None else hpc_instance})
        values.append(v)

    for g in node.gpus:
        rows = [k for k, (ug, _, _) in enumerate(units) if ug.index == g.index]
        if g.share_mode == "mig":
            weights = np.array([[s.fraction] for s in g.slots()])
            gpu_act = (act[rows] * weights).sum(axis=0)
            gpu_mem = mem[rows].sum(axis=0)
        else:
            gpu_act, gpu_mem = act[rows[0]], mem[rows[0]]
        m = g.model
        power = m.idle_w + (m.max_w - m.idle_w) * 0.92 * gpu_act + 8.0 * gpu_mem / m.memory_mib
        power = np.round(power + rng.normal(0, 1.2, len(t)), 3)
        temp = np.rint(26 + (g.index * 3) % 5 + 45 * gpu_act + rng.normal(0, 0.5, len(t)))
        if g.share_mode == "mig":
            emit("DCGM_FI_DEV_GPU_TEMP", g, NO_INSTANCE, temp, None)
            emit("DCGM_FI_DEV_POWER_USAGE", g, NO_INSTANCE, power, None)
            for k in rows:
                inst = units[k][1]
                emit("DCGM_FI_DEV_FB_USED", g, inst, mem[k], inst)
                emit("DCGM_FI_PROF_GR_ENGINE_ACTIVE", g, inst, np.round(act[k], 6), inst)
            continue
        usable = m.memory_mib - m.reserved_mib
        by_metric = {
            "DCGM_FI_DEV_GPU_TEMP": temp,
            "DCGM_FI_DEV_POWER_USAGE": power,
            "DCGM_FI_DEV_GPU_UTIL": np.rint(gpu_act * 100),
            "DCGM_FI_DEV_FB_FREE": usable - gpu_mem,
            "DCGM_FI_DEV_FB_USED": gpu_mem,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": np.round(gpu_act, 6),
        }
        for metric in WHOLE_METRICS if node.profiling else NO_PROFILING_METRICS:
            emit(metric, g, NO_INSTANCE, by_metric[metric], NO_INSTANCE)
    frame = pl.DataFrame(meta, schema={"metric": pl.String, "gpu": pl.Int32, "instance": pl.Int32,
                                       "labels": pl.String, "hpc_gpu": pl.Int32, "hpc_instance": pl.Int32})
    return t, frame, np.stack(values), hpc


def render_exposition(meta: pl.DataFrame, values: np.ndarray, t_ms: np.ndarray, hpc: pl.DataFrame) -> str:
    """Text exposition with explicit millisecond timestamps, HELP/TYPE once per metric, series grouped by metric."""
    n_series, n_samples = values.shape
    samples = pl.DataFrame({
        "series": np.repeat(np.arange(n_series, dtype=np.int32), n_samples),
        "sample": np.tile(np.arange(n_samples, dtype=np.int32), n_series),
        "value": values.ravel(),
    })
    series = meta.with_row_index("series").with_columns(
        pl.col("series").cast(pl.Int32),
        rank=pl.col("metric").replace_strict(METRIC_RANK, return_dtype=pl.Int32),
        is_int=pl.col("metric").replace_strict({k: v[1] for k, v in METRICS.items()}, return_dtype=pl.Boolean),
    )
    ts = pl.DataFrame({"sample": np.arange(n_samples, dtype=np.int32), "ts": t_ms})
    micro = (pl.col("value") * 1_000_000).round().cast(pl.Int64)
    value_text = (
        pl.when(pl.col("is_int"))
        .then(pl.col("value").round().cast(pl.Int64).cast(pl.String))
        .otherwise(pl.concat_str([(micro // 1_000_000).cast(pl.String), pl.lit("."),
                                  (micro % 1_000_000).cast(pl.String).str.zfill(6)]))
    )
    job_label = pl.when(pl.col("hpc_job").is_not_null()).then(
        pl.concat_str([pl.lit(',hpc_job="'), pl.col("hpc_job"), pl.lit('"')])).otherwise(pl.lit(""))
    lines = (
        samples.join(series, on="series")
        .join(hpc, on=["hpc_gpu", "hpc_instance", "sample"], how="left")
        .join(ts, on="sample")
        .select(
            "rank", "sample", "gpu", "instance", "hpc_job",
            line=pl.concat_str([pl.col("metric"), pl.lit("{"), pl.col("labels"), job_label, pl.lit("} "),
                                value_text, pl.lit(" "), pl.col("ts").cast(pl.String)]),
        )
    )
    present = [m for m in METRICS if m in set(meta["metric"].to_list())]
    headers = pl.DataFrame({
        "rank": [METRIC_RANK[m] for m in present],
        "line": [f"# HELP {m} {METRICS[m][0]}\n# TYPE {m} gauge" for m in present],
    }, schema={"rank": pl.Int32, "line": pl.String})
    ordered = pl.concat([headers.with_columns(sample=pl.lit(-1, pl.Int32)), lines.select("rank", "sample", "gpu",
                         "instance", "hpc_job", "line")], how="diagonal")
    ordered = ordered.sort(["rank", "sample", "gpu", "instance", "hpc_job"], nulls_last=False, maintain_order=True)
    return ordered.select(pl.col("line").str.join("\n")).item() + "\n"


def node_day_exposition(node: Node, day: dt.date, jobs: tuple[Job, ...], rogues: tuple[RogueLoad, ...],
                        seed: int, interval_s: int = DEFAULT_INTERVAL_S) -> str:
    t, meta, values, hpc = node_day_series(node, day, jobs, rogues, seed, interval_s)
    return render_exposition(meta, values, t, hpc)
