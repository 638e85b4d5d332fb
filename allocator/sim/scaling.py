"""The simulated pool at another size: node groups repeated or trimmed in proportion, quotas scaled."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import replace

from allocator.model import NodeSpec, PoolConfig
from allocator.pool import pool_capacity, validate_pool


def scale_pool(pool: PoolConfig, gpus: int) -> PoolConfig:
    """The pool with about `gpus` GPUs: each node group (node_pool) repeated or trimmed in
    proportion, at least one node per group (the model and share-mode mix stays), whole nodes
    (so the result is the nearest count the node sizes allow); quotas scale with their model's
    capacity, rounded down so that they still fit. New hosts continue their group's numbering."""
    total = sum(len(n.gpus) for n in pool.nodes)
    if gpus < 1:
        raise ValueError(f"gpus {gpus}: expected at least 1")
    if gpus == total:
        return pool
    groups: dict[str, list[NodeSpec]] = {}
    for n in pool.nodes:
        groups.setdefault(n.node_pool or n.gpus[0].gpu_model, []).append(n)
    target_nodes = max(len(groups), round(gpus / (total / len(pool.nodes))))
    ideal = {g: len(nodes) * target_nodes / len(pool.nodes) for g, nodes in groups.items()}
    count = {g: max(1, math.floor(v)) for g, v in ideal.items()}
    by_remainder = sorted(groups, key=lambda g: (-(ideal[g] - count[g]), list(groups).index(g)))
    for g in itertools.islice(itertools.cycle(by_remainder), max(0, target_nodes - sum(count.values()))):
        count[g] += 1
    for g in itertools.islice(
        itertools.cycle(reversed(by_remainder)), max(0, sum(count.values()) - target_nodes)
    ):
        if count[g] > 1:
            count[g] -= 1
    used = {n.host for n in pool.nodes}
    next_no: dict[str, int] = defaultdict(int)
    for host in used:
        prefix, number = _split_host(host)
        next_no[prefix] = max(next_no[prefix], number)
    nodes: list[NodeSpec] = []
    for g, members in groups.items():
        for i in range(count[g]):
            node = members[i % len(members)]
            if i >= len(members):
                prefix, number = _split_host(node.host)
                next_no[prefix] += 1
                width = max(2, len(str(number)) if number else 2)
                host = f"{prefix}{next_no[prefix]:0{width}d}"
                node = NodeSpec(host, tuple(replace(gpu, host=host) for gpu in node.gpus), node.node_pool)
            nodes.append(node)
    scaled = replace(pool, nodes=tuple(nodes))
    before, after = pool_capacity(pool), pool_capacity(scaled)
    queues = tuple(
        replace(
            q,
            quota={
                m: float(math.floor(v * after.get(m, 0.0) / before[m] + 1e-9)) for m, v in q.quota.items()
            },
        )
        for q in pool.queues
    )
    slot_ids = {s.slot_id for s in scaled.slots()}
    reservations = tuple(r for r in pool.reservations if set(r.slot_ids) <= slot_ids)
    scaled = replace(scaled, queues=queues, reservations=reservations)
    validate_pool(scaled, "scaled pool: ")
    return scaled


def _split_host(host: str) -> tuple[str, int]:
    digits = len(host) - len(host.rstrip("0123456789"))
    return (host[:-digits], int(host[-digits:])) if digits else (f"{host}-", 0)
