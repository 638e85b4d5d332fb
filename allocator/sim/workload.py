"""The workload generator: who submits what, when, and what the work then does.

Calibrated on public GPU-cluster traces (the figures and their files are in docs/simulator.md):
arrivals are Poisson per hour with a diurnal and weekly shape; sizes put most jobs on one GPU,
then 2/4/8, a few multi-node; run times are lognormal per template (heavy-tailed overall);
final states mix completed, failed and cancelled jobs at trace rates. On top of ordinary work
it plants the waste gpupool exists to find, at stated rates, and lists every planted case.

Each job carries a `Behaviour` only the simulator sees: how long the work needs, how an attempt
ends, when the user gives up or cancels, and the `ActivityProfile` its GPUs follow. The same
seed gives the same workload (numpy Generator, no clock).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np

from allocator.model import JobSpec, JobState, PoolConfig, QueueSpec, ShareMode, Template
from allocator.sim.checkpoints import PLAN_UNIFORMS, CheckpointPlan, plan_checkpoints
from allocator.telemetry import ActivityProfile, typical_profile


class Waste(StrEnum):
    IDLE_ALLOCATION = "idle_allocation"  # busy early, then idle for hours while holding the GPUs
    ZOMBIE = "zombie"  # holds GPUs and memory, no activity, no progress, never ends by itself
    FORGOTTEN_INTERACTIVE = "forgotten_interactive"  # a session used for a while, then left open
    OVERSIZED = "oversized"  # asked for 8 (or 4), works on 2 (or 1)
    OVERRUN = "overrun"  # runs well past its declared expected run time
    RETRY_STORM = "retry_storm"  # fails within minutes, again and again, resubmitted by its user
    BORROWED_QUOTA = "borrowed_quota"  # a tenant whose demand runs far beyond its quota, on borrowed GPUs
    SCARCE_MODEL_QUEUE = "scarce_model_queue"  # demand for a scarce model (H100) beyond its capacity
    ROGUE_PROCESS = "rogue_process"  # a process on a GPU nobody was allocated (telemetry only)


@dataclass(frozen=True)
class Behaviour:
    """What the work does once it runs (the simulator's knowledge, not the allocator's)."""

    work_s: int | None  # run time the work needs; None: never ends by itself
    outcome: JobState  # how an attempt that reaches work_s ends
    exit_code: int
    reason: str | None
    profile: ActivityProfile
    failing_attempts: int = 0  # the first attempts fail fast (after fail_after_s) whatever the work
    fail_after_s: int = 0
    patience_s: int | None = None  # the user cancels if the job is still pending this long after submit
    cancel_after_run_s: int | None = None  # the user cancels after an attempt has run this long
    resubmits: int = 0  # after a final failure the user submits the same job again, this many times
    resubmit_delay_s: int = 0
    checkpointed: bool = False  # progress survives a preemption (at its checkpoints; without a plan, whole hours)
    waste: Waste | None = None
    xid: int | None = None  # the application XID its failure raises on its GPUs (user code: 13, 43)
    checkpoints: CheckpointPlan | None = None  # training: how it checkpoints and what it leaves at its end


@dataclass(frozen=True)
class PlannedJob:
    job_id: str
    submit_at: dt.datetime
    spec: JobSpec
    behaviour: Behaviour


@dataclass(frozen=True)
class RogueProcess:
    """Work on a GPU outside the allocator: shows in telemetry only, on a GPU of gpu_model nobody holds."""

    rogue_id: str
    start: dt.datetime
    duration_s: int
    gpu_model: str
    profile: ActivityProfile


@dataclass(frozen=True)
class Calibration:
    """Every figure the generator uses. Trace sources: docs/simulator.md."""

    template_mix: Mapping[Template, float] = field(
        default_factory=lambda: {
            Template.EXPERIMENT: 0.47,
            Template.TRAINING: 0.33,
            Template.INTERACTIVE: 0.185,
            Template.INFERENCE: 0.015,
        }
    )
    gpus: Mapping[Template, Mapping[int, float]] = field(
        default_factory=lambda: {
            Template.TRAINING: {1: 0.45, 2: 0.18, 4: 0.18, 8: 0.155, 16: 0.03, 32: 0.005},
            Template.EXPERIMENT: {1: 0.82, 2: 0.11, 4: 0.07},
            Template.INTERACTIVE: {1: 0.92, 2: 0.08},
            Template.INFERENCE: {1: 0.6, 2: 0.3, 4: 0.1},
        }
    )
    # lognormal run time the work needs: (median seconds, sigma)
    work_s: Mapping[Template, tuple[float, float]] = field(
        default_factory=lambda: {
            Template.TRAINING: (3600.0, 1.7),
            Template.EXPERIMENT: (150.0, 1.9),
            Template.INTERACTIVE: (3600.0, 0.9),
            Template.INFERENCE: (43200.0, 0.8),
        }
    )
    completed: float = 0.65  # final states: completed / failed / cancelled
    failed: float = 0.20
    cancelled: float = 0.15
    # user-caused failures; hardware ones (NODE_FAIL, FAILED on a GPU fault) come from allocator.sim.faults
    failure_states: Mapping[JobState, float] = field(
        default_factory=lambda: {
            JobState.FAILED: 0.84,
            JobState.OUT_OF_MEMORY: 0.16,
        }
    )
    loader_bound: float = 0.06  # of ordinary training: limited by its host's CPUs and disk (an assumption)
    # arrivals per hour of day (UTC) and per weekday (Monday first), relative
    hourly: tuple[float, ...] = (
        0.35,
        0.3,
        0.27,
        0.25,
        0.25,
        0.28,
        0.35,
        0.5,
        0.8,
        1.15,
        1.4,
        1.5,
        1.4,
        1.45,
        1.55,
        1.6,
        1.55,
        1.4,
        1.15,
        0.9,
        0.75,
        0.65,
        0.55,
        0.45,
    )
    weekly: tuple[float, ...] = (1.05, 1.1, 1.1, 1.05, 0.95, 0.45, 0.4)
    target_load: float = 0.65  # offered GPU-hours over capacity GPU-hours (before planted waste)
    opening_load: float = 0.45  # the pool opens with a backlog of this share of its GPUs
    patience_s: tuple[float, float] = (12 * 3600.0, 1.0)  # lognormal: how long a user waits before cancelling
    scarce_model: str = "H100"
    # demand per GPU model, relative to its share of capacity: training wants the scarce H100s
    model_preference: Mapping[Template, Mapping[str, float]] = field(
        default_factory=lambda: {
            Template.TRAINING: {"H100": 1.5},
            Template.EXPERIMENT: {"H100": 0.4},
            Template.INFERENCE: {"H100": 0.5},
            Template.INTERACTIVE: {"A100": 0.6},
        }
    )
    # a one-GPU job takes a MIG instance or a time-sliced share (where its model has them) this often
    shared_slots: Mapping[Template, float] = field(
        default_factory=lambda: {
            Template.TRAINING: 0.0,
            Template.EXPERIMENT: 0.35,
            Template.INFERENCE: 0.4,
            Template.INTERACTIVE: 0.9,
        }
    )
    backfill_max_gpus: int = 4  # training sent to the low-priority queue asks at most this many GPUs
    borrow_boost: float = 2.5  # the over-using tenant submits this many times its share of training
    # planted waste: probability per eligible job
    idle_allocation: float = 0.03  # training and experiments
    zombie: float = 0.01  # training
    forgotten_interactive: float = 0.25  # interactive
    oversized: float = 0.12  # training and experiments asking 4 or more GPUs
    overrun: float = 0.08  # training
    retry_storm: float = 0.004  # training
    rogue_per_gpu_day: float = 0.01  # processes outside the allocator


CALIBRATION = Calibration()
_FAIL_REASONS = {
    JobState.FAILED: (
        ("RuntimeError: NCCL watchdog timeout", 1),
        ("Segmentation fault", 139),
        ("ValueError in data loader", 1),
        ("CUDA error: an illegal memory access", 134),
    ),
    JobState.OUT_OF_MEMORY: (("CUDA out of memory", 137),),
}
# user code that crashes on the GPU: the driver logs an application-class XID on the job's GPUs
_APP_XID = {"CUDA error: an illegal memory access": 13, "Segmentation fault": 43}
_NAMES = {
    Template.TRAINING: (
        "resnet50",
        "vit-b16",
        "llama-ft",
        "bert-pretrain",
        "whisper-ft",
        "dlrm",
        "diffusion",
        "moe-pretrain",
    ),
    Template.EXPERIMENT: ("sweep-lr", "ablation", "hparam-search", "eval", "debug", "profile-run"),
    Template.INTERACTIVE: ("jupyter", "vscode", "notebook"),
    Template.INFERENCE: ("serve-chat", "serve-asr", "serve-rank", "serve-embed"),
}
_CHECKPOINTS = ("hourly", "every 30 min", "every 1000 steps", "each epoch")
_USERS_PER_TENANT = 12


def tenant_users(tenant: str) -> list[str]:
    """The tenant's members who submit work (`<tenant>-u01` ... `-u12`), most active first."""
    return [f"{tenant}-u{k + 1:02d}" for k in range(_USERS_PER_TENANT)]


_COL = {
    "name": 0,
    "name_no": 1,
    "profile": 2,
    "pad": 5,
    "checkpoint": 6,
    "tenant": 7,
    "queue": 8,
    "model": 9,
    "share": 10,
    "mig": 11,
    "user": 12,
    "failure": 13,
    "reason": 14,
}  # profile takes 2..4
_U = 15


@dataclass(frozen=True)
class Workload:
    jobs: tuple[PlannedJob, ...]  # in submit order
    rogues: tuple[RogueProcess, ...]
    borrowing_tenant: str | None
    scarce_model: str | None
    planted: Mapping[Waste, tuple[str, ...]]  # job ids (rogue ids for rogue processes)

    def planted_counts(self) -> dict[str, int]:
        return {str(k): len(v) for k, v in self.planted.items()}


# --- where work can go ---------------------------------------------------------------------


def _allowed(queue: QueueSpec, tenant: str) -> bool:
    return queue.tenant == tenant or "*" in queue.shared_with or tenant in queue.shared_with


@dataclass(frozen=True)
class _Target:
    """A (tenant, template) → the queues it submits to."""

    queues: tuple[QueueSpec, ...]
    weights: tuple[float, ...]


def _targets(pool: PoolConfig) -> dict[tuple[str, Template], _Target]:
    """Training goes to the tenant's own queue (a tenth to backfill), experiments to a low-priority
    queue, inference and interactive to the queues that admit them."""
    out = {}
    for tenant in pool.tenants:
        for template in Template:
            ok = [q for q in pool.queues if template in q.templates and _allowed(q, tenant)]
            if template == Template.EXPERIMENT:
                ok = [q for q in ok if q.low_priority] or ok
            if not ok:
                continue
            own = [q for q in ok if q.tenant == tenant and not q.low_priority]
            weights = []
            for q in ok:
                if template == Template.TRAINING and own:
                    weights.append(0.9 / len(own) if q in own else 0.1 / max(len(ok) - len(own), 1))
                else:
                    weights.append(1.0)
            out[(tenant, template)] = _Target(tuple(ok), tuple(w / sum(weights) for w in weights))
    return out


def _capacity(pool: PoolConfig) -> dict[tuple[str, ShareMode], float]:
    out: dict[tuple[str, ShareMode], float] = defaultdict(float)
    for s in pool.slots():
        out[(s.gpu_model, s.share_mode)] += s.fraction
    return dict(out)


def _mig_profiles(pool: PoolConfig) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in pool.slots():
        if s.share_mode == ShareMode.MIG and s.profile:
            out[s.gpu_model][s.profile] += 1
    return {m: dict(p) for m, p in out.items()}


def _tenant_weights(pool: PoolConfig) -> dict[str, float]:
    """Submissions per tenant follow the quota of its own queues; a tenant with none submits a little."""
    own = {
        t: sum(sum(q.quota.values()) for q in pool.queues if q.tenant == t and not q.shared_with)
        for t in pool.tenants
    }
    floor = 0.25 * min((v for v in own.values() if v > 0), default=1.0)
    return {t: max(v, floor) for t, v in own.items()}


def borrowing_tenant(pool: PoolConfig) -> str | None:
    """The tenant planted to over-use borrowed quota: the smallest own training quota (then by name)."""
    candidates = sorted(
        (sum(q.quota.values()), q.tenant)
        for q in pool.queues
        if Template.TRAINING in q.templates
        and q.can_borrow
        and not q.low_priority
        and not q.shared_with
        and sum(q.quota.values()) > 0
    )
    return candidates[0][1] if candidates else None


# --- drawing jobs ------------------------------------------------------------------------------


def _choice(rng: np.random.Generator, options: Mapping, n: int) -> np.ndarray:
    keys = list(options)
    p = np.array([options[k] for k in keys], dtype=np.float64)
    return np.array(keys, dtype=object)[rng.choice(len(keys), size=n, p=p / p.sum())]


def _lognormal(rng: np.random.Generator, median: float, sigma: float, n: int) -> np.ndarray:
    return rng.lognormal(math.log(median), sigma, size=n)


@dataclass
class _Draw:
    """Per-job attributes, drawn column-wise."""

    template: np.ndarray
    gpus: np.ndarray
    work: np.ndarray  # seconds the work needs
    fate: np.ndarray  # 0 completed, 1 failed, 2 cancelled
    fail_at: np.ndarray  # share of the work done when it fails
    cancel_at: np.ndarray  # share of the work done when the user cancels
    waste_u: np.ndarray  # uniform deciding the planted waste
    planted: np.ndarray  # uniforms for a planted case's parameters (n x 3)
    patience: np.ndarray  # seconds the user waits in the queue before cancelling
    u: np.ndarray  # uniforms per job for its other choices (n x _U): no generator calls per job
    loader_u: np.ndarray | None = None  # uniform deciding a loader-bound job (its own generator)


def _draw(rng: np.random.Generator, cal: Calibration, templates: np.ndarray) -> _Draw:
    n = len(templates)
    gpus = np.ones(n, dtype=np.int64)
    work = np.zeros(n)
    for template in Template:
        mask = templates == template
        k = int(mask.sum())
        if k == 0:
            continue
        gpus[mask] = _choice(rng, cal.gpus[template], k).astype(np.int64)
        median, sigma = cal.work_s[template]
        work[mask] = _lognormal(rng, median, sigma, k)
    fate = rng.choice(
        3,
        size=n,
        p=np.array([cal.completed, cal.failed, cal.cancelled]) / (cal.completed + cal.failed + cal.cancelled),
    )
    return _Draw(
        templates,
        gpus,
        np.maximum(work, 30.0),
        fate,
        rng.beta(0.6, 2.5, size=n),
        rng.beta(1.2, 1.8, size=n),
        rng.random(n),
        rng.random((n, 3)),
        _lognormal(rng, *cal.patience_s, n),
        rng.random((n, _U)),
    )


def _hold_hours(d: _Draw) -> np.ndarray:
    """Roughly how long each job holds its GPUs (for sizing the arrival rate)."""
    return (
        np.where(d.fate == 1, d.work * d.fail_at, np.where(d.fate == 2, d.work * d.cancel_at, d.work))
        / 3600.0
    )


def _expected_gpu_hours(cal: Calibration) -> float:
    # a fixed-seed sample: the arrival rate must not depend on the workload's seed
    rng = np.random.default_rng(20_240_601)
    templates = _choice(rng, cal.template_mix, 40_000)
    d = _draw(rng, cal, templates)
    return float((d.gpus * _hold_hours(d)).mean())


def _arrival_times(
    rng: np.random.Generator, cal: Calibration, start: dt.datetime, days: int, per_hour: float
) -> np.ndarray:
    """Seconds after start: Poisson counts per hour with the diurnal and weekly shape, uniform inside."""
    hours = np.arange(days * 24)
    moments = [start + dt.timedelta(hours=int(h)) for h in hours]
    hourly = np.array(cal.hourly) / np.mean(cal.hourly)
    weekly = np.array(cal.weekly) / np.mean(cal.weekly)
    rate = per_hour * np.array([hourly[m.hour] * weekly[m.weekday()] for m in moments])
    counts = rng.poisson(rate)
    base = np.repeat(hours * 3600.0, counts)
    return np.sort(base + rng.random(len(base)) * 3600.0)


def generate_workload(
    pool: PoolConfig, start: dt.datetime, days: int, seed: int, cal: Calibration = CALIBRATION
) -> Workload:
    """The jobs submitted from `start` for `days` days on `pool`, and the rogue processes."""
    if days < 1:
        raise ValueError(f"days {days}: expected at least 1")
    rng = np.random.default_rng(seed)
    capacity = _capacity(pool)
    gpus_total = sum(capacity.values())
    per_hour = cal.target_load * gpus_total / _expected_gpu_hours(cal)
    times = _arrival_times(rng, cal, start, days, per_hour)
    templates = _choice(rng, cal.template_mix, len(times))
    # the opening backlog: the pool starts empty, so work that was waiting arrives in the first hour
    opening_n = round(cal.opening_load * gpus_total / _mean_gpus(cal, Template.TRAINING))
    opening = np.sort(rng.random(opening_n) * 3600.0)
    opening_templates = _choice(rng, {Template.TRAINING: 0.85, Template.INFERENCE: 0.15}, opening_n)
    times = np.concatenate([opening, times])
    templates = np.concatenate([opening_templates, templates])
    order = np.argsort(times, kind="stable")
    times, templates = times[order], templates[order]
    # from a generator of its own, so adding loader-bound jobs moved no other draw
    draw = replace(
        _draw(rng, cal, templates), loader_u=np.random.default_rng([seed, 0x10AD]).random(len(times))
    )
    builder = _Builder(pool, cal, capacity)
    jobs = [
        builder.job(i, start + dt.timedelta(seconds=float(round(t, 3))), draw) for i, t in enumerate(times)
    ]
    if any(j is None for j in jobs):
        raise ValueError("pool: a template has no queue any tenant may submit to")
    jobs = builder.ensure_every_kind(jobs, start, draw)
    jobs = [replace(j, job_id=f"j-{i + 1:06d}") for i, j in enumerate(jobs)]
    # checkpoint habits from a generator of their own too: they move no other draw
    habits = np.random.default_rng([seed, 0xC4EC]).random((len(jobs), PLAN_UNIFORMS))
    jobs = [_with_checkpoints(j, habits[i]) for i, j in enumerate(jobs)]
    cases: dict[Waste, list[str]] = defaultdict(list)
    for j in jobs:
        if j.behaviour.waste is not None:
            cases[j.behaviour.waste].append(j.job_id)
        if builder.borrower and j.spec.tenant == builder.borrower and j.spec.template == Template.TRAINING:
            cases[Waste.BORROWED_QUOTA].append(j.job_id)
        if j.spec.gpu_model == cal.scarce_model:
            cases[Waste.SCARCE_MODEL_QUEUE].append(j.job_id)
    rogues = _rogues(rng, cal, pool, start, days, gpus_total)
    cases[Waste.ROGUE_PROCESS] = [r.rogue_id for r in rogues]
    return Workload(
        tuple(jobs),
        rogues,
        builder.borrower,
        cal.scarce_model if any(m == cal.scarce_model for m, _ in capacity) else None,
        {k: tuple(cases.get(k, ())) for k in Waste},
    )


def _with_checkpoints(job: PlannedJob, u: np.ndarray) -> PlannedJob:
    if job.spec.template != Template.TRAINING:
        return job
    b = job.behaviour
    return replace(job, behaviour=replace(b, checkpoints=plan_checkpoints(job.spec, b.profile.loader_bound, u)))


def _mean_gpus(cal: Calibration, template: Template) -> float:
    sizes = cal.gpus[template]
    return sum(k * p for k, p in sizes.items()) / sum(sizes.values())


def _rogues(
    rng: np.random.Generator,
    cal: Calibration,
    pool: PoolConfig,
    start: dt.datetime,
    days: int,
    gpus_total: float,
) -> tuple[RogueProcess, ...]:
    n = max(1, int(rng.poisson(cal.rogue_per_gpu_day * gpus_total * days)))
    whole = sorted({s.gpu_model for s in pool.slots() if s.share_mode == ShareMode.WHOLE})
    models = rng.choice(len(whole), size=n)
    offsets = np.sort(rng.random(n)) * (days * 86400 - 6 * 3600)
    durations = rng.uniform(3600, 6 * 3600, n)
    levels = rng.uniform(0.4, 0.9, n)
    mems = rng.uniform(0.2, 0.5, n)
    return tuple(
        RogueProcess(
            f"rogue-{i + 1}",
            start + dt.timedelta(seconds=int(offsets[i])),
            int(durations[i]),
            whole[models[i]],
            ActivityProfile(
                level=float(levels[i]), swing=0.05, period_s=1200, noise=0.05, mem_frac=float(mems[i])
            ),
        )
        for i in range(n)
    )


def _pick(weights: Sequence[float], u: float) -> int:
    """The index a uniform falls on in cumulative weights (a draw without a generator call)."""
    x = u * sum(weights)
    acc = 0.0
    for i, w in enumerate(weights):
        acc += w
        if x < acc:
            return i
    return len(weights) - 1


class _Builder:
    """Turns drawn attributes into planned jobs on this pool (uniform columns: see `_COL`)."""

    def __init__(self, pool: PoolConfig, cal: Calibration, capacity: dict[tuple[str, ShareMode], float]):
        self.pool, self.cal, self.capacity = pool, cal, capacity
        self.targets = _targets(pool)
        self.borrower = borrowing_tenant(pool)
        weights = _tenant_weights(pool)
        self.tenants = list(pool.tenants)
        self.tenant_w = {tmpl: self._tenant_w(weights, tmpl) for tmpl in Template}
        self.mig_profiles = _mig_profiles(pool)
        self.model_capacity: dict[str, float] = defaultdict(float)
        for (model, _), v in capacity.items():
            self.model_capacity[model] += v
        self.users = {t: tenant_users(t) for t in pool.tenants}
        self.user_w = tuple(1.0 / k for k in range(1, _USERS_PER_TENANT + 1))  # a few users submit most
        self.replicas = {
            g.gpu_model: g.replicas for n in pool.nodes for g in n.gpus if g.share_mode == ShareMode.TIMESLICE
        }
        # the most whole GPUs of a model one request can get: a node, or whole nodes
        per_node: dict[str, list[int]] = defaultdict(list)
        for n in pool.nodes:
            whole = [g for g in n.gpus if g.share_mode == ShareMode.WHOLE]
            if whole:
                per_node[whole[0].gpu_model].append(len(whole))
        self.whole_max = {
            m: max(sizes) * sum(1 for s in sizes if s == max(sizes)) for m, sizes in per_node.items()
        }
        states = list(cal.failure_states)
        self.failure_states = (states, tuple(cal.failure_states[s] for s in states))

    def _tenant_w(self, weights: dict[str, float], template: Template) -> tuple[float, ...]:
        boost = {self.borrower: self.cal.borrow_boost} if template == Template.TRAINING else {}
        return tuple(
            weights[t] * boost.get(t, 1.0) if (t, template) in self.targets else 0.0 for t in self.tenants
        )

    def _model(self, queue: QueueSpec, template: Template, u: float) -> str:
        models = [m for m in queue.gpu_models if self.model_capacity.get(m)]
        preference = self.cal.model_preference.get(template, {})
        return models[_pick([self.model_capacity[m] * preference.get(m, 1.0) for m in models], u)]

    def _share_mode(self, model: str, template: Template, gpus: int, u: float) -> ShareMode:
        shared = {m: self.capacity.get((model, m), 0.0) for m in (ShareMode.MIG, ShareMode.TIMESLICE)}
        if gpus > 1 or not sum(shared.values()) or u >= self.cal.shared_slots.get(template, 0.0):
            return ShareMode.WHOLE
        # which kind of shared slot: by their capacity (u rescaled to [0, 1))
        modes = list(shared)
        return modes[_pick([shared[m] for m in modes], u / self.cal.shared_slots[template])]

    def job(self, i: int, submit_at: dt.datetime, d: _Draw) -> PlannedJob | None:
        template = Template(d.template[i])
        u = d.u[i].tolist()
        w = self.tenant_w[template]
        if not sum(w):
            return None
        tenant = self.tenants[_pick(w, u[_COL["tenant"]])]
        target = self.targets[(tenant, template)]
        queue = target.queues[_pick(target.weights, u[_COL["queue"]])]
        if queue.low_priority and d.gpus[i] > self.cal.backfill_max_gpus and template == Template.TRAINING:
            # big training does not go to backfill: it would wait at the queue's head for idle whole nodes
            queue = next((q for q in target.queues if not q.low_priority), queue)
        model = self._model(queue, template, u[_COL["model"]])
        gpus = int(min(d.gpus[i], queue.max_gpus_per_request, self.whole_max.get(model, 1)))
        mode = self._share_mode(model, template, gpus, u[_COL["share"]])
        mig_profile = None
        if mode == ShareMode.MIG:
            profiles = self.mig_profiles[model]
            names = sorted(profiles)
            mig_profile = names[_pick([profiles[n] for n in names], u[_COL["mig"]])]
        if mode == ShareMode.WHOLE and gpus > 8 and gpus % 8:
            gpus = 8  # a multi-node request takes whole nodes
        user = self.users[tenant][_pick(self.user_w, u[_COL["user"]])]
        names = _NAMES[template]
        name = f"{names[int(u[_COL['name']] * len(names))]}-{int(u[_COL['name_no']] * 200):03d}"
        work = float(d.work[i])
        profile = typical_profile(template, u[_COL["profile"] : _COL["profile"] + 3])
        if mode == ShareMode.TIMESLICE:
            # a time-sliced share sees the whole GPU's memory but may use only its part of it
            r = self.replicas.get(model, 1)
            profile = replace(profile, mem_frac=profile.mem_frac / r, idle_mem_frac=profile.idle_mem_frac / r)
        spec_fields: dict = {}
        if template == Template.TRAINING:
            # users pad their estimate; nobody may declare more than the queue's cap
            declared = _round_up(work * (1.0 + 0.5 * u[_COL["pad"]]), 900)
            spec_fields = {
                "expected_runtime_s": min(declared, queue.max_runtime_s or declared),
                "checkpoint_policy": _CHECKPOINTS[int(u[_COL["checkpoint"]] * len(_CHECKPOINTS))],
            }
        elif template == Template.INFERENCE:
            spec_fields = {"min_replicas": gpus, "rollback": "previous-revision"}
        elif template == Template.INTERACTIVE:
            spec_fields = {"idle_reminder_s": 3600}
        spec = JobSpec(
            tenant=tenant,
            queue=queue.name,
            user=user,
            template=template,
            gpu_model=model,
            gpus=gpus,
            share_mode=mode,
            mig_profile=mig_profile,
            job_name=name,
            **spec_fields,
        )
        return PlannedJob("", submit_at, spec, self._behaviour(template, spec, work, d, i, profile))

    def _behaviour(
        self, template: Template, spec: JobSpec, work: float, d: _Draw, i: int, profile: ActivityProfile
    ) -> Behaviour:
        u = d.u[i].tolist()
        fate = int(d.fate[i])
        if template == Template.INFERENCE:
            fate = 0 if fate == 2 else fate  # services are rolled over, not cancelled half-way
        base = Behaviour(
            work_s=int(work),
            outcome=JobState.COMPLETED,
            exit_code=0,
            reason=None,
            profile=profile,
            patience_s=int(d.patience[i]),
            checkpointed=template == Template.TRAINING,
        )
        if fate == 1:
            states, weights = self.failure_states
            state = states[_pick(weights, u[_COL["failure"]])]
            reasons = _FAIL_REASONS[state]
            reason, code = reasons[int(u[_COL["reason"]] * len(reasons))]
            base = replace(
                base,
                work_s=max(int(work * d.fail_at[i]), 20),
                outcome=state,
                exit_code=code,
                reason=reason,
                xid=_APP_XID.get(reason),
            )
        elif fate == 2:
            base = replace(base, cancel_after_run_s=max(int(work * d.cancel_at[i]), 30))
        kind = self._waste_kind(template, spec, d.waste_u[i])
        if kind is not None:
            return planted(kind, spec, base, d.planted[i])
        if template == Template.TRAINING and d.loader_u is not None and d.loader_u[i] < self.cal.loader_bound:
            # its GPUs wait on the data loader: low activity while the host's CPUs are saturated
            p = base.profile
            return replace(
                base, profile=replace(p, level=0.1 + 0.15 * p.level / 0.92, swing=0.03, loader_bound=True)
            )
        return base

    def _waste_kind(self, template: Template, spec: JobSpec, u: float) -> Waste | None:
        """Which planted waste (if any) this job is, with the calibrated probabilities."""
        cal = self.cal
        menu: list[tuple[Waste, float]] = []
        if template == Template.TRAINING:
            menu = [
                (Waste.RETRY_STORM, cal.retry_storm),
                (Waste.ZOMBIE, cal.zombie),
                (Waste.OVERRUN, cal.overrun),
                (Waste.IDLE_ALLOCATION, cal.idle_allocation),
            ]
        elif template == Template.EXPERIMENT:
            menu = [(Waste.IDLE_ALLOCATION, cal.idle_allocation)]
        elif template == Template.INTERACTIVE:
            menu = [(Waste.FORGOTTEN_INTERACTIVE, cal.forgotten_interactive)]
        if template in (Template.TRAINING, Template.EXPERIMENT) and spec.gpus >= 4:
            menu.append((Waste.OVERSIZED, cal.oversized))
        for kind, p in menu:
            if u < p:
                return kind
            u -= p
        return None

    def ensure_every_kind(self, jobs: list[PlannedJob], start: dt.datetime, d: _Draw) -> list[PlannedJob]:
        """A short simulation still shows every per-job waste kind early on: for a kind the first day
        did not plant, convert the first eligible small job of a model that is not scarce."""
        settle = start + dt.timedelta(hours=2)  # after the opening backlog
        first_day = start + dt.timedelta(days=1)
        present = {j.behaviour.waste for j in jobs if j.submit_at < first_day}
        out = list(jobs)
        for kind in PER_JOB_WASTE:
            if kind in present:
                continue
            template = Template.INTERACTIVE if kind == Waste.FORGOTTEN_INTERACTIVE else Template.TRAINING
            for i, j in enumerate(out):
                if (
                    j.submit_at < settle
                    or j.spec.template != template
                    or j.behaviour.waste is not None
                    or j.spec.gpus > 2
                    or j.spec.gpu_model == self.cal.scarce_model
                ):
                    continue
                spec = j.spec
                if kind == Waste.OVERSIZED:
                    most = min(
                        4,
                        self.pool.queue(spec.queue).max_gpus_per_request,
                        self.whole_max.get(spec.gpu_model, 1),
                    )
                    spec = replace(spec, gpus=most)
                out[i] = replace(j, spec=spec, behaviour=planted(kind, spec, j.behaviour, d.planted[i]))
                break
        return out


PER_JOB_WASTE = (
    Waste.IDLE_ALLOCATION,
    Waste.ZOMBIE,
    Waste.FORGOTTEN_INTERACTIVE,
    Waste.OVERSIZED,
    Waste.OVERRUN,
    Waste.RETRY_STORM,
)


def planted(kind: Waste, spec: JobSpec, b: Behaviour, u: np.ndarray) -> Behaviour:
    """Ordinary work `b` turned into planted waste of `kind` (u: uniforms for its parameters)."""
    clean = replace(
        b, outcome=JobState.COMPLETED, exit_code=0, reason=None, cancel_after_run_s=None, waste=kind, xid=None
    )
    work = float(b.work_s or 3600)
    a, c, e = (float(x) for x in u[:3])
    match kind:
        case Waste.IDLE_ALLOCATION:
            work = max(work, (4 + 8 * a) * 3600)  # hours of idle holding follow the busy start
            return replace(
                clean,
                work_s=int(work),
                profile=replace(b.profile, busy_for_s=max((0.15 + 0.2 * c) * work, 1200.0)),
            )
        case Waste.ZOMBIE:
            return replace(
                clean,
                work_s=None,
                cancel_after_run_s=int((12 + 36 * a) * 3600),  # until its owner notices, or the cap
                profile=replace(b.profile, busy_for_s=600 + 3000 * c, idle_level=0.0),
            )
        case Waste.FORGOTTEN_INTERACTIVE:
            return replace(
                clean,
                work_s=None,
                cancel_after_run_s=int((10 + 30 * a) * 3600),
                profile=replace(b.profile, busy_for_s=1200 + 4200 * c),
            )
        case Waste.OVERSIZED:
            return replace(
                clean,
                work_s=int(max(work, 1800)),
                profile=replace(b.profile, working_gpus=max(spec.gpus // 4, 1)),
            )
        case Waste.OVERRUN:
            declared = spec.expected_runtime_s or int(work)
            return replace(clean, work_s=int(declared * (1.6 + 1.4 * a)))
        case Waste.RETRY_STORM:
            return replace(
                clean,
                outcome=JobState.FAILED,
                exit_code=1,
                reason="ImportError: no module named 'apex'",
                failing_attempts=1_000_000,
                fail_after_s=int(60 + 180 * a),
                resubmits=5 + int(8 * c),
                resubmit_delay_s=int(30 + 270 * e),
            )
    raise ValueError(f"waste {kind!r}: not planted per job")


def _round_up(seconds: float, step: int) -> int:
    return int(math.ceil(seconds / step) * step)
