"""What the GPUs report while work runs on them: activity profiles and DCGM samples.

One evaluation, two outputs:
- `render_node_metrics` writes dcgm-exporter 4.x text exposition for one node (the live
  service's fake exporter): the real label set, the work on each GPU as `hpc_job="<job_id>"`,
  `# HELP`/`# TYPE` lines, six metrics;
- `BulkTelemetry.day` builds the same values in bulk (GPU x time step, numpy) for the simulator, as
  frames in the `raw.dcgm_samples` contract, only the three metrics the warehouse's metrics read:
  the activity metric, `DCGM_FI_DEV_FB_USED` and `DCGM_FI_DEV_POWER_USAGE`.

Both go through `_grid`, so the live value of a job's GPU at a time equals the bulk value at that
time step. Values are deterministic functions of (job id, rank of the GPU in the job, attempt
start, profile, time): the per-minute noise is a counter-based hash, not a random generator.

Series follow dcgm-exporter: a whole GPU is one series; a MIG GPU one series per GPU instance
(GPU_I_PROFILE, GPU_I_ID), device-level fields (power, temperature) repeated on each; a
time-sliced GPU is one GPU-level series per job holding a share (same values, different hpc_job),
or one unlabelled series when nobody holds it. L40S nodes model an exporter without DCP
profiling: they report DCGM_FI_DEV_GPU_UTIL only, which exercises the pipeline's activity fallback.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from allocator.model import Job, NodeSpec, PoolConfig, ShareMode, Template
from allocator.sample_parquet import ROW_GROUP_ROWS, sample_writer
from allocator.telemetry_units import GPU_UTIL, GR_ENGINE_ACTIVE, TelemetryUnit, telemetry_units

DRIVER_VERSION = "580.105.08"
RESERVED_MIB = 512  # framebuffer the driver keeps on a whole GPU (FB_FREE = total - used - reserved)
CONTEXT_MEM_FRAC = 0.006  # a CUDA context on a GPU the job holds but does not use
IDLE_ACTIVITY = 0.05  # an allocation below this ... (PRODUCT.md's idle definition)
IDLE_WINDOW_S = 30 * 60  # ... for this long is idle
FULL_MEM_FRAC = 0.99  # memory share of an attempt about to run out of memory

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
# dcgm-exporter's order (default-counters.csv) and help texts
METRIC_HELP: dict[str, str] = {
    GPU_TEMP: "GPU temperature (in C).",
    POWER_USAGE: "Power draw (in W).",
    GPU_UTIL: "GPU utilization (in %).",
    FB_FREE: "Framebuffer memory free (in MiB).",
    FB_USED: "Framebuffer memory used (in MiB).",
    GR_ENGINE_ACTIVE: "Ratio of time the graphics engine is active.",
}
BULK_SOURCE = "dcgm_parquet"
_EPOCH = dt.datetime(1970, 1, 1)
# min/max only where readers filter (string statistics on every label column double the write time)
_STATISTICS = ["sampled_at", "host", "gpu", "metric", "value"]


# --- activity profiles -----------------------------------------------------------------------


@dataclass(frozen=True)
class ActivityProfile:
    """How a job's work loads each of its GPUs over an attempt (ages count from the attempt's start).

    While working, activity = level (times a day curve for `diurnal`) + swing x a slow wave +
    noise. After `busy_for_s` the work stops: activity drops to `idle_level` while the process
    keeps `idle_mem_frac` of the memory (an idle allocation, a zombie, a forgotten notebook).
    With `working_gpus`, only that many of the job's GPUs work; the rest hold a CUDA context
    (an oversized request).
    """

    level: float = 0.7
    swing: float = 0.08
    period_s: float = 3600.0
    noise: float = 0.04
    mem_frac: float = 0.6
    busy_for_s: float | None = None
    idle_level: float = 0.0
    idle_mem_frac: float = 0.5
    working_gpus: int | None = None
    diurnal: bool = False
    mem_full_after_s: float | None = None  # from this age the memory is full (an attempt about to run out)
    loader_bound: bool = False  # its host's CPUs and disk limit it: the host is saturated while the GPU waits


def typical_profile(template: Template | str, u: Sequence[float]) -> ActivityProfile:
    """The profile of ordinary work of a template, from three numbers in [0, 1)."""
    a, b, c = (float(x) for x in u[:3])
    match Template(template):
        case Template.TRAINING:
            return ActivityProfile(
                level=0.55 + 0.37 * a,
                swing=0.06,
                period_s=1800 + 3600 * b,
                noise=0.04,
                mem_frac=0.55 + 0.35 * c,
                idle_mem_frac=0.55 + 0.35 * c,
            )
        case Template.INFERENCE:
            return ActivityProfile(
                level=0.35 + 0.25 * a,
                swing=0.05,
                period_s=900 + 1800 * b,
                noise=0.05,
                mem_frac=0.4 + 0.3 * c,
                idle_mem_frac=0.4 + 0.3 * c,
                diurnal=True,
            )
        case Template.EXPERIMENT:
            return ActivityProfile(
                level=0.3 + 0.5 * a,
                swing=0.1,
                period_s=600 + 1800 * b,
                noise=0.06,
                mem_frac=0.2 + 0.4 * c,
                idle_mem_frac=0.2 + 0.4 * c,
            )
        case Template.INTERACTIVE:
            return ActivityProfile(
                level=0.22 + 0.1 * a,
                swing=0.18,
                period_s=1800 + 1800 * b,
                noise=0.05,
                mem_frac=0.1 + 0.2 * c,
                idle_mem_frac=0.1 + 0.2 * c,
            )
    raise ValueError(f"template {template!r}: unknown")


def _key64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def default_profile(job: Job) -> ActivityProfile:
    """The profile the live service assumes for a job nobody described: a function of its id and template."""
    key = _key64(f"profile/{job.job_id}")
    u = [((key >> shift) & 0xFFFF) / 65536 for shift in (0, 16, 32)]
    return typical_profile(job.spec.template, u)


def _hash01(key: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """splitmix64 of (key, counter) as uniforms in [0, 1): the same inputs give the same noise anywhere."""
    with np.errstate(over="ignore"):
        z = key.astype(np.uint64) ^ (
            counter.astype(np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        )
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


@dataclass(frozen=True)
class Work:
    """One attempt of a job on one telemetry unit (job_id None: a process nobody allocated)."""

    unit: int  # index into the units
    job_id: str | None
    rank: int  # the slot's position in the job's placement: oversized jobs use their first GPUs
    start: dt.datetime  # the attempt's start: the profile's clock
    end: dt.datetime | None  # None: still running
    profile: ActivityProfile


def epoch_seconds(t: dt.datetime) -> float:
    return (t - _EPOCH) / dt.timedelta(seconds=1)


# --- the evaluation shared by both outputs ---------------------------------------------------


@dataclass(frozen=True)
class _Grid:
    """Values per unit x time step (flattened, cell = unit * steps + step) and the output rows."""

    steps: int
    activity: np.ndarray  # the unit's activity (0..1, 6 decimals)
    fb_used: np.ndarray  # MiB
    power: np.ndarray  # W, the physical GPU's
    temp: np.ndarray  # C, the physical GPU's
    occupied: np.ndarray  # bool: some job holds the unit
    row_cell: np.ndarray  # output rows: the cell ...
    row_work: np.ndarray  # ... and the work whose hpc_job labels it (-1: none)
    work_rows: np.ndarray  # per (work, step) row: the work ...
    work_cell: np.ndarray  # ... and its cell


class _UnitTable:
    """Columnar view of the units, built once per pool."""

    def __init__(self, units: Sequence[TelemetryUnit]):
        self.units = tuple(units)
        phys_index: dict[tuple[str, int], int] = {}
        for u in self.units:
            phys_index.setdefault((u.host, u.gpu), len(phys_index))
        self.phys = np.array([phys_index[(u.host, u.gpu)] for u in self.units], dtype=np.int64)
        self.n_phys = len(phys_index)
        self.memory = np.array([u.memory_mib for u in self.units], dtype=np.float64)
        self.reserved = np.array(
            [0 if u.share_mode == ShareMode.MIG else RESERVED_MIB for u in self.units], dtype=np.float64
        )
        self.weight = np.array([u.fraction for u in self.units], dtype=np.float64)
        # the allocated share of one slot of the unit: the MIG fraction, 1/replicas, or 1
        self.slot_share = self.weight / np.array(
            [len(u.slot_ids) if u.share_mode == ShareMode.TIMESLICE else 1 for u in self.units]
        )
        self.idle_w = np.array([u.idle_w for u in self.units], dtype=np.float64)
        self.span_w = np.array([u.max_w - u.idle_w for u in self.units], dtype=np.float64)
        self.phys_key = np.array([_key64(f"gpu/{u.uuid}") for u in self.units], dtype=np.uint64)
        self.by_slot = {s: i for i, u in enumerate(self.units) for s in u.slot_ids}
        self.gpu = np.array([u.gpu for u in self.units], dtype=np.int32)
        self.instance = np.array(
            [-1 if u.gpu_instance_id is None else u.gpu_instance_id for u in self.units], dtype=np.int32
        )
        # string labels as dictionary codes per unit: bulk columns are gathers of small integers
        self.strings = {
            name: _codes([getattr(u, attr) for u in self.units])
            for name, attr in (
                ("host", "host"),
                ("uuid", "uuid"),
                ("device", "device"),
                ("pci_bus_id", "pci_bus_id"),
                ("model_name", "model_name"),
                ("gpu_instance_profile", "profile"),
                ("metric", "activity_metric"),
            )
        }
        self.util_only = np.array([not u.profiling for u in self.units], dtype=bool)


def _work_params(works: Sequence[Work]) -> dict[str, np.ndarray]:
    p = [w.profile for w in works]
    return {
        "start": np.array([epoch_seconds(w.start) for w in works], dtype=np.float64),
        "end": np.array(
            [math.inf if w.end is None else epoch_seconds(w.end) for w in works], dtype=np.float64
        ),
        "key": np.array([_key64(f"work/{w.job_id}/{w.rank}") for w in works], dtype=np.uint64),
        "rank": np.array([w.rank for w in works], dtype=np.float64),
        "level": np.array([x.level for x in p], dtype=np.float64),
        "swing": np.array([x.swing for x in p], dtype=np.float64),
        "period": np.array([x.period_s for x in p], dtype=np.float64),
        "noise": np.array([x.noise for x in p], dtype=np.float64),
        "mem": np.array([x.mem_frac for x in p], dtype=np.float64),
        "busy_for": np.array(
            [math.inf if x.busy_for_s is None else x.busy_for_s for x in p], dtype=np.float64
        ),
        "idle_level": np.array([x.idle_level for x in p], dtype=np.float64),
        "idle_mem": np.array([x.idle_mem_frac for x in p], dtype=np.float64),
        "working_gpus": np.array(
            [math.inf if x.working_gpus is None else x.working_gpus for x in p], dtype=np.float64
        ),
        "diurnal": np.array([x.diurnal for x in p], dtype=bool),
        "mem_full": np.array(
            [math.inf if x.mem_full_after_s is None else x.mem_full_after_s for x in p], dtype=np.float64
        ),
        "loader": np.array([x.loader_bound for x in p], dtype=bool),
    }


def _profile_values(
    params: dict[str, np.ndarray], w: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Activity (0..1) and memory share of work rows `w` at epoch seconds `t`."""
    u = _hash01(params["key"][w], np.floor(t / 60.0))
    age = t - params["start"][w]
    phase = (params["key"][w] >> np.uint64(40)).astype(np.float64) / 16777216.0
    hour = np.mod(t, 86400.0) / 3600.0
    day_curve = np.where(params["diurnal"][w], 0.6 + 0.4 * np.cos(2 * np.pi * (hour - 15.0) / 24.0), 1.0)
    working = (
        params["level"][w] * day_curve
        + params["swing"][w] * np.sin(2 * np.pi * (t / params["period"][w] + phase))
        + params["noise"][w] * (2.0 * u - 1.0)
    )
    stopped = age >= params["busy_for"][w]
    spare = params["rank"][w] >= params["working_gpus"][w]
    idle = params["idle_level"][w] + 0.004 * u
    activity = np.clip(np.where(spare | stopped, idle, working), 0.0, 1.0)
    memory = np.where(
        spare,
        CONTEXT_MEM_FRAC,
        np.where(stopped, params["idle_mem"][w], params["mem"][w] * (0.97 + 0.03 * u)),
    )
    # an attempt that runs out of memory fills its GPU in its last minutes
    memory = np.where(age >= params["mem_full"][w], FULL_MEM_FRAC + 0.004 * u, memory)
    return activity, memory


@dataclass(frozen=True)
class _Cells:
    """Activity and memory of some units x time steps (flattened, cell = position of the unit in the units
    asked for * steps + step), and the (work, step) rows they came from."""

    activity: np.ndarray  # the unit's activity (0..1, 6 decimals)
    fb_used: np.ndarray  # MiB
    occupied: np.ndarray  # bool: some job holds the unit
    unit_of_cell: np.ndarray  # the table's unit index of each cell
    step_of_cell: np.ndarray
    rows_w: np.ndarray  # per (work, step) row: the work ...
    cell: np.ndarray  # ... its cell
    owned: np.ndarray  # ... and whether a job holds it


def _cells(table: _UnitTable, works: Sequence[Work], times: np.ndarray, units: np.ndarray) -> _Cells:
    """Activity and memory of `units` (distinct table indices) at every time (epoch seconds, ascending):
    a unit's values depend on its own works alone. Works must be on those units, in a stable order."""
    n_units, steps = len(units), len(times)
    cells = n_units * steps
    position = np.full(len(table.units), -1, dtype=np.int64)
    position[units] = np.arange(n_units)
    params = _work_params(works)
    unit = position[np.array([w.unit for w in works], dtype=np.int64)]
    first = np.searchsorted(times, params["start"], "left") if works else np.zeros(0, np.int64)
    stop = np.searchsorted(times, params["end"], "left") if works else np.zeros(0, np.int64)
    counts = np.maximum(stop - first, 0)
    rows_w = np.repeat(np.arange(len(works)), counts)
    offsets = np.cumsum(counts) - counts
    step = first[rows_w] + (np.arange(len(rows_w)) - offsets[rows_w])
    cell = unit[rows_w] * steps + step
    activity_w, mem_w = _profile_values(params, rows_w, times[step])

    owned = np.array([w.job_id is not None for w in works], dtype=bool)[rows_w]
    count = np.bincount(cell[owned], minlength=cells)
    act_sum = np.bincount(cell[owned], weights=activity_w[owned], minlength=cells)
    mem_sum = np.bincount(cell[owned], weights=mem_w[owned], minlength=cells)
    # a process nobody allocated shows only while no job holds the unit
    rogue_act = np.zeros(cells)
    rogue_mem = np.zeros(cells)
    rogue_act[cell[~owned]] = activity_w[~owned]
    rogue_mem[cell[~owned]] = mem_w[~owned]
    occupied = count > 0
    activity = np.round(np.where(occupied, np.minimum(act_sum, 1.0), rogue_act), 6)
    # memory is capped below full, except on a unit whose work is filling it (out of memory)
    filling = (times[step] - params["start"][rows_w]) >= params["mem_full"][rows_w]
    cap = np.where(np.bincount(cell[owned & filling], minlength=cells) > 0, 1.0, 0.97)
    mem_frac = np.where(occupied, np.minimum(mem_sum, cap), rogue_mem)
    unit_of_cell = np.repeat(units, steps)
    step_of_cell = np.tile(np.arange(steps), n_units)
    usable = table.memory[unit_of_cell] - table.reserved[unit_of_cell]
    fb_used = np.floor(np.minimum(mem_frac * table.memory[unit_of_cell], usable))
    return _Cells(activity, fb_used, occupied, unit_of_cell, step_of_cell, rows_w, cell, owned)


def _grid(table: _UnitTable, works: Sequence[Work], times: np.ndarray) -> _Grid:
    """Evaluate every unit at every time (epoch seconds, ascending). Works must be in a stable order."""
    steps = len(times)
    c = _cells(table, works, times, np.arange(len(table.units)))
    activity, unit_of_cell, step_of_cell = c.activity, c.unit_of_cell, c.step_of_cell
    # device-level fields: the physical GPU's load is its instances' activity weighted by compute share
    phys_cell = table.phys[unit_of_cell] * steps + step_of_cell
    gpu_load = np.minimum(
        np.bincount(phys_cell, weights=activity * table.weight[unit_of_cell], minlength=table.n_phys * steps),
        1.0,
    )[phys_cell]
    minute = np.floor(times[step_of_cell] / 60.0)
    jitter = _hash01(table.phys_key[unit_of_cell], minute)
    power = np.round(
        table.idle_w[unit_of_cell] + table.span_w[unit_of_cell] * gpu_load + 3.0 * (jitter - 0.5), 3
    )
    temp = np.round(29.0 + 44.0 * gpu_load + 2.0 * jitter)

    # rows: each owned (work, step), and each cell no job holds; in cell order, works in input order
    free_cells = np.flatnonzero(~c.occupied)
    row_cell = np.concatenate([c.cell[c.owned], free_cells])
    row_work = np.concatenate([c.rows_w[c.owned], np.full(len(free_cells), -1, dtype=np.int64)])
    order = np.argsort(row_cell, kind="stable")
    return _Grid(
        steps,
        activity,
        c.fb_used,
        power,
        temp,
        c.occupied,
        row_cell[order],
        row_work[order],
        c.rows_w[c.owned],
        c.cell[c.owned],
    )


# --- live: dcgm-exporter text for one node ---------------------------------------------------


def _works_from_holders(
    table: _UnitTable, holders: Mapping[str, Job], profiles: Mapping[str, ActivityProfile] | None
) -> list[Work]:
    works = []
    for slot_id, job in holders.items():
        unit = table.by_slot.get(slot_id)
        if unit is None or job.started_at is None:
            continue
        rank = next((i for i, s in enumerate(job.slots) if s.slot_id == slot_id), 0)
        profile = (profiles or {}).get(job.job_id)
        if profile is None:
            profile = default_profile(job)
            if table.units[unit].share_mode == ShareMode.TIMESLICE:
                # a time-sliced share may use only its part of the GPU's memory
                share = 1.0 / len(table.units[unit].slot_ids)
                profile = replace(
                    profile, mem_frac=profile.mem_frac * share, idle_mem_frac=profile.idle_mem_frac * share
                )
        works.append(Work(unit, job.job_id, rank, job.started_at, None, profile))
    return sorted(works, key=lambda w: (w.unit, w.job_id or "", w.rank))


def _label_text(unit: TelemetryUnit, job_id: str | None, host_label: str) -> str:
    pairs = [
        ("gpu", str(unit.gpu)),
        ("UUID", unit.uuid),
        ("pci_bus_id", unit.pci_bus_id),
        ("device", unit.device),
        ("modelName", unit.model_name),
    ]
    if unit.gpu_instance_id is not None:
        pairs += [("GPU_I_PROFILE", unit.profile or ""), ("GPU_I_ID", str(unit.gpu_instance_id))]
    pairs += [("Hostname", host_label), ("DCGM_FI_DRIVER_VERSION", DRIVER_VERSION)]
    if job_id is not None:
        pairs.append(("hpc_job", job_id))
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_node_metrics(
    pool: PoolConfig,
    holders: Mapping[str, Job],
    host: str,
    now: dt.datetime,
    profiles: Mapping[str, ActivityProfile] | None = None,
    show_job: Callable[[Job], bool] | None = None,
) -> str:
    """dcgm-exporter text exposition of one node at `now` (no timestamps: the scrape time applies).

    holders maps slot ids to the running jobs (Engine.holders()); profiles, by job id, override
    the default profile. Idle GPUs read 0 activity and no framebuffer use. `show_job` says whose
    job ids may be named (`hpc_job`); the series of a job it refuses carry no `hpc_job` label (the
    values stay), and series that become alike (jobs sharing a time-sliced GPU) are sent once.
    None names every job.
    """
    nodes = [n for n in pool.nodes if n.host == host]
    if not nodes:
        raise KeyError(f"host {host!r}: not in the pool")
    table = _unit_table(tuple(nodes))
    works = _works_from_holders(table, {k: v for k, v in holders.items() if k in table.by_slot}, profiles)
    grid = _grid(table, works, np.array([epoch_seconds(now)]))
    series = [(int(c), int(w)) for c, w in zip(grid.row_cell, grid.row_work, strict=True)]
    jobs_by_id = {job.job_id: job for job in holders.values()}

    def named(w: int) -> str | None:
        if w < 0:
            return None
        job_id = works[w].job_id
        if job_id is None or show_job is None or show_job(jobs_by_id[job_id]):
            return job_id
        return None

    labels = [_label_text(table.units[c], named(w), host) for c, w in series]
    if show_job is not None:  # one series per label set: an unnamed job's series may repeat another's
        seen: set[str] = set()
        kept = [i for i, label in enumerate(labels) if not (label in seen or seen.add(label))]
        series, labels = [series[i] for i in kept], [labels[i] for i in kept]
    out: list[str] = []
    for metric, help_text in METRIC_HELP.items():
        lines = []
        for (c, _), label in zip(series, labels, strict=True):
            unit = table.units[c]
            value = _live_value(metric, unit, grid, c)
            if value is not None:
                lines.append(f"{metric}{{{label}}} {value}")
        if lines:
            out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge", *lines]
    return "\n".join(out) + "\n"


def _live_value(metric: str, unit: TelemetryUnit, grid: _Grid, c: int) -> str | None:
    mig = unit.share_mode == ShareMode.MIG
    match metric:
        case "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
            return f"{grid.activity[c]:.6f}" if unit.profiling else None
        case "DCGM_FI_DEV_GPU_UTIL":  # not supported on MIG instances
            return None if mig else f"{grid.activity[c] * 100:.0f}"
        case "DCGM_FI_DEV_FB_USED":
            return str(int(grid.fb_used[c]))
        case "DCGM_FI_DEV_FB_FREE":
            reserved = 0 if mig else RESERVED_MIB
            return str(int(unit.memory_mib - reserved - grid.fb_used[c]))
        case "DCGM_FI_DEV_POWER_USAGE":
            return f"{grid.power[c]:.6f}"
        case "DCGM_FI_DEV_GPU_TEMP":
            return str(int(grid.temp[c]))
    raise ValueError(f"metric {metric!r}: not rendered")


_TABLES: dict[tuple[NodeSpec, ...], _UnitTable] = {}


def _unit_table(nodes: tuple[NodeSpec, ...]) -> _UnitTable:
    # the live exporter renders the same node every scrape: build its table once
    table = _TABLES.get(nodes)
    if table is None:
        if len(_TABLES) > 4096:
            _TABLES.clear()
        table = _TABLES[nodes] = _UnitTable(telemetry_units(nodes))
    return table


# --- bulk: a day of samples for the simulator ------------------------------------------------


@dataclass(frozen=True)
class DayTelemetry:
    """The day's samples (contract frames, one per metric, unless written) and its own figures."""

    frames: tuple[pl.DataFrame, ...] = field(repr=False)
    samples: int
    allocated_gpu_hours: float  # held time x slot fraction, at the step resolution
    active_gpu_hours: float  # allocated weighted by the unit's activity
    idle_gpu_hours: float  # allocated time inside runs below 5% activity lasting 30 min or more
    rogue_busy_gpu_hours: float  # unallocated units busy (activity >= 5%)
    work_load: WorkLoad | None = field(default=None, repr=False)


@dataclass(frozen=True)
class WorkLoad:
    """What each work held at each step of the day: one entry per (work, step) row, works in unit order
    (what the host telemetry aggregates per host)."""

    steps: int  # time steps of the day
    unit: np.ndarray  # the unit held
    step: np.ndarray
    held: np.ndarray  # the slot fraction held
    activity: np.ndarray  # the unit's activity (0..1)
    loader_bound: np.ndarray  # bool: the work's profile is loader-bound


class BulkTelemetry:
    """Bulk samples for a pool: build once, then one `day` per simulated day."""

    def __init__(self, pool: PoolConfig, interval_s: int = 60):
        if interval_s <= 0 or 86400 % interval_s:
            raise ValueError(f"interval_s {interval_s}: must divide a day into whole steps")
        self.interval_s = interval_s
        self.table = _UnitTable(telemetry_units(pool.nodes))
        fractions: dict[str, float] = {s.slot_id: s.fraction for s in pool.slots()}
        self.slot_fraction = fractions

    def unit_of(self, slot_id: str) -> int:
        return self.table.by_slot[slot_id]

    def series(
        self, works: Sequence[Work], units: Sequence[int], start: dt.datetime, end: dt.datetime
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Activity and framebuffer use (MiB) of `units` at each step in [start, end), exactly as `day`
        writes them: (times as datetime64[us], activity[unit, step], fb_used[unit, step]).
        `works` must hold every work open in the window (shared units sum their works)."""
        first = math.ceil(epoch_seconds(start) / self.interval_s) * self.interval_s
        times = np.arange(first, epoch_seconds(end), self.interval_s, dtype=np.float64)
        asked = np.array(units, dtype=np.int64)
        distinct = np.unique(asked)  # only these units' cells: a unit's values depend on its own works alone
        on_them = set(distinct.tolist())
        ordered = sorted((w for w in works if w.unit in on_them),
                         key=lambda w: (w.unit, epoch_seconds(w.start), w.job_id or "", w.rank))
        cells = _cells(self.table, ordered, times, distinct)
        rows = np.searchsorted(distinct, asked)[:, None] * len(times) + np.arange(len(times))[None, :]
        stamps = (times * 1e6).astype("int64").astype("datetime64[us]")
        return stamps, cells.activity[rows], cells.fb_used[rows]

    def day(
        self,
        day: dt.date,
        works: Sequence[Work],
        source_file: str,
        work_fractions: Sequence[float] | None = None,
        path: Path | None = None,
        extra: Iterable[pa.Table] = (),
        load: bool = False,
        absent: np.ndarray | None = None,
    ) -> DayTelemetry:
        """Samples of every unit for one UTC day, and the day's figures.

        work_fractions: each work's slot fraction (default: its unit's slot share). With `path`, the frames
        are written to that Parquet file one metric at a time (so that a big pool's day is never
        whole in memory) and `frames` comes back empty. extra: more tables in the contract, written after
        the metrics (the simulator's health series). load: also return the day's `WorkLoad` (for the
        host telemetry). absent: bool [unit, step], the samples nobody reports (a host that is down);
        the day's figures still count every step.
        """
        start = epoch_seconds(dt.datetime.combine(day, dt.time()))
        times = start + np.arange(0, 86400, self.interval_s, dtype=np.float64)
        ordered = sorted(
            range(len(works)),
            key=lambda i: (
                works[i].unit,
                epoch_seconds(works[i].start),
                works[i].job_id or "",
                works[i].rank,
            ),
        )
        works = [works[i] for i in ordered]
        fractions = np.array(
            [work_fractions[i] for i in ordered]
            if work_fractions is not None
            else [self.table.slot_share[w.unit] for w in works],
            dtype=np.float64,
        )
        grid = _grid(self.table, works, times)
        step_h = self.interval_s / 3600.0
        alloc_rows = fractions[grid.work_rows] if len(works) else np.zeros(0)
        act = grid.activity[grid.work_cell]
        idle = _idle_run_mask(grid.work_rows, grid.work_cell, act, IDLE_WINDOW_S // self.interval_s)
        rogue_cells = (~grid.occupied) & (grid.activity >= IDLE_ACTIVITY)
        rogue_units = np.repeat(np.arange(len(self.table.units)), grid.steps)[rogue_cells]
        frames: list[pl.DataFrame] = []
        samples = 0
        writer = None
        tables = itertools.chain(self._tables(grid, works, times, source_file, absent), extra)
        try:
            for table in tables:
                samples += table.num_rows
                if path is None:
                    frames.append(pl.from_arrow(table).with_columns(pl.col(pl.Categorical).cast(pl.String)))
                    continue
                if writer is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    writer = sample_writer(path, table.schema, _STATISTICS)
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                del table
        finally:
            if writer is not None:
                writer.close()
        return DayTelemetry(
            frames=tuple(frames),
            samples=samples,
            allocated_gpu_hours=float(alloc_rows.sum() * step_h),
            active_gpu_hours=float((alloc_rows * act).sum() * step_h),
            idle_gpu_hours=float(alloc_rows[idle].sum() * step_h),
            rogue_busy_gpu_hours=float(self.table.weight[rogue_units].sum() * step_h),
            work_load=WorkLoad(
                grid.steps,
                grid.work_cell // grid.steps,
                grid.work_cell % grid.steps,
                alloc_rows,
                act,
                np.array([w.profile.loader_bound for w in works], dtype=bool)[grid.work_rows],
            )
            if load
            else None,
        )

    def _tables(
        self,
        grid: _Grid,
        works: Sequence[Work],
        times: np.ndarray,
        source_file: str,
        absent: np.ndarray | None = None,
    ):
        """One Arrow table per metric, columns in the dcgm_samples contract's order."""
        t = self.table
        row_cell, row_work = grid.row_cell, grid.row_work
        if absent is not None:
            kept = ~np.ravel(absent)[row_cell]
            row_cell, row_work = row_cell[kept], row_work[kept]
        unit = (row_cell // grid.steps).astype(np.int64)
        step = row_cell % grid.steps
        n = len(unit)
        jobs = _codes([w.job_id for w in works])
        job_code = np.where(row_work < 0, 0, jobs[0][np.maximum(row_work, 0)]).astype(np.int32)
        no_job = row_work < 0
        instance = t.instance[unit]
        columns = {
            "sampled_at": pa.array((times[step] * 1_000_000).astype(np.int64), pa.timestamp("us")),
            "host": _dict(t.strings["host"], unit),
            "gpu": pa.array(t.gpu[unit], pa.int32()),
            "uuid": _dict(t.strings["uuid"], unit),
            "device": _dict(t.strings["device"], unit),
            "pci_bus_id": _dict(t.strings["pci_bus_id"], unit),
            "model_name": _dict(t.strings["model_name"], unit),
            "gpu_instance_id": pa.array(instance, pa.int32(), mask=instance < 0),
            "gpu_instance_profile": _dict(t.strings["gpu_instance_profile"], unit),
        }
        tail = {
            "k8s_namespace": pa.nulls(n, pa.string()),
            "k8s_pod": pa.nulls(n, pa.string()),
            "k8s_container": pa.nulls(n, pa.string()),
            "hpc_job": pa.DictionaryArray.from_arrays(
                pa.array(job_code, mask=no_job), pa.array(jobs[1] or [""], pa.string())
            ),
            "extra_labels": _constant(f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"', n),
            "source": _constant(BULK_SOURCE, n),
            "source_file": _constant(source_file, n),
        }
        activity = grid.activity[row_cell]
        util = t.util_only[unit]
        metrics = (
            (_dict(t.strings["metric"], unit), np.where(util, np.round(activity * 100), activity)),
            (_constant(FB_USED, n), grid.fb_used[row_cell]),
            (_constant(POWER_USAGE, n), grid.power[row_cell]),
        )
        for metric, values in metrics:
            yield pa.table({**columns, "metric": metric, "value": pa.array(values, pa.float64()), **tail})


def _codes(values: Sequence[str | None]) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes (-1 for None) and the distinct values in first-seen order."""
    index: dict[str, int] = {}
    codes = np.array([-1 if v is None else index.setdefault(v, len(index)) for v in values], dtype=np.int32)
    return codes, list(index)


def _dict(coded: tuple[np.ndarray, list[str]], unit: np.ndarray) -> pa.DictionaryArray:
    codes = coded[0][unit]
    return pa.DictionaryArray.from_arrays(
        pa.array(codes, mask=codes < 0), pa.array(coded[1] or [""], pa.string())
    )


def _constant(value: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], pa.string())
    )


def _idle_run_mask(work: np.ndarray, cell: np.ndarray, activity: np.ndarray, min_steps: int) -> np.ndarray:
    """Rows inside a run of consecutive steps of one work below the idle threshold, min_steps long."""
    if len(work) == 0:
        return np.zeros(0, dtype=bool)
    low = activity < IDLE_ACTIVITY
    # rows of a work are consecutive and in step order; a run breaks on a new work or a busy step
    breaks = np.ones(len(work), dtype=bool)
    breaks[1:] = (work[1:] != work[:-1]) | (cell[1:] != cell[:-1] + 1) | (low[1:] != low[:-1])
    run = np.cumsum(breaks) - 1
    length = np.bincount(run)
    return low & (length[run] >= max(min_steps, 1))


def day_figures(
    bulk: BulkTelemetry, day_start: dt.datetime, works: list[Work], fractions: list[float]
) -> tuple[float, float, float, float]:
    """The day's allocated, active, idle and rogue-busy GPU-hours exactly as `BulkTelemetry.day` computes
    them, without building the samples (for runs that write no telemetry)."""
    times = epoch_seconds(day_start) + np.arange(0, 86400, bulk.interval_s, dtype=np.float64)
    order = sorted(
        range(len(works)),
        key=lambda i: (works[i].unit, epoch_seconds(works[i].start), works[i].job_id or "", works[i].rank),
    )
    ordered = [works[i] for i in order]
    share = np.array([fractions[i] for i in order], dtype=np.float64)
    grid = _grid(bulk.table, ordered, times)
    step_h = bulk.interval_s / 3600.0
    alloc = share[grid.work_rows] if ordered else np.zeros(0)
    act = grid.activity[grid.work_cell]
    idle = _idle_run_mask(grid.work_rows, grid.work_cell, act, IDLE_WINDOW_S // bulk.interval_s)
    rogue = (~grid.occupied) & (grid.activity >= IDLE_ACTIVITY)
    units = np.repeat(np.arange(len(bulk.table.units)), grid.steps)[rogue]
    return (
        float(alloc.sum() * step_h),
        float((alloc * act).sum() * step_h),
        float(alloc[idle].sum() * step_h),
        float(bulk.table.weight[units].sum() * step_h),
    )
