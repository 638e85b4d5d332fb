"""What the simulated platform team does on the allocator, through the engine's API.

Permission grants and revokes (written as the live store writes them), queue quota changes, a
quota proposal and its approval, and an operator's overnight idle sweep that the engine refuses
(production inference is exempt from reclaim). Idle-reclaim itself is not here: the pipeline's
policies act on the simulated pool through `allocator.sim.simulator.Governance`
(`pipelines.governance.simulated`), so `gpupool demo` can compare a month with and without them.
"""
from __future__ import annotations

import datetime as dt
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from allocator.model import Action, ActionKind, ActionResult, JobState, Outcome, Template
from allocator.pool import pool_capacity
from allocator.sim.workload import Workload, tenant_users
from allocator.store import permission_record

if TYPE_CHECKING:
    from allocator.engine import Engine
    from allocator.model import PoolConfig
    from allocator.records import RecordSink

_DAY = dt.timedelta(days=1)


GOVERNANCE_BOT = "gpupool-governance"
QUEUE_ADMIN, OPERATOR = "ops-alice", "ops-bob"  # changes queues; approves proposals and kills hung jobs
OUTGOING_ADMIN = "ops-carol"  # hands over on day 1: her access is revoked
_ACCESS_STREAM = 0xACCE55  # the seed's second stream: who joins and leaves (the workload keeps its own)


@dataclass(frozen=True)
class AdminActivity:
    """What the simulated platform team does, and how often (docs/simulator.md, "Administrative
    activity"). Shares are per planted case, decided by a hash of (seed, step, job id); the first
    case of each step in a run is always taken, so a short run shows every kind of record."""

    joins_per_weekday: float = 0.35  # new tenant members (Poisson per weekday, from day 1)
    visitor: float = 0.4  # joiners whose access ends 5-12 days later
    inference_every_days: int = 7  # the overnight idle sweep that also targets an inference service


ADMIN_ACTIVITY = AdminActivity()


def access_plan(
    tenants: Sequence[str], start: dt.datetime, days: int, seed: int, activity: AdminActivity = ADMIN_ACTIVITY
) -> list[tuple[dt.datetime, str, dict | None]]:
    """Who gets or loses access to the allocator, in time order: `(at, name, principal)`, principal
    None for a revoke. At `start` the admins, the governance bot and every tenant's members; on day 1
    at 09:00 the outgoing admin leaves; on weekdays new members join at 09:00-17:00 (Poisson,
    `joins_per_weekday`), a share of them visitors whose access ends 5-12 days later. Principals are
    dicts as the live store keeps them: name, role, tenant."""
    first = [
        *(
            {"name": a, "role": "admin", "tenant": None}
            for a in sorted((QUEUE_ADMIN, OPERATOR, OUTGOING_ADMIN))
        ),
        {"name": GOVERNANCE_BOT, "role": "governance_bot", "tenant": None},
        *({"name": u, "role": "tenant_member", "tenant": t} for t in tenants for u in tenant_users(t)),
    ]
    changes: list[tuple[dt.datetime, str, dict | None]] = [(start, p["name"], p) for p in first]
    changes.append((start + _DAY + dt.timedelta(hours=9), OUTGOING_ADMIN, None))
    rng = np.random.default_rng([seed, _ACCESS_STREAM])
    joined: Counter[str] = Counter()
    for k in range(1, days):
        n = int(rng.poisson(activity.joins_per_weekday))
        which, minute, visitor, stay = rng.random((4, n))  # drawn every day: a day's draws never shift
        day = start + k * _DAY
        if day.weekday() >= 5:
            continue
        for i in range(n):
            tenant = tenants[int(which[i] * len(tenants))]
            joined[tenant] += 1
            name = f"{tenant}-u{len(tenant_users(tenant)) + joined[tenant]:02d}"
            at = day + dt.timedelta(hours=9, minutes=int(minute[i] * 480))
            changes.append((at, name, {"name": name, "role": "tenant_member", "tenant": tenant}))
            if visitor[i] < activity.visitor:
                changes.append((at + dt.timedelta(days=5 + int(stay[i] * 8)), name, None))
    end = start + days * _DAY
    return sorted((c for c in changes if c[0] < end), key=lambda c: (c[0], c[2] is not None, c[1]))


class Platform(Protocol):
    """What the platform team needs of the simulation it acts in (allocator.sim.simulator's run):
    the engine, the pool and workload, the clock, and where audit records go."""

    engine: Engine
    pool: PoolConfig
    workload: Workload
    start: dt.datetime
    end: dt.datetime
    days: int
    tee: RecordSink
    running: Mapping[str, object]

    def at(self, when: dt.datetime, step: Callable[..., None], *args: object) -> None: ...

    def drain(self, now: dt.datetime) -> None: ...


class Admin:
    """The platform team and its bot, acting on the engine's real API: permission changes (written
    like the live store writes them), queue quota changes, a quota proposal and its approval."""

    def __init__(self, sim: Platform, activity: AdminActivity, seed: int):
        self.sim, self.engine, self.rates, self.seed = sim, sim.engine, activity, seed
        self.known: dict[str, dict] = {}  # principals holding access
        self.commands = itertools.count(1)  # permission changes are numbered like store commands
        self.capacity = pool_capacity(sim.pool)

    # --- the plan, pushed onto the simulation's heap at the start

    def plan(self) -> None:
        sim, start, end = self.sim, self.sim.start, self.sim.end
        by_time: dict[dt.datetime, list[tuple[str, dict | None]]] = defaultdict(list)
        for at, name, principal in access_plan(sim.pool.tenants, start, sim.days, self.seed, self.rates):
            by_time[at].append((name, principal))
        for at, changes in by_time.items():
            sim.at(at, self.sync_access, changes)
        hours = dt.timedelta(hours=1)
        timeline = [
            (start + 10 * hours, self.propose_unused_quota),
            (start + _DAY + 14 * hours, lambda now: self.raise_waiting_queue(now, sim.workload.scarce_model)),
            (start + _DAY + 16 * hours, self.propose_borrower_quota),
            (start + 8 * _DAY + 14 * hours, lambda now: self.raise_waiting_queue(now, None)),
        ]
        timeline += [
            (start + k * _DAY + 3 * hours, self.sweep_inference)
            for k in range(0, sim.days, self.rates.inference_every_days)
        ]
        for at, step in timeline:
            if at < end:
                sim.at(at, step)

    def act(self, now: dt.datetime, action: Action, role: str = "governance_bot") -> ActionResult:
        result = self.engine.apply_action(action, now, actor_role=role)
        self.sim.drain(now)
        return result

    # --- access

    def sync_access(self, now: dt.datetime, changes: list[tuple[str, dict | None]]) -> None:
        """Like `Store.sync_principals`: revokes of who left or changed, then grants, by name."""
        wanted = {name: principal for name, principal in changes}
        revokes = [self.known[n] for n in sorted(wanted) if n in self.known and wanted[n] != self.known[n]]
        grants = [p for n in sorted(wanted) if (p := wanted[n]) is not None and self.known.get(n) != p]
        seq = next(self.commands)
        for i, principal in enumerate(revokes):
            self.sim.tee.audit(permission_record("permission.revoke", principal, now, seq, i, "allocator"))
            del self.known[principal["name"]]
        for i, principal in enumerate(grants, start=len(revokes)):
            self.sim.tee.audit(permission_record("permission.grant", principal, now, seq, i, "allocator"))
            self.known[principal["name"]] = principal

    # --- quotas

    def headroom(self, model: str) -> float:
        return self.capacity.get(model, 0.0) - sum(q.get(model, 0.0) for q in self.engine.quotas().values())

    def open_proposals(self) -> set[str]:
        return {p["queue"] for p in self.engine.proposals().values() if p["state"] == "proposed"}

    def propose(
        self, now: dt.datetime, queue: str, model: str, quota: float, reason: str, policy: str, approve: bool
    ) -> None:
        key = f"quota-{queue}-{model}-{now:%Y%m%d}"
        fields = {"reason": reason, "policy": policy, "policy_version": "1", "quota": {model: quota}}
        result = self.act(now, Action(ActionKind.QUOTA_CHANGE, key, queue, GOVERNANCE_BOT, **fields))
        if approve and result.outcome == Outcome.PROPOSED and result.proposal_id:
            self.sim.at(now + _DAY, self.approve, result.proposal_id)

    def approve(self, now: dt.datetime, proposal_id: str) -> None:
        self.engine.approve(proposal_id, now, OPERATOR)
        self.sim.drain(now)

    def propose_unused_quota(self, now: dt.datetime) -> None:
        """The bot proposes lowering the quota that is most unused right now by a quarter of the unused part
        (not on the scarce model, whose queues fill as soon as work arrives; not on serving queues);
        an admin approves it a day later."""
        best: tuple[float, str, str, float] | None = None
        for q in self.sim.pool.queues:
            queue = self.engine.queues[q.name]
            if queue.low_priority or Template.INFERENCE in queue.templates:
                continue
            usage = self.engine.usage(q.name)
            for model, quota in sorted(queue.quota.items()):
                if model == self.sim.workload.scarce_model:
                    continue
                unused = quota - usage.get(model, 0.0)
                if unused >= 1 and (best is None or unused > best[0]):
                    best = (unused, q.name, model, quota)
        if best is None:
            return
        unused, queue, model, quota = best
        new = quota - max(1, math.floor(unused / 4))
        reason = f"{unused:g} of {quota:g} {model} GPUs of quota unused; lower to {new:g}"
        self.propose(now, queue, model, new, reason, "unused-quota", approve=True)

    def propose_borrower_quota(self, now: dt.datetime) -> None:
        """The bot proposes more quota for the tenant that runs on borrowed GPUs (what it borrows, at most
        half its quota again, within the unassigned capacity); nobody approves it."""
        tenant = self.sim.workload.borrowing_tenant
        best: tuple[float, str, str] | None = None
        for q in self.sim.pool.queues:
            if q.tenant != tenant or q.low_priority:
                continue
            for model, gpus in sorted(self.engine.borrowed(q.name).items()):
                if best is None or gpus > best[0]:
                    best = (gpus, q.name, model)
        if best is None:
            return
        borrowed, queue, model = best
        quota = self.engine.quota(queue).get(model, 0.0)
        more = min(math.ceil(borrowed), max(1, math.ceil(quota / 2)), math.floor(self.headroom(model) + 1e-9))
        if more < 1:
            return
        reason = f"runs {borrowed:g} {model} GPUs on borrowed capacity; raise quota to {quota + more:g}"
        self.propose(now, queue, model, quota + more, reason, "borrowed-quota", approve=False)

    def raise_waiting_queue(self, now: dt.datetime, prefer: str | None) -> None:
        """An admin raises the quota of the queue whose oldest pending job has waited longest (on the
        preferred model if it has any waiting), by an eighth of it, within the unassigned capacity."""
        oldest: dict[tuple[str, str], dt.datetime] = {}
        for job in self.engine.pending():
            oldest.setdefault((job.spec.queue, job.spec.gpu_model), job.submitted_at)
        busy = self.open_proposals()
        candidates = sorted(
            (model != prefer, submitted, queue, model)
            for (queue, model), submitted in oldest.items()
            if queue not in busy
            and not self.engine.queues[queue].low_priority
            and self.engine.queues[queue].quota.get(model, 0.0) > 0
        )
        for _, submitted, queue, model in candidates:
            quota = self.engine.quota(queue)
            more = min(max(1, round(quota[model] / 8)), math.floor(self.headroom(model) + 1e-9))
            if more < 1:
                continue
            waited = (now - submitted).total_seconds() / 3600
            reason = f"{model} work waited {waited:.1f} h in {queue}; quota {quota[model]:g} -> {quota[model] + more:g}"
            try:
                self.engine.update_queue(
                    queue, {"quota": {**quota, model: quota[model] + more}}, now, QUEUE_ADMIN, reason=reason
                )
            except ValueError:  # audited as refused by the engine
                continue
            self.sim.drain(now)
            return

    # --- enforcement by hand

    def sweep_inference(self, now: dt.datetime) -> None:
        """An operator's overnight sweep by hand picks a serving job too (low traffic at night); the
        engine refuses: production inference is exempt from reclaim."""
        for job_id in sorted(self.sim.running):
            job = self.engine.jobs[job_id]
            if job.spec.template == Template.INFERENCE and job.state == JobState.RUNNING:
                key = f"sweep-{job.job_id}-a{job.attempt}"
                self.act(now, Action(ActionKind.RECLAIM, key, job.job_id, OPERATOR,
                                     reason="low activity overnight (sweep by hand)"), role="admin")
                return
