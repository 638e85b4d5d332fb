"""Hardware faults on the simulated pool, at published rates (sources: docs/simulator.md, "Faults").

Each physical GPU fails by a Poisson process per fault kind, at the rates of Meta's Llama 3 405B
pre-training run (419 unexpected interruptions in 54 days on 16,384 H100 GPUs, by cause). A small,
seeded set of weak GPUs fails far more often (repeat offenders exist in real fleets; their share and
factor are assumptions). Whole hosts go down at the run's host-level rate (network switch or cable,
CPU). Every run holds at least one GPU fault and one host going down, so that short runs show them.
The plan is drawn once from the seed, apart from the workload's generator, so it does not move the jobs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

import numpy as np

from allocator.model import Action, ActionKind, JobState, PoolConfig

# The Llama 3 405B run: 16,384 GPUs x 54 days, on 8-GPU servers ("The Llama 3 Herd of Models", Table 5)
LLAMA3_GPU_DAYS = 16_384 * 54
LLAMA3_NODE_DAYS = LLAMA3_GPU_DAYS / 8
WEAK_SHARE = 0.01  # of the GPUs (at least one): an assumption
WEAK_FACTOR = 30.0  # their rate over the others': an assumption
# A weak GPU's fault often comes back within hours of the reset (the "lemon" pattern of Kokolis et
# al., 2024): the share that recurs and the mean delay are assumptions.
RECUR_SHARE = 0.5
RECUR_MEAN_S = 6 * 3600.0


@dataclass(frozen=True)
class FaultKind:
    """A cause of interruption: its rate, what DCGM shows, and what the scheduler records for the job it kills."""

    name: str
    rate: float  # per GPU-day, or per node-day when host_down
    xid: int | None
    reason: str
    dbe: int = 0  # double-bit ECC errors it brings (each retires a row)
    remap_failure_share: float = 0.0  # of these faults, the share that finds no spare row left
    host_down: bool = False


FAULT_KINDS = (
    # "Faulty GPU" 148: the GPU stops answering (XID 79, fallen off the bus)
    FaultKind("gpu", 148 / LLAMA3_GPU_DAYS, 79, "CUDA error: unspecified launch failure"),
    # "GPU HBM3 memory" 72: an uncorrectable ECC error (XID 48), the row retired; a quarter find no
    # spare row (an assumption)
    FaultKind(
        "hbm",
        72 / LLAMA3_GPU_DAYS,
        48,
        "CUDA error: uncorrectable ECC error encountered",
        dbe=1,
        remap_failure_share=0.25,
    ),
    # "GPU SRAM memory" 19: an uncontained ECC error in on-chip memory (XID 95)
    FaultKind("sram", 19 / LLAMA3_GPU_DAYS, 95, "CUDA error: uncorrectable ECC error encountered"),
    # "GPU system processor" 17: the GSP stops responding (XID 119)
    FaultKind("gsp", 17 / LLAMA3_GPU_DAYS, 119, "CUDA error: GPU is lost"),
    # "Network switch/cable" 35 and "CPU" 2: the host drops out; the scheduler marks its jobs NODE_FAIL
    FaultKind("host", 37 / LLAMA3_NODE_DAYS, None, "node lost contact", host_down=True),
)


@dataclass(frozen=True)
class Fault:
    at: dt.datetime
    kind: str
    host: str
    gpu: int | None  # None: the whole host
    xid: int | None
    dbe: int
    remap_failure: bool
    weak: bool  # on a weak GPU

    @property
    def end(self) -> tuple[JobState, int, str]:
        """The state, exit code and reason a job it kills ends with."""
        kind = _KIND[self.kind]
        if kind.host_down:
            return JobState.NODE_FAIL, 0, kind.reason
        return JobState.FAILED, 1, kind.reason


_KIND = {k.name: k for k in FAULT_KINDS}


def weak_gpus(pool: PoolConfig, seed: int) -> tuple[tuple[str, int], ...]:
    """The weak GPUs (host, index) of this seed: WEAK_SHARE of the GPUs, at least one."""
    gpus = [(g.host, g.index) for n in pool.nodes for g in n.gpus]
    rng = np.random.default_rng([seed, 0xFA17])
    k = max(1, round(WEAK_SHARE * len(gpus)))
    return tuple(gpus[i] for i in sorted(rng.choice(len(gpus), size=k, replace=False)))


def plan_faults(
    pool: PoolConfig, start: dt.datetime, days: int, seed: int, scale: float = 1.0
) -> tuple[Fault, ...]:
    """The faults of `days` days from `start`, in time order (scale multiplies every rate)."""
    gpus = [(g.host, g.index) for n in pool.nodes for g in n.gpus]
    hosts = [n.host for n in pool.nodes]
    weak = set(weak_gpus(pool, seed))
    factor = np.array([WEAK_FACTOR if g in weak else 1.0 for g in gpus])
    rng = np.random.default_rng([seed, 0xFA])
    span = days * 86400.0
    faults: list[Fault] = []
    for kind in FAULT_KINDS:
        targets = hosts if kind.host_down else gpus
        rate = kind.rate * scale * (1.0 if kind.host_down else factor)
        counts = rng.poisson(rate * days, size=len(targets))
        seconds = rng.random(int(counts.sum())) * span
        remap = rng.random(len(seconds)) < kind.remap_failure_share
        owner = np.repeat(np.arange(len(targets)), counts)
        faults.extend(
            _fault(kind, targets[o], start, s, bool(r), weak)
            for o, s, r in zip(owner, seconds, remap, strict=True)
        )
    # a short run still shows both: a GPU fault on the first weak GPU (with its recurrence, so the
    # drain loop has a GPU to find), a host going down
    forced = None
    if not any(f.gpu is not None for f in faults):
        forced = _fault(FAULT_KINDS[0], min(weak), start, rng.random() * span * 0.75, False, weak)
        faults.append(forced)
    faults.extend(_recurrences(faults, forced, start, span, seed))
    if not any(f.gpu is None for f in faults):
        faults.append(
            _fault(
                FAULT_KINDS[-1], hosts[int(rng.integers(len(hosts)))], start, rng.random() * span, False, weak
            )
        )
    return tuple(sorted(faults, key=lambda f: (f.at, f.host, -1 if f.gpu is None else f.gpu, f.kind)))


def _recurrences(faults: list[Fault], forced: Fault | None, start: dt.datetime, span: float,
                 seed: int) -> list[Fault]:
    """A weak GPU's faults that come back: RECUR_SHARE of them (the forced one always), the same kind
    again after an exponential delay of mean RECUR_MEAN_S, when that is still inside the run. Drawn
    from a generator of their own, so the first faults do not move."""
    rng = np.random.default_rng([seed, 0xFA, 2])
    out = []
    for f in sorted((f for f in faults if f.weak), key=lambda f: (f.at, f.host, f.gpu, f.kind)):
        recurs, delay = rng.random() < RECUR_SHARE, rng.exponential(RECUR_MEAN_S)
        seconds = (f.at - start).total_seconds() + delay
        if f is forced:  # it always comes back, halfway to the run's end at the latest
            recurs, seconds = True, min(seconds, ((f.at - start).total_seconds() + span) / 2)
        if recurs and seconds < span:
            out.append(replace(f, at=start + dt.timedelta(seconds=round(seconds))))
    return out


def _fault(
    kind: FaultKind,
    target: str | tuple[str, int],
    start: dt.datetime,
    seconds: float,
    remap: bool,
    weak: set[tuple[str, int]],
) -> Fault:
    host, gpu = (target, None) if isinstance(target, str) else target
    return Fault(
        at=start + dt.timedelta(seconds=round(float(seconds))),
        kind=kind.name,
        host=host,
        gpu=gpu,
        xid=kind.xid,
        dbe=kind.dbe,
        remap_failure=remap,
        weak=(host, gpu) in weak,
    )


# Time a host that went down stays out: an assumption (no public repair-time figure was found for
# this: a switch or cable replaced, the node rebooted and health-checked).
HOST_REPAIR_S = 4 * 3600
NODE_HEALTH = "gpupool-node-health"  # the node health checker that drains a host it lost
NODE_HEALTH_ROLE = "governance_bot"  # the role allowed to drain (allocator.auth.Role)


def host_action(kind: ActionKind, host: str, down_at: dt.datetime) -> Action:
    """The node health checker's drain of a host that went down at `down_at` (kind DRAIN), or its
    undrain when the host is back (kind UNDRAIN); one key per outage, so a repeat is a no-op."""
    reason = "node lost contact" if kind == ActionKind.DRAIN else "node back after repair"
    key = f"node-health/{kind.value}/{host}/{down_at.isoformat()}"
    return Action(kind, key, host, NODE_HEALTH, reason=reason)
