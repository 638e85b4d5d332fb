"""Choosing slots for a request without fragmenting the pool needlessly (pure functions).

A request never spans GPU models or share modes. Rules, per share mode:

- whole GPUs: a request of at most one node's GPUs (`node_size`, the most whole GPUs a node of
  that model has) goes on one node, the node with the fewest free GPUs that still fits (best fit,
  so that free nodes stay free for large requests), lowest GPU indices first. A larger request
  takes whole nodes: it must be a multiple of `node_size` and gets that many entirely free nodes,
  in host order.
- MIG: instances of exactly the profile asked for, all on one node. One instance goes on the GPU
  with the fewest free instances (of any profile) that has the profile free (best fit); several
  go on the node with the fewest free instances that has enough, filling its fullest GPUs first.
- time-sliced: replicas on one node, packing the replicas of a GPU before opening another: one
  replica goes on the GPU with the fewest free replicas; several on the node with the fewest
  free replicas that has enough, fullest GPUs first.

Every choice is broken by (host, gpu, instance) so the result does not depend on the order of
`free`. `plan_preemption` does the same with the slots of running jobs that may be preempted.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from allocator.model import JobSpec, ShareMode, Slot


@dataclass(frozen=True)
class Request:
    """What placement needs to know about a job: model, share mode, count and MIG profile."""

    gpu_model: str
    share_mode: ShareMode
    count: int
    mig_profile: str | None = None

    @classmethod
    def of(cls, spec: JobSpec) -> Request:
        profile = spec.mig_profile if spec.share_mode == ShareMode.MIG else None
        return cls(spec.gpu_model, ShareMode(spec.share_mode), spec.gpus, profile)

    def kind_matches(self, slot: Slot) -> bool:
        """The slot is of this request's model and share mode (any MIG profile)."""
        return slot.gpu_model == self.gpu_model and slot.share_mode == self.share_mode

    def matches(self, slot: Slot) -> bool:
        """The slot can be one of this request's slots."""
        return self.kind_matches(slot) and (self.mig_profile is None or slot.profile == self.mig_profile)


def _order(slot: Slot) -> tuple[str, int, int]:
    return (slot.host, slot.gpu, slot.gpu_instance_id or 0)


def _by_host(slots: Iterable[Slot]) -> dict[str, list[Slot]]:
    out: dict[str, list[Slot]] = defaultdict(list)
    for s in slots:
        out[s.host].append(s)
    return out


def _fill_host(request: Request, slots: list[Slot]) -> tuple[Slot, ...]:
    """`request.count` matching slots of one host, fullest GPU first (MIG, time-slice) or by index."""
    if request.share_mode == ShareMode.WHOLE:
        return tuple(sorted(slots, key=_order)[: request.count])
    free_per_gpu: dict[int, int] = defaultdict(int)
    for s in slots:
        free_per_gpu[s.gpu] += 1
    matching = [s for s in slots if request.matches(s)]
    matching.sort(key=lambda s: (free_per_gpu[s.gpu], _order(s)))
    return tuple(matching[: request.count])


def place(request: Request, free: Iterable[Slot], node_size: int) -> tuple[Slot, ...] | None:
    """The slots for `request` among the `free` ones, or None when it does not fit now."""
    if request.count < 1:
        return None
    kind = [s for s in free if request.kind_matches(s)]
    hosts = _by_host(kind)
    if request.share_mode == ShareMode.WHOLE and request.count > node_size:
        if node_size < 1 or request.count % node_size:
            return None
        full = sorted(h for h, slots in hosts.items() if len(slots) >= node_size)
        need = request.count // node_size
        if len(full) < need:
            return None
        return tuple(s for h in full[:need] for s in sorted(hosts[h], key=_order)[:node_size])
    if request.share_mode != ShareMode.WHOLE and request.count == 1:
        per_gpu: dict[tuple[str, int], int] = defaultdict(int)
        for s in kind:
            per_gpu[(s.host, s.gpu)] += 1
        options = [(per_gpu[(s.host, s.gpu)], _order(s), s) for s in kind if request.matches(s)]
        return (min(options, key=lambda o: o[:2])[2],) if options else None
    fitting = []
    for host, slots in hosts.items():
        if sum(1 for s in slots if request.matches(s)) >= request.count:
            fitting.append((len(slots), host))
    if not fitting:
        return None
    _, host = min(fitting)
    return _fill_host(request, hosts[host])


def plan_preemption(
    request: Request,
    free: Iterable[Slot],
    victims: Sequence[tuple[str, Sequence[Slot]]],
    node_size: int,
) -> tuple[tuple[Slot, ...], tuple[str, ...]] | None:
    """The placement and the jobs to preempt for it, or None when preempting cannot make room.

    `victims` are the running jobs that may be preempted, as (job id, their slots), in the order
    they should be preempted (first = most preemptible). A node is scored by the worst-ranked victim
    it needs, then the number of victims, then its name, and the best node wins: the placement that
    needs only the most preemptible work, and the least of it. Requests of several whole nodes take
    the nodes whose every GPU is free or held by a victim, scored the same way.
    """
    kind_free = [s for s in free if request.kind_matches(s)]
    free_hosts = _by_host(kind_free)
    # per host: (rank, job id, its slots of this kind on the host), in rank order
    on_host: dict[str, list[tuple[int, str, list[Slot]]]] = defaultdict(list)
    for rank, (job_id, slots) in enumerate(victims):
        for host, mine in _by_host(s for s in slots if request.kind_matches(s)).items():
            on_host[host].append((rank, job_id, mine))

    if request.share_mode == ShareMode.WHOLE and request.count > node_size:
        if node_size < 1 or request.count % node_size:
            return None
        scored = []
        for host, held in on_host.items():
            slots = free_hosts.get(host, []) + [s for _, _, mine in held for s in mine]
            if len(slots) >= node_size:
                scored.append(((max(r for r, _, _ in held), len(held), host), host, held, slots))
        scored.sort(key=lambda item: item[0])
        need = request.count // node_size
        idle = sorted(h for h, slots in free_hosts.items() if len(slots) >= node_size and h not in on_host)
        if len(idle) + len(scored) < need:
            return None
        chosen_idle = idle[:need]
        chosen = scored[: need - len(chosen_idle)]
        slots = [s for h in chosen_idle for s in sorted(free_hosts[h], key=_order)[:node_size]]
        names: list[str] = []
        for _, _, held, host_slots in chosen:
            slots.extend(sorted(host_slots, key=_order)[:node_size])
            names.extend(job_id for _, job_id, _ in held)
        return tuple(slots), tuple(dict.fromkeys(names))

    best = None
    for host, held in on_host.items():
        have = sum(1 for s in free_hosts.get(host, []) if request.matches(s))
        taken = []
        for rank, job_id, mine in held:
            if have >= request.count:
                break
            gained = sum(1 for s in mine if request.matches(s))
            if gained:
                taken.append((rank, job_id, mine))
                have += gained
        if have >= request.count and taken:
            score = (max(r for r, _, _ in taken), len(taken), host)
            if best is None or score < best[0]:
                best = (score, host, taken)
    if best is None:
        return None
    _, host, taken = best
    pool = free_hosts.get(host, []) + [s for _, _, mine in taken for s in mine]
    slots = _fill_host(request, pool)
    used = {s.slot_id for s in slots}
    names = tuple(job_id for _, job_id, mine in taken if any(s.slot_id in used for s in mine))
    return slots, names
