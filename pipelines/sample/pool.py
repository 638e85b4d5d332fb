"""The sample pool: nodes, GPUs, how each GPU is shared, and the tenants' queues.

Everything here is fixed (not seeded) so that GPU identities and queue rules are the same for every
seed; only the workload's background jobs and the telemetry noise depend on the seed.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuModel:
    name: str  # canonical, e.g. H100
    model_name: str  # as NVML reports it (dcgm-exporter's modelName label)
    memory_mib: int  # total framebuffer
    reserved_mib: int  # driver reservation: FB_USED + FB_FREE = memory - reserved
    idle_w: float
    max_w: float


H100 = GpuModel("H100", "NVIDIA H100 80GB HBM3", 81559, 559, 68.0, 700.0)
A100 = GpuModel("A100", "NVIDIA A100-SXM4-80GB", 81920, 567, 58.0, 400.0)
L40S = GpuModel("L40S", "NVIDIA L40S", 46068, 499, 34.0, 350.0)

# (profile, GPU instance id, compute slices of 7, memory MiB) as nvidia-smi shows them on an A100 80GB.
MIG_LAYOUT = (("3g.40gb", 2, 3, 40192), ("2g.20gb", 3, 2, 19968), ("1g.10gb", 9, 1, 9728), ("1g.10gb", 10, 1, 9728))
TIMESLICE_REPLICAS = 4
# HGX baseboard PCI bus ids of GPUs 0-7.
PCI_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


@dataclass(frozen=True)
class Slot:
    """A placeable unit: a whole GPU, a MIG instance, or one time-sliced replica of a GPU."""

    host: str
    gpu: int
    uuid: str
    model: GpuModel
    share_mode: str  # whole | mig | timeslice
    instance_id: int | None = None  # MIG GPU instance id, or time-slice replica index
    profile: str | None = None  # MIG profile
    fraction: float = 1.0
    memory_mib: int = 0

    @property
    def key(self) -> tuple[str, int, int | None]:
        return (self.host, self.gpu, self.instance_id)

    def placement(self) -> dict:
        """The slot as it appears in a start event's `gpus` list."""
        out: dict = {"host": self.host, "gpu": self.gpu, "uuid": self.uuid}
        if self.share_mode != "whole":
            out["gpu_instance_id"] = self.instance_id
        if self.share_mode == "mig":
            out["gpu_instance_profile"] = self.profile
        out["fraction"] = self.fraction
        return out


@dataclass(frozen=True)
class Gpu:
    host: str
    index: int
    model: GpuModel
    share_mode: str = "whole"
    driver: str = "580.105.08"

    @property
    def uuid(self) -> str:
        h = hashlib.sha256(f"gpupool-sample/{self.host}/{self.index}".encode()).hexdigest()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{PCI_BUSES[self.index % len(PCI_BUSES)]}:00.0"

    def slots(self) -> tuple[Slot, ...]:
        common = {"host": self.host, "gpu": self.index, "uuid": self.uuid, "model": self.model}
        if self.share_mode == "mig":
            return tuple(
                Slot(**common, share_mode="mig", instance_id=gi, profile=profile,
                     fraction=round(slices / 7, 6), memory_mib=mem)
                for profile, gi, slices, mem in MIG_LAYOUT
            )
        if self.share_mode == "timeslice":
            return tuple(
                Slot(**common, share_mode="timeslice", instance_id=r, fraction=1 / TIMESLICE_REPLICAS,
                     memory_mib=self.model.memory_mib)
                for r in range(TIMESLICE_REPLICAS)
            )
        return (Slot(**common, share_mode="whole", memory_mib=self.model.memory_mib),)

    def snapshot(self) -> dict:
        """The GPU as written in the gpupool.pool/v1 snapshot."""
        out: dict = {"gpu": self.index, "uuid": self.uuid, "gpu_model": self.model.name,
                     "model_name": self.model.model_name, "memory_mib": self.model.memory_mib,
                     "share_mode": self.share_mode}
        if self.share_mode == "mig":
            out["instances"] = [
                {"gpu_instance_id": s.instance_id, "profile": s.profile, "memory_mib": s.memory_mib,
                 "fraction": s.fraction}
                for s in self.slots()
            ]
        if self.share_mode == "timeslice":
            out["replicas"] = TIMESLICE_REPLICAS
        return out


@dataclass(frozen=True)
class Node:
    host: str
    node_pool: str
    gpus: tuple[Gpu, ...]
    profiling: bool = True  # False: an exporter without DCP metrics (no DCGM_FI_PROF_*)

    def slots(self) -> tuple[Slot, ...]:
        return tuple(s for g in self.gpus for s in g.slots())


def _node(host: str, pool: str, model: GpuModel, n: int, shared: dict[int, str] | None = None,
          profiling: bool = True, driver: str = "580.105.08") -> Node:
    shared = shared or {}
    return Node(host, pool, tuple(Gpu(host, i, model, shared.get(i, "whole"), driver) for i in range(n)), profiling)


NODES: tuple[Node, ...] = (
    _node("h100-01", "h100", H100, 8),
    _node("h100-02", "h100", H100, 8),
    _node("a100-01", "a100", A100, 8, {0: "mig"}),
    # An older exporter configuration without profiling metrics: activity falls back to GPU_UTIL.
    _node("l40s-01", "l40s", L40S, 4, {3: "timeslice"}, profiling=False, driver="550.127.08"),
)


@dataclass(frozen=True)
class Queue:
    queue: str
    tenant: str
    priority: int
    preemptible: bool
    max_gpus_per_request: int
    max_runtime_s: int
    retry_budget: int
    quota: dict[str, float] = field(default_factory=dict)

    def snapshot(self, quota: dict[str, float]) -> dict:
        return {"queue": self.queue, "tenant": self.tenant, "priority": self.priority,
                "preemptible": self.preemptible, "max_gpus_per_request": self.max_gpus_per_request,
                "max_runtime_s": self.max_runtime_s, "retry_budget": self.retry_budget,
                "quota": {k: _num(v) for k, v in sorted(quota.items())}}


def _num(v: float) -> int | float:
    return int(v) if float(v).is_integer() else v


QUEUES: tuple[Queue, ...] = (
    Queue("vision-train", "vision", 50, True, 16, 259200, 3, {"H100": 8, "A100": 2}),
    Queue("vision-dev", "vision", 30, True, 2, 86400, 0, {"A100": 1, "L40S": 1}),
    Queue("nlp-train", "nlp", 60, False, 16, 259200, 2, {"H100": 8, "A100": 4}),
    Queue("nlp-serve", "nlp", 90, False, 8, 2592000, 5, {"A100": 2, "L40S": 2}),
    Queue("speech-exp", "speech", 20, True, 4, 86400, 1, {"A100": 1, "L40S": 0.5}),
    Queue("platform-ops", "platform", 70, False, 4, 86400, 2, {"A100": 1, "L40S": 0.5}),
)
QUEUE_BY_NAME = {q.queue: q for q in QUEUES}
USERS = {"vision": ("alice", "bob"), "nlp": ("carol", "dan"), "speech": ("erin", "frank"),
         "platform": ("grace", "heidi")}
NODE_BY_HOST = {n.host: n for n in NODES}


def slot(host: str, gpu: int, instance_id: int | None = None) -> Slot:
    """The slot of a host's GPU (and MIG instance or replica); raises if the pool has none."""
    for s in NODE_BY_HOST[host].gpus[gpu].slots():
        if s.instance_id == instance_id:
            return s
    raise ValueError(f"{host} GPU {gpu} has no slot with instance id {instance_id}")
