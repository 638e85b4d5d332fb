"""The allocator's domain: GPUs and how they are shared, tenants, queues, templates, jobs, actions.

Plain dataclasses with no behaviour beyond validation and derived values; the scheduling rules
live in `allocator.engine`. Every record that crosses a boundary (API payloads, the SQLite store,
the simulator) is one of these, serialisable with `dataclasses.asdict`.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum


class ShareMode(StrEnum):
    WHOLE = "whole"
    MIG = "mig"
    TIMESLICE = "timeslice"


class Template(StrEnum):
    TRAINING = "training"  # must declare expected run time and a checkpoint policy
    INFERENCE = "inference"  # minimum replicas and a rollback method; never preempted or reclaimed automatically
    EXPERIMENT = "experiment"  # low-priority queue or a reservation
    INTERACTIVE = "interactive"  # gets idle reminders


TEMPLATES: tuple[str, ...] = tuple(t.value for t in Template)  # for parsers, suites and policy look-ups


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NODE_FAIL = "NODE_FAIL"

    @property
    def is_final(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING)


FINAL_FAILURES = frozenset({JobState.FAILED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL})


@dataclass(frozen=True)
class GpuModel:
    """A GPU product. Numbers as NVML reports them."""

    name: str  # canonical: H100, A100, L40S
    model_name: str  # dcgm-exporter's modelName label
    memory_mib: int
    compute_slices: int | None  # 7 for MIG-capable A100/H100; None where MIG is not supported
    idle_w: float
    max_w: float


GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("H100", "NVIDIA H100 80GB HBM3", 81559, 7, 68.0, 700.0),
        GpuModel("A100", "NVIDIA A100-SXM4-80GB", 81920, 7, 58.0, 400.0),
        GpuModel("L40S", "NVIDIA L40S", 46068, None, 34.0, 350.0),
    )
}

# MIG profiles of the 80 GB parts: compute slices (of 7) and memory, as nvidia-smi mig -lgip shows them.
MIG_PROFILES: dict[str, dict[str, tuple[int, int]]] = {
    "A100": {"1g.10gb": (1, 9728), "2g.20gb": (2, 19968), "3g.40gb": (3, 40192), "4g.40gb": (4, 40192),
             "7g.80gb": (7, 81152)},
    "H100": {"1g.10gb": (1, 9856), "2g.20gb": (2, 20096), "3g.40gb": (3, 40320), "4g.40gb": (4, 40320),
             "7g.80gb": (7, 80896)},
}


@dataclass(frozen=True)
class GpuSpec:
    """One physical GPU and how it is shared."""

    host: str
    index: int
    gpu_model: str
    share_mode: ShareMode = ShareMode.WHOLE
    mig_layout: tuple[str, ...] = ()  # MIG profiles, in GPU-instance order, when share_mode is mig
    replicas: int = 1  # time-sliced replicas when share_mode is timeslice

    @property
    def model(self) -> GpuModel:
        return GPU_MODELS[self.gpu_model]

    @property
    def uuid(self) -> str:
        digest = hashlib.sha256(f"gpupool/{self.host}/{self.index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def slots(self) -> tuple[Slot, ...]:
        """The placeable units of this GPU: itself, its MIG instances, or its time-sliced replicas."""
        if self.share_mode == ShareMode.WHOLE:
            return (Slot(self.host, self.index, self.uuid, self.gpu_model, ShareMode.WHOLE, None, None, 1.0,
                         self.model.memory_mib),)
        if self.share_mode == ShareMode.MIG:
            slices = self.model.compute_slices or 7
            out = []
            for i, profile in enumerate(self.mig_layout):
                compute, memory = MIG_PROFILES[self.gpu_model][profile]
                out.append(Slot(self.host, self.index, self.uuid, self.gpu_model, ShareMode.MIG, i + 1, profile,
                                compute / slices, memory))
            return tuple(out)
        return tuple(
            Slot(self.host, self.index, self.uuid, self.gpu_model, ShareMode.TIMESLICE, r, None, 1.0 / self.replicas,
                 self.model.memory_mib)
            for r in range(self.replicas)
        )


@dataclass(frozen=True)
class Slot:
    """A placeable unit: a whole GPU, a MIG GPU instance, or one time-sliced replica."""

    host: str
    gpu: int
    uuid: str
    gpu_model: str
    share_mode: ShareMode
    gpu_instance_id: int | None  # MIG GPU instance id, or replica index; None for a whole GPU
    profile: str | None  # MIG profile
    fraction: float  # share of the GPU's compute
    memory_mib: int

    @property
    def slot_id(self) -> str:
        return f"{self.host}/{self.gpu}" if self.gpu_instance_id is None else f"{self.host}/{self.gpu}/{self.gpu_instance_id}"

    def placement(self) -> dict:
        """As it appears in a start event's `gpus` list (gpupool.event/v1)."""
        out: dict = {"host": self.host, "gpu": self.gpu, "uuid": self.uuid, "fraction": round(self.fraction, 6)}
        if self.gpu_instance_id is not None:
            out["gpu_instance_id"] = self.gpu_instance_id
        if self.profile:
            out["gpu_instance_profile"] = self.profile
        return out


@dataclass(frozen=True)
class NodeSpec:
    host: str
    gpus: tuple[GpuSpec, ...]
    node_pool: str | None = None


@dataclass(frozen=True)
class QueueSpec:
    """A queue's rules. Quota is in GPUs (fraction-weighted) per GPU model, guaranteed to the tenant."""

    name: str
    tenant: str
    gpu_models: tuple[str, ...]
    quota: dict[str, float]
    priority: int = 50
    preemptible: bool = True
    max_gpus_per_request: int = 8
    max_runtime_s: int | None = None
    retry_budget: int = 2
    templates: tuple[Template, ...] = tuple(Template)  # templates admitted here
    low_priority: bool = False  # backfill queue: only idle capacity, always preemptible, never holds quota
    can_borrow: bool = True  # may run on other tenants' idle quota (preemptible when the owner needs it)
    shared_with: tuple[str, ...] = ()  # other tenants that may submit here; ("*",) for every tenant


@dataclass(frozen=True)
class Reservation:
    name: str
    tenant: str
    slot_ids: tuple[str, ...]
    start: dt.datetime
    end: dt.datetime


@dataclass(frozen=True)
class PoolConfig:
    nodes: tuple[NodeSpec, ...]
    queues: tuple[QueueSpec, ...]
    tenants: tuple[str, ...]
    reservations: tuple[Reservation, ...] = ()
    prices_per_gpu_hour: dict[str, float] = field(default_factory=dict)
    preemption_grace_s: int = 60  # a preempted job keeps its GPUs this long to checkpoint; 0 = at once

    def queue(self, name: str) -> QueueSpec:
        for q in self.queues:
            if q.name == name:
                return q
        raise KeyError(name)

    def slots(self) -> tuple[Slot, ...]:
        return tuple(s for n in self.nodes for g in n.gpus for s in g.slots())


@dataclass(frozen=True)
class JobSpec:
    """What a user asks for. Template fields are validated at admission."""

    tenant: str
    queue: str
    user: str
    template: Template
    gpu_model: str
    gpus: int = 1  # whole GPUs, MIG instances of mig_profile, or time-sliced shares
    share_mode: ShareMode = ShareMode.WHOLE
    mig_profile: str | None = None
    job_name: str = ""
    expected_runtime_s: int | None = None  # training: required
    checkpoint_policy: str | None = None  # training: required, e.g. "hourly", "every 1000 steps"
    min_replicas: int | None = None  # inference: required
    rollback: str | None = None  # inference: required, e.g. "previous-revision"
    reservation: str | None = None  # experiment: a reservation, or else a low-priority queue
    time_limit_s: int | None = None  # requested cap; the queue's max_runtime_s caps it
    idle_reminder_s: int | None = None  # interactive: remind after this much idle time

    def spec_fields(self) -> dict:
        """The template fields as the event log's `spec` object carries them (None omitted)."""
        fields = {
            "expected_runtime_s": self.expected_runtime_s,
            "checkpoint_policy": self.checkpoint_policy,
            "min_replicas": self.min_replicas,
            "rollback": self.rollback,
            "reservation": self.reservation,
            "time_limit_s": self.time_limit_s,
            "idle_reminder_s": self.idle_reminder_s,
        }
        return {k: v for k, v in fields.items() if v is not None}


@dataclass
class AttemptLog:
    """One started attempt as checkpoint and artifact reports need it (`allocator.artifacts`)."""

    started_at: dt.datetime
    ended_at: dt.datetime | None = None  # preempted, requeued or finished
    last_checkpoint_at: dt.datetime | None = None  # written_at of its latest ok checkpoint


@dataclass
class Job:
    job_id: str
    spec: JobSpec
    state: JobState = JobState.PENDING
    attempt: int = 1
    submitted_at: dt.datetime | None = None
    admitted_at: dt.datetime | None = None  # of the current attempt
    started_at: dt.datetime | None = None  # of the current attempt
    first_started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    slots: tuple[Slot, ...] = ()
    borrowed: bool = False  # runs on quota beyond its tenant's (preemptible by the owner)
    retries_used: int = 0
    runtime_cap_s: int | None = None  # effective cap of the current attempt (template, queue, enforcement)
    priority: int = 50
    attempts: dict[int, AttemptLog] = field(default_factory=dict)  # the attempts that started, by number

    @property
    def last_checkpoint_at(self) -> dt.datetime | None:
        """When the current attempt last wrote an ok checkpoint; None if it has not (or has not started).
        Kept per attempt: a requeued job starts its next attempt without one."""
        log = self.attempts.get(self.attempt)
        return None if log is None else log.last_checkpoint_at

    @property
    def protected(self) -> bool:
        """Production inference is never preempted or reclaimed automatically."""
        return self.spec.template == Template.INFERENCE


class ActionKind(StrEnum):
    REMIND = "remind"
    RECLAIM = "reclaim"
    PREEMPT = "preempt"
    CAP_RUNTIME = "cap_runtime"
    QUOTA_CHANGE = "quota_change"  # a proposal; applied only after an admin approves it
    DRAIN = "drain"  # a node or GPU takes no new work; what runs there keeps running
    UNDRAIN = "undrain"  # a drained node or GPU takes work again


NODE_ACTIONS = frozenset({ActionKind.DRAIN, ActionKind.UNDRAIN})
_GPU_INDEX = re.compile(r"0|[1-9][0-9]{0,3}")


def drain_target(target: str) -> tuple[str, int | None]:
    """A drain target as (node, GPU index or None): "node-07" is a node, "node-07/3" its GPU 3.
    ValueError saying the expected form for anything else."""
    node, slash, gpu = target.partition("/")
    # one spelling per GPU ("3", never "03" or another script's digits): the target is the key a
    # drain is stored, shown and undrained under
    if not node or (slash and not _GPU_INDEX.fullmatch(gpu)):
        raise ValueError(f"drain target {target!r} is not a node (node-07) or a GPU of one (node-07/3)")
    return node, int(gpu) if slash else None


def drain_object_kind(target: str) -> str:
    """What a drain target is, as audit records name it: gpu for `node/gpu`, node otherwise."""
    return "gpu" if "/" in target else "node"


class Outcome(StrEnum):
    APPLIED = "applied"
    REFUSED = "refused"
    ALREADY_DONE = "already_done"
    DRY_RUN = "dry_run"
    PROPOSED = "proposed"


@dataclass(frozen=True)
class Action:
    """An enforcement action from the pipeline. The idempotency key makes a repeat a no-op."""

    kind: ActionKind
    idempotency_key: str
    # job id; for quota_change the queue name; for drain and undrain a node ("node-07") or one of
    # its GPUs ("node-07/3", by index); engines that cannot drain a single GPU (Slurm, Kubernetes)
    # drain its node and say so in the answer's reason
    target: str
    actor: str
    reason: str = ""
    policy: str | None = None
    policy_version: str | None = None
    evidence: dict = field(default_factory=dict)
    runtime_s: int | None = None  # cap_runtime: the new cap from the attempt's start
    quota: dict[str, float] | None = None  # quota_change: the proposed quota per GPU model
    dry_run: bool = False


@dataclass(frozen=True)
class ActionResult:
    idempotency_key: str
    kind: ActionKind
    target: str
    outcome: Outcome
    reason: str
    proposal_id: str | None = None
    effects: dict = field(default_factory=dict)  # e.g. {"released_slots": [...], "state": "CANCELLED"}


class AdmissionError(ValueError):
    """A request broke a rule; `rule` names it (e.g. 'queue.max_gpus_per_request')."""

    def __init__(self, rule: str, message: str):
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message
