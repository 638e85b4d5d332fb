"""Telemetry units: what has its own series in dcgm-exporter's output.

A whole GPU is one series; a MIG GPU one series per GPU instance (GPU_I_PROFILE, GPU_I_ID); a
time-sliced GPU one series for all its replicas. Each unit carries the labels the exporter writes
(uuid, device, PCI bus id, model name) and which activity metric its GPU reports: L40S nodes model
an exporter without DCP profiling (DCGM_FI_DEV_GPU_UTIL only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from allocator.model import NodeSpec, ShareMode

PROFILING_MODELS = frozenset({"H100", "A100"})  # L40S: exporter without DCP profiling
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# DGX H100 / HGX bus ids of GPUs 0-7 (nvidia-smi -q)
_PCI_BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


@dataclass(frozen=True)
class TelemetryUnit:
    """A series owner: a whole GPU, a MIG GPU instance, or a time-sliced GPU (all its replicas)."""

    host: str
    gpu: int
    uuid: str
    gpu_model: str
    model_name: str
    share_mode: ShareMode
    gpu_instance_id: int | None  # MIG only; time-slice replicas share the GPU's series
    profile: str | None
    memory_mib: int
    fraction: float  # of the physical GPU's compute: the MIG share, else 1
    slot_ids: tuple[str, ...]
    idle_w: float
    max_w: float

    @property
    def profiling(self) -> bool:
        return self.gpu_model in PROFILING_MODELS

    @property
    def activity_metric(self) -> str:
        return GR_ENGINE_ACTIVE if self.profiling else GPU_UTIL

    @property
    def device(self) -> str:
        return f"nvidia{self.gpu}"

    @property
    def pci_bus_id(self) -> str:
        bus = _PCI_BUS[self.gpu] if self.gpu < len(_PCI_BUS) else f"{0xC0 + self.gpu:02X}"
        return f"00000000:{bus}:00.0"


def telemetry_units(nodes: Iterable[NodeSpec]) -> tuple[TelemetryUnit, ...]:
    out: list[TelemetryUnit] = []
    for node in nodes:
        for g in node.gpus:
            model = g.model
            slots = g.slots()
            common = {
                "host": g.host,
                "gpu": g.index,
                "uuid": g.uuid,
                "gpu_model": g.gpu_model,
                "model_name": model.model_name,
                "share_mode": g.share_mode,
                "idle_w": model.idle_w,
                "max_w": model.max_w,
            }
            if g.share_mode == ShareMode.MIG:
                out.extend(
                    TelemetryUnit(
                        **common,
                        gpu_instance_id=s.gpu_instance_id,
                        profile=s.profile,
                        memory_mib=s.memory_mib,
                        fraction=s.fraction,
                        slot_ids=(s.slot_id,),
                    )
                    for s in slots
                )
            else:
                out.append(
                    TelemetryUnit(
                        **common,
                        gpu_instance_id=None,
                        profile=None,
                        memory_mib=model.memory_mib,
                        fraction=1.0,
                        slot_ids=tuple(s.slot_id for s in slots),
                    )
                )
    return tuple(out)
