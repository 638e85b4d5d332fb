"""The pool's configuration: nodes and how their GPUs are shared, tenants, queues, reservations.

`default_pool()` is the pool the allocator runs with out of the box (`allocator/pools/default.yaml`:
256 GPUs, 6 tenants; its comments state the assumptions). `load_pool(path)` reads the same YAML
format. Every problem is reported with the file and the entry (`default.yaml: queues[2]
(speech-train): quota H100 is -1, expected >= 0`), and the pool is checked as a whole: hosts and
queues are unique, queues name known tenants and models, and the quotas of a model add up to at
most that model's capacity (fraction-weighted GPUs), so that every quota can be honoured.

Format (see the default for an example):

```yaml
prices_per_gpu_hour: {H100: 4.0}
preemption_grace_s: 60
tenants: [vision, ...]
nodes:      # hosts: one name or a range like h100-01..h100-12
  - {hosts: h100-01..h100-12, node_pool: h100, gpu_model: H100, gpus: 8}
  - {hosts: a100-11, gpu_model: A100, gpus: 8, share_mode: mig, mig_layout: [3g.40gb, 2g.20gb]}
  - {hosts: l40s-07, gpu_model: L40S, gpus: 8, share_mode: timeslice, replicas: 4}
queues:     # QueueSpec fields
  - {name: vision-train, tenant: vision, gpu_models: [H100], quota: {H100: 8}, priority: 50}
reservations:   # optional; slots are slot ids host/gpu or host/gpu/instance, or whole hosts
  - {name: paper-deadline, tenant: vision, hosts: [a100-03], start: 2026-11-10T00:00:00Z, end: ...}
```
"""
from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from importlib import resources
from pathlib import Path

import yaml

from allocator.model import (
    GPU_MODELS,
    MIG_PROFILES,
    GpuSpec,
    NodeSpec,
    PoolConfig,
    QueueSpec,
    Reservation,
    ShareMode,
    Template,
)

DEFAULT_POOL = "default.yaml"
_RANGE = re.compile(r"^(?P<prefix>.*?)(?P<first>\d+)\.\.(?P=prefix)(?P<last>\d+)$")
_QUEUE_FIELDS = {"name", "tenant", "gpu_models", "quota", "priority", "preemptible", "max_gpus_per_request",
                 "max_runtime_s", "retry_budget", "templates", "low_priority", "can_borrow", "shared_with"}
_NODE_FIELDS = {"hosts", "node_pool", "gpu_model", "gpus", "share_mode", "mig_layout", "replicas"}
_TOP_FIELDS = {"prices_per_gpu_hour", "preemption_grace_s", "tenants", "nodes", "queues", "reservations"}


class PoolError(ValueError):
    """The pool configuration is invalid; the message names the file and the entry."""


def expand_hosts(spec: str) -> list[str]:
    """`h100-01..h100-12` → h100-01, ..., h100-12 (zero-padded like the first); a plain name → itself."""
    match = _RANGE.match(spec)
    if match is None:
        if ".." in spec:
            raise ValueError(f"host range {spec!r} is not like h100-01..h100-12")
        return [spec]
    first, last = match.group("first"), match.group("last")
    if int(last) < int(first):
        raise ValueError(f"host range {spec!r} ends before it starts")
    return [f"{match.group('prefix')}{n:0{len(first)}d}" for n in range(int(first), int(last) + 1)]


def _unknown(entry: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(entry) - allowed)
    if extra:
        raise PoolError(f"{where}: unknown field(s) {extra}; expected some of {sorted(allowed)}")


def _nodes(entries: list, where: str) -> list[NodeSpec]:
    nodes = []
    for i, entry in enumerate(entries):
        at = f"{where}nodes[{i}]"
        if not isinstance(entry, dict):
            raise PoolError(f"{at}: expected a mapping, got {type(entry).__name__}")
        _unknown(entry, _NODE_FIELDS, at)
        model = entry.get("gpu_model")
        if model not in GPU_MODELS:
            raise PoolError(f"{at}: gpu_model {model!r} is not one of {sorted(GPU_MODELS)}")
        count = entry.get("gpus")
        if not isinstance(count, int) or count < 1:
            raise PoolError(f"{at}: gpus is {count!r}, expected a count >= 1")
        try:
            mode = ShareMode(entry.get("share_mode", "whole"))
        except ValueError:
            raise PoolError(f"{at}: share_mode {entry.get('share_mode')!r} is not whole, mig or timeslice") from None
        layout: tuple[str, ...] = ()
        replicas = 1
        if mode == ShareMode.MIG:
            layout = tuple(entry.get("mig_layout") or ())
            profiles = MIG_PROFILES.get(model, {})
            if not layout:
                raise PoolError(f"{at}: share_mode mig needs a mig_layout")
            bad = [p for p in layout if p not in profiles]
            if bad:
                raise PoolError(f"{at}: MIG profile(s) {bad} unknown for {model}; known: {sorted(profiles)}")
            slices = sum(profiles[p][0] for p in layout)
            if slices > (GPU_MODELS[model].compute_slices or 0):
                raise PoolError(f"{at}: mig_layout uses {slices} compute slices, {model} has "
                                f"{GPU_MODELS[model].compute_slices}")
        elif mode == ShareMode.TIMESLICE:
            replicas = entry.get("replicas")
            if not isinstance(replicas, int) or replicas < 2:
                raise PoolError(f"{at}: share_mode timeslice needs replicas >= 2, got {replicas!r}")
        try:
            hosts = expand_hosts(str(entry.get("hosts", "")))
        except ValueError as error:
            raise PoolError(f"{at}: {error}") from None
        for host in hosts:
            if not host:
                raise PoolError(f"{at}: hosts is missing")
            gpus = tuple(GpuSpec(host, g, model, mode, layout, replicas) for g in range(count))
            nodes.append(NodeSpec(host, gpus, entry.get("node_pool")))
    return nodes


def _queue(entry: object, at: str) -> QueueSpec:
    if not isinstance(entry, dict):
        raise PoolError(f"{at}: expected a mapping, got {type(entry).__name__}")
    _unknown(entry, _QUEUE_FIELDS, at)
    for required in ("name", "tenant", "gpu_models"):
        if not entry.get(required):
            raise PoolError(f"{at}: {required} is missing")
    at = f"{at} ({entry['name']})"
    quota = entry.get("quota") or {}
    if not isinstance(quota, dict):
        raise PoolError(f"{at}: quota is {quota!r}, expected a mapping of GPU model to GPUs")
    for model, gpus in quota.items():
        if not isinstance(gpus, int | float) or gpus < 0:
            raise PoolError(f"{at}: quota {model} is {gpus!r}, expected >= 0")
    try:
        templates = tuple(Template(t) for t in entry.get("templates", [t.value for t in Template]))
    except ValueError as error:
        raise PoolError(f"{at}: {error}; templates are {[t.value for t in Template]}") from None
    fields = {k: v for k, v in entry.items() if k not in ("quota", "templates", "gpu_models", "shared_with")}
    queue = QueueSpec(**fields, gpu_models=tuple(entry["gpu_models"]), quota={m: float(v) for m, v in quota.items()},
                      templates=templates, shared_with=tuple(entry.get("shared_with") or ()))
    for name in ("priority", "max_gpus_per_request", "retry_budget"):
        value = getattr(queue, name)
        if not isinstance(value, int) or value < (1 if name == "max_gpus_per_request" else 0):
            raise PoolError(f"{at}: {name} is {value!r}, expected a non-negative integer")
    if queue.max_runtime_s is not None and (not isinstance(queue.max_runtime_s, int) or queue.max_runtime_s < 1):
        raise PoolError(f"{at}: max_runtime_s is {queue.max_runtime_s!r}, expected seconds >= 1")
    if queue.low_priority and any(queue.quota.values()):
        raise PoolError(f"{at}: a low-priority queue holds no quota (it runs on idle capacity only)")
    return queue


def _time(value: object, at: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            raise PoolError(f"{at}: {value!r} is not an ISO 8601 time") from None
    else:
        raise PoolError(f"{at}: {value!r} is not a time")
    return moment.astimezone(dt.UTC).replace(tzinfo=None) if moment.tzinfo else moment


def _reservations(entries: list, slot_ids: dict[str, list[str]], where: str) -> list[Reservation]:
    out = []
    for i, entry in enumerate(entries):
        at = f"{where}reservations[{i}]"
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("tenant"):
            raise PoolError(f"{at}: expected a mapping with name, tenant, start, end and slots or hosts")
        ids: list[str] = []
        for host in entry.get("hosts") or []:
            if host not in slot_ids:
                raise PoolError(f"{at}: host {host!r} is not in the pool")
            ids.extend(slot_ids[host])
        known = {s for host_ids in slot_ids.values() for s in host_ids}
        for sid in entry.get("slots") or []:
            if sid not in known:
                raise PoolError(f"{at}: slot {sid!r} is not in the pool")
            ids.append(sid)
        if not ids:
            raise PoolError(f"{at}: a reservation needs slots or hosts")
        start, end = _time(entry.get("start"), f"{at}.start"), _time(entry.get("end"), f"{at}.end")
        if end <= start:
            raise PoolError(f"{at}: end {end} is not after start {start}")
        out.append(Reservation(entry["name"], entry["tenant"], tuple(dict.fromkeys(ids)), start, end))
    return out


def validate_pool(pool: PoolConfig, where: str = "") -> None:
    """Checks the pool as a whole; raises PoolError naming the problem."""
    hosts = [n.host for n in pool.nodes]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        raise PoolError(f"{where}nodes: host(s) {dupes} listed twice")
    names = [q.name for q in pool.queues]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PoolError(f"{where}queues: queue(s) {dupes} listed twice")
    capacity = pool_capacity(pool)
    totals: dict[str, float] = defaultdict(float)
    for i, q in enumerate(pool.queues):
        at = f"{where}queues[{i}] ({q.name})"
        if q.tenant not in pool.tenants:
            raise PoolError(f"{at}: tenant {q.tenant!r} is not one of the pool's tenants {list(pool.tenants)}")
        for model in set(q.gpu_models) | set(q.quota):
            if model not in capacity:
                raise PoolError(f"{at}: GPU model {model!r} is not in the pool (has {sorted(capacity)})")
        for model in q.quota:
            if model not in q.gpu_models:
                raise PoolError(f"{at}: quota for {model} but gpu_models is {list(q.gpu_models)}")
        for tenant in q.shared_with:
            if tenant != "*" and tenant not in pool.tenants:
                raise PoolError(f"{at}: shared_with names unknown tenant {tenant!r}")
        for model, gpus in q.quota.items():
            totals[model] += gpus
    for model, total in sorted(totals.items()):
        if total > capacity[model] + 1e-9:
            raise PoolError(f"{where}queues: quotas for {model} add up to {total:g} GPUs, the pool has "
                            f"{capacity[model]:g}")
    if pool.preemption_grace_s < 0:
        raise PoolError(f"{where}preemption_grace_s is {pool.preemption_grace_s}, expected >= 0")
    names = [r.name for r in pool.reservations]
    if len(set(names)) != len(names):
        raise PoolError(f"{where}reservations: a name is listed twice in {names}")
    for r in pool.reservations:
        if r.tenant not in pool.tenants:
            raise PoolError(f"{where}reservation {r.name}: tenant {r.tenant!r} is not one of the pool's tenants")


def pool_capacity(pool: PoolConfig) -> dict[str, float]:
    """GPUs per model, fraction-weighted (a fully partitioned MIG GPU counts 1)."""
    out: dict[str, float] = defaultdict(float)
    for s in pool.slots():
        out[s.gpu_model] += s.fraction
    return {m: round(v, 6) for m, v in out.items()}


def parse_pool(doc: object, where: str = "") -> PoolConfig:
    """A pool from its YAML document (already loaded); `where` prefixes error messages."""
    if not isinstance(doc, dict):
        raise PoolError(f"{where}expected a mapping at the top level")
    _unknown(doc, _TOP_FIELDS, where.rstrip(": ") or "pool")
    for required in ("tenants", "nodes", "queues"):
        if not doc.get(required):
            raise PoolError(f"{where}{required} is missing")
    nodes = _nodes(doc["nodes"], where)
    queues = [_queue(q, f"{where}queues[{i}]") for i, q in enumerate(doc["queues"])]
    slot_ids: dict[str, list[str]] = {n.host: [s.slot_id for g in n.gpus for s in g.slots()] for n in nodes}
    reservations = _reservations(doc.get("reservations") or [], slot_ids, where)
    prices = {str(m): float(p) for m, p in (doc.get("prices_per_gpu_hour") or {}).items()}
    grace = doc.get("preemption_grace_s", 60)
    if not isinstance(grace, int):
        raise PoolError(f"{where}preemption_grace_s is {grace!r}, expected seconds")
    pool = PoolConfig(tuple(nodes), tuple(queues), tuple(doc["tenants"]), tuple(reservations), prices, grace)
    validate_pool(pool, where)
    return pool


def load_pool(path: Path | str) -> PoolConfig:
    """A pool from a YAML file; PoolError names the file and the entry at fault."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise PoolError(f"{path.name}: not valid YAML: {error}") from None
    return parse_pool(doc, f"{path.name}: ")


def default_pool() -> PoolConfig:
    """The default pool (package data `allocator/pools/default.yaml`)."""
    text = resources.files("allocator").joinpath("pools", DEFAULT_POOL).read_text(encoding="utf-8")
    return parse_pool(yaml.safe_load(text), f"{DEFAULT_POOL}: ")
