"""What the engine accepts, checked before anything changes: a job request, a queue's quota, an
admin's change to a queue. Pure: the checks read the pool's fixed shape (`PoolShape`) and the
queues in force, and change nothing.

A request that breaks a rule is refused with `AdmissionError(rule, message)`, the first rule it
breaks in this order:

| rule | refused when |
|---|---|
| `request.tenant` | the tenant is not one of the pool's |
| `request.template` | the template or share mode is not a known value |
| `request.job_id` | the job id is already taken |
| `queue.unknown` | the queue does not exist |
| `queue.tenant` | the tenant submits to another tenant's queue (not shared with it) |
| `queue.template` | the queue does not take this template |
| `pool.gpu_model` | the pool has no GPUs of this model |
| `queue.gpu_model` | the queue does not run this model |
| `request.gpus` | fewer than 1 GPU/slice/share |
| `share_mode.mig_profile` | MIG without a profile the model knows or the pool has; a profile without MIG |
| `pool.share_mode` | the pool has no GPUs of this model shared this way |
| `queue.max_gpus_per_request` | more than the queue allows per request |
| `template.training.expected_runtime_s` | training without an expected run time (>= 1 s) |
| `template.training.checkpoint_policy` | training without a checkpoint policy ("none" counts as none) |
| `template.inference.min_replicas` | inference without a minimum replica count (>= 1) |
| `template.inference.rollback` | inference without a rollback method |
| `template.experiment.queue` | an experiment outside a low-priority queue and without a reservation |
| `template.interactive.idle_reminder_s` | an idle reminder below 1 s |
| `request.time_limit_s` | a time limit below 1 s |
| `queue.max_runtime_s` | a time limit, or a training job's expected run time, above the queue's cap |
| `reservation.unknown` / `.tenant` / `.ended` / `.gpu_model` / `.capacity` | no such reservation; another tenant's; already over; none of its slots are of this model and share mode; fewer slots than asked |
| `request.whole_nodes` | more whole GPUs than a node has, but not a multiple of the node size |
| `pool.capacity` | more than the pool could ever place (MIG and time-sliced requests go on one node) |
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from allocator import records
from allocator.model import (
    GPU_MODELS,
    MIG_PROFILES,
    AdmissionError,
    JobSpec,
    PoolConfig,
    QueueSpec,
    Reservation,
    ShareMode,
    Slot,
    Template,
)
from allocator.placement import Request, place

EPS = 1e-6  # tolerance when GPUs (fractions of them) are added up against a quota or the pool
NO_CHECKPOINT = frozenset({"", "none", "never", "false", "no"})
EDITABLE_QUEUE_FIELDS = ("quota", "priority", "preemptible", "max_gpus_per_request", "max_runtime_s",
                         "retry_budget", "templates", "gpu_models", "can_borrow", "shared_with")

Kind = tuple[str, str, str | None]  # (GPU model, share mode, MIG profile or None)


@dataclass(frozen=True)
class PoolShape:
    """What the pool is made of, fixed for an engine's life."""

    tenants: tuple[str, ...]
    slots: dict[str, Slot]  # slot id -> slot
    models: set[str]
    node_size: dict[str, int]  # most whole GPUs of the model on one node
    kind_count: dict[Kind, int]  # slots of each kind in the pool
    host_max: dict[Kind, int]  # most slots of the kind on one node
    ts_fraction: dict[str, float]  # the largest time-sliced share of each model
    capacity: dict[str, float]  # fraction-weighted GPUs of each model
    reservations: dict[str, Reservation]

    @classmethod
    def of(cls, pool: PoolConfig) -> PoolShape:
        slots = {s.slot_id: s for s in pool.slots()}
        node_size: dict[str, int] = defaultdict(int)
        per_host: dict[tuple[str, str, str, str | None], int] = defaultdict(int)
        kind_count: dict[Kind, int] = defaultdict(int)
        ts_fraction: dict[str, float] = {}
        capacity: dict[str, float] = defaultdict(float)
        for s in slots.values():
            mode = ShareMode(s.share_mode).value
            per_host[(s.host, s.gpu_model, mode, s.profile)] += 1
            kind_count[(s.gpu_model, mode, s.profile)] += 1
            capacity[s.gpu_model] += s.fraction
            if mode == ShareMode.TIMESLICE:
                ts_fraction[s.gpu_model] = max(ts_fraction.get(s.gpu_model, 0.0), s.fraction)
        host_max: dict[Kind, int] = defaultdict(int)
        for (_, model, mode, profile), n in per_host.items():
            host_max[(model, mode, profile)] = max(host_max[(model, mode, profile)], n)
            if mode == ShareMode.WHOLE:
                node_size[model] = max(node_size[model], n)
        return cls(tuple(pool.tenants), slots, {s.gpu_model for s in slots.values()}, node_size, kind_count,
                   host_max, ts_fraction, capacity, {r.name: r for r in pool.reservations})

    def weight(self, spec: JobSpec) -> float:
        """Fraction-weighted GPUs a request counts against quota (time-sliced: the largest share)."""
        if spec.share_mode == ShareMode.MIG:
            slices = MIG_PROFILES[spec.gpu_model][spec.mig_profile][0]
            return spec.gpus * slices / (GPU_MODELS[spec.gpu_model].compute_slices or 7)
        if spec.share_mode == ShareMode.TIMESLICE:
            return spec.gpus * self.ts_fraction.get(spec.gpu_model, 1.0)
        return float(spec.gpus)


# --- job requests ------------------------------------------------------------------------------

def admission_error(spec: JobSpec, now: dt.datetime, queues: Mapping[str, QueueSpec],
                    shape: PoolShape) -> AdmissionError | None:
    """The first rule `spec` breaks, or None (what `Engine.submit` refuses)."""
    if spec.tenant not in shape.tenants:
        return AdmissionError("request.tenant", f"tenant {spec.tenant!r} is not one of the pool's tenants")
    queue = queues.get(spec.queue)
    if queue is None:
        return AdmissionError("queue.unknown", f"queue {spec.queue!r} does not exist")
    if spec.tenant != queue.tenant and "*" not in queue.shared_with and spec.tenant not in queue.shared_with:
        return AdmissionError("queue.tenant", f"tenant {spec.tenant} may not submit to queue {queue.name} "
                                              f"of tenant {queue.tenant}")
    try:
        template = Template(spec.template)
        mode = ShareMode(spec.share_mode)
    except ValueError as error:
        return AdmissionError("request.template", str(error))
    if template not in queue.templates:
        return AdmissionError("queue.template", f"queue {queue.name} takes {[t.value for t in queue.templates]}, "
                                                f"not {template.value}")
    model = spec.gpu_model
    if model not in shape.models:
        return AdmissionError("pool.gpu_model", f"the pool has no {model} GPUs (has {sorted(shape.models)})")
    if model not in queue.gpu_models:
        return AdmissionError("queue.gpu_model", f"queue {queue.name} runs {list(queue.gpu_models)}, not {model}")
    if not isinstance(spec.gpus, int) or spec.gpus < 1:
        return AdmissionError("request.gpus", f"gpus is {spec.gpus!r}, expected at least 1")
    profile = spec.mig_profile if mode == ShareMode.MIG else None
    if mode == ShareMode.MIG:
        known = MIG_PROFILES.get(model, {})
        if spec.mig_profile not in known:
            return AdmissionError("share_mode.mig_profile", f"MIG profile {spec.mig_profile!r} is not one of "
                                                            f"{model}'s {sorted(known)}")
        if not shape.kind_count.get((model, mode.value, profile)):
            return AdmissionError("share_mode.mig_profile", f"the pool has no {model} MIG instance of profile "
                                                            f"{spec.mig_profile}")
    elif spec.mig_profile:
        return AdmissionError("share_mode.mig_profile", f"mig_profile {spec.mig_profile} given with share_mode "
                                                        f"{mode.value}; use share_mode mig")
    elif not shape.kind_count.get((model, mode.value, None)):
        return AdmissionError("pool.share_mode", f"the pool has no {model} GPUs shared as {mode.value}")
    if spec.gpus > queue.max_gpus_per_request:
        return AdmissionError("queue.max_gpus_per_request", f"{spec.gpus} asked, queue {queue.name} allows at most "
                                                            f"{queue.max_gpus_per_request}")
    error = _template_error(spec, template, queue)
    if error is not None:
        return error
    if spec.reservation:
        return _reservation_error(spec, mode, profile, now, shape)
    if mode == ShareMode.WHOLE and spec.gpus > shape.node_size[model]:
        size = shape.node_size[model]
        if spec.gpus % size:
            return AdmissionError("request.whole_nodes", f"{spec.gpus} {model} GPUs is more than a node ({size}) "
                                                         f"but not whole nodes: ask for a multiple of {size}")
        if spec.gpus > shape.kind_count[(model, mode.value, None)]:
            return AdmissionError("pool.capacity", f"{spec.gpus} {model} GPUs asked, the pool has "
                                                   f"{shape.kind_count[(model, mode.value, None)]}")
    elif mode != ShareMode.WHOLE and spec.gpus > shape.host_max[(model, mode.value, profile)]:
        return AdmissionError("pool.capacity", f"{spec.gpus} {mode.value} slots asked; they go on one node and a "
                                               f"node has at most {shape.host_max[(model, mode.value, profile)]}")
    return None

def _template_error(spec: JobSpec, template: Template, queue: QueueSpec) -> AdmissionError | None:
    if template == Template.TRAINING:
        if spec.expected_runtime_s is None or spec.expected_runtime_s < 1:
            return AdmissionError("template.training.expected_runtime_s",
                                  "a training job declares its expected run time in seconds")
        if (spec.checkpoint_policy or "").strip().lower() in NO_CHECKPOINT:
            return AdmissionError("template.training.checkpoint_policy",
                                  f"a training job declares a checkpoint policy (got {spec.checkpoint_policy!r})")
    elif template == Template.INFERENCE:
        if spec.min_replicas is None or spec.min_replicas < 1:
            return AdmissionError("template.inference.min_replicas",
                                  "an inference service declares its minimum replica count (>= 1)")
        if not (spec.rollback or "").strip():
            return AdmissionError("template.inference.rollback", "an inference service declares a rollback method")
    elif template == Template.EXPERIMENT:
        if not queue.low_priority and not spec.reservation:
            return AdmissionError("template.experiment.queue",
                                  f"an experiment runs in a low-priority queue or on a reservation, not in "
                                  f"{queue.name}")
    elif template == Template.INTERACTIVE and spec.idle_reminder_s is not None and spec.idle_reminder_s < 1:
        return AdmissionError("template.interactive.idle_reminder_s", "an idle reminder is at least 1 s")
    if spec.time_limit_s is not None and spec.time_limit_s < 1:
        return AdmissionError("request.time_limit_s", f"time_limit_s is {spec.time_limit_s}, expected >= 1")
    cap = queue.max_runtime_s
    if cap is not None:
        if spec.time_limit_s is not None and spec.time_limit_s > cap:
            return AdmissionError("queue.max_runtime_s", f"time_limit_s {spec.time_limit_s} is above queue "
                                                         f"{queue.name}'s cap of {cap} s")
        if template == Template.TRAINING and spec.expected_runtime_s > cap:
            return AdmissionError("queue.max_runtime_s", f"expected_runtime_s {spec.expected_runtime_s} is above "
                                                         f"queue {queue.name}'s cap of {cap} s")
    return None

def _reservation_error(spec: JobSpec, mode: ShareMode, profile: str | None, now: dt.datetime,
                       shape: PoolShape) -> AdmissionError | None:
    r = shape.reservations.get(spec.reservation)
    if r is None:
        return AdmissionError("reservation.unknown", f"no reservation {spec.reservation!r}")
    if r.tenant != spec.tenant:
        return AdmissionError("reservation.tenant", f"reservation {r.name} belongs to tenant {r.tenant}")
    if now >= r.end:
        return AdmissionError("reservation.ended", f"reservation {r.name} ended at {records.rfc3339(r.end)}")
    request = Request(spec.gpu_model, mode, spec.gpus, profile)
    mine = [shape.slots[s] for s in r.slot_ids if request.matches(shape.slots[s])]
    if not mine:
        return AdmissionError("reservation.gpu_model", f"reservation {r.name} has no {spec.gpu_model} "
                                                       f"{profile or mode.value} slots")
    if place(request, mine, shape.node_size[spec.gpu_model]) is None:
        return AdmissionError("reservation.capacity", f"{spec.gpus} slots asked do not fit reservation {r.name}")
    return None


# --- queues ------------------------------------------------------------------------------------


def quota_problem(queue: QueueSpec, quota: object, queues: Mapping[str, QueueSpec], shape: PoolShape) -> str | None:
    """Why `quota` cannot be the queue's quota (with the other queues' quotas in force), or None."""
    if not isinstance(quota, Mapping) or not quota:
        return "a quota change needs quota: {GPU model: GPUs}"
    for model, gpus in quota.items():
        if model not in queue.gpu_models:
            return f"queue {queue.name} does not run {model} (runs {list(queue.gpu_models)})"
        if not isinstance(gpus, int | float) or isinstance(gpus, bool) or gpus < 0:
            return f"quota {model} is {gpus!r}, expected GPUs >= 0"
        if queue.low_priority and gpus > 0:
            return f"queue {queue.name} is low-priority and holds no quota"
    capacity = shape.capacity
    for model, gpus in quota.items():
        total = gpus + sum(q.quota.get(model, 0.0) for q in queues.values() if q.name != queue.name)
        if total > capacity[model] + EPS:
            return f"quotas for {model} would add up to {total:g} GPUs; the pool has {capacity[model]:g}"
    return None


def queue_changes(queue: QueueSpec, changes: Mapping, queues: Mapping[str, QueueSpec], shape: PoolShape) -> dict:
    """An admin's change to a queue as validated, typed field values; ValueError naming the field
    otherwise."""
    unknown = sorted(set(changes) - set(EDITABLE_QUEUE_FIELDS))
    if unknown:
        raise ValueError(f"fields {unknown} cannot be changed; editable: {list(EDITABLE_QUEUE_FIELDS)}")
    out: dict = {}
    for name, value in changes.items():
        if name in ("priority", "retry_budget", "max_gpus_per_request"):
            low = 1 if name == "max_gpus_per_request" else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} is {value!r}, expected an integer >= {low}")
        elif name == "max_runtime_s":
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"max_runtime_s is {value!r}, expected seconds >= 1 or null")
        elif name in ("preemptible", "can_borrow"):
            if not isinstance(value, bool):
                raise ValueError(f"{name} is {value!r}, expected true or false")
        elif name == "templates":
            try:
                value = tuple(Template(t) for t in value)
            except ValueError as error:
                raise ValueError(f"templates: {error}") from None
        elif name == "gpu_models":
            value = tuple(value)
            bad = [m for m in value if m not in shape.models]
            if bad:
                raise ValueError(f"gpu_models {bad} are not in the pool")
        elif name == "shared_with":
            value = tuple(value)
            bad = [t for t in value if t != "*" and t not in shape.tenants]
            if bad:
                raise ValueError(f"shared_with names unknown tenants {bad}")
        out[name] = value
    if "quota" in out:
        candidate = dataclasses.replace(queue, gpu_models=out.get("gpu_models", queue.gpu_models))
        problem = quota_problem(candidate, out["quota"], queues, shape)
        if problem is not None:
            raise ValueError(f"quota: {problem}")
        out["quota"] = {m: float(v) for m, v in out["quota"].items()}
    return out
