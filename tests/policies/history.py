"""An in-memory ActionHistory for planner tests (the durable one is pipelines/governance/outbox.py)."""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from pipelines.contracts import DecisionStatus
from pipelines.policies.model import PlannedAction
from pipelines.policies.planner import DRAIN_ACTIONS, RATE_LIMITED_ACTIONS, DeliveredStep


class MemoryHistory:
    """ActionHistory in memory, with the outbox's recording rules. It sends nothing; with `answered`
    (the default) its steps read as the tick's delivery leaves them, a queued step answered when
    decided; without, queued steps stay queued (an engine or a mail server that is away)."""

    def __init__(self, answered: bool = True) -> None:
        self._decided: dict[str, tuple[PlannedAction, dt.datetime]] = {}
        self.answered = answered

    def record(self, planned: Iterable[PlannedAction], now: dt.datetime) -> list[PlannedAction]:
        """Keep each decision once by idempotency key; a rate-limited one is replaced when decided anew."""
        recorded = []
        for action in planned:
            previous = self._decided.get(action.idempotency_key)
            if previous is None or (previous[0].status == DecisionStatus.RATE_LIMITED
                                    and action.status != DecisionStatus.RATE_LIMITED):
                self._decided[action.idempotency_key] = (action, now)
                recorded.append(action)
        return recorded

    def steps(self, finding_id: str) -> list[DeliveredStep]:
        found = [self._step(a, at) for a, at in self._decided.values() if a.finding_id == finding_id]
        return sorted(found, key=lambda s: s.step_index)

    def _step(self, action: PlannedAction, at: dt.datetime) -> DeliveredStep:
        if self.answered and action.status == DecisionStatus.QUEUED:
            return DeliveredStep(action.step_index, action.action.value, at, DecisionStatus.ANSWERED, "applied", at)
        return DeliveredStep(action.step_index, action.action.value, at, action.status)

    def steps_of(self, finding_ids: Iterable[str]) -> dict[str, list[DeliveredStep]]:
        return {fid: steps for fid in finding_ids if (steps := self.steps(fid))}

    def reclaims_since(self, since: dt.datetime) -> list[str]:
        return [
            a.tenant for a, at in self._decided.values()
            if at >= since and a.action in RATE_LIMITED_ACTIONS
            and a.status in (DecisionStatus.QUEUED, DecisionStatus.ANSWERED)
        ]

    def drains_since(self, since: dt.datetime) -> int:
        return sum(1 for a, at in self._decided.values() if at >= since and a.action in DRAIN_ACTIONS
                   and a.status in (DecisionStatus.QUEUED, DecisionStatus.ANSWERED))

    def open_findings(self, since: dt.datetime) -> list[PlannedAction]:
        latest: dict[str, tuple[PlannedAction, dt.datetime]] = {}
        dropped = set()
        for action, at in self._decided.values():
            if action.status == DecisionStatus.DROPPED:
                dropped.add(action.finding_id)
            if action.status == DecisionStatus.RATE_LIMITED or at < since:
                continue
            held = latest.get(action.finding_id)
            if held is None or action.step_index > held[0].step_index:
                latest[action.finding_id] = (action, at)
        return [a for fid, (a, _) in sorted(latest.items()) if fid not in dropped]
