"""Page 1 of a pack: the questions it answers, each with a one-sentence answer, the number behind it,
a status and the evidence section that backs it; and the decisions requested this month.

An answer's number is one of the pack's own figures or table cells (or a query on a metrics view
recorded with it), never a number computed here from raw tables."""
from __future__ import annotations

from dataclasses import dataclass, field

STATUSES = ("on_track", "watch", "act")


@dataclass(frozen=True)
class Answer:
    key: str  # q1..q5 for the pool pack; a tenant pack's own keys
    question: dict[str, str]  # {"en": ..., "zh": ...}
    answer: dict[str, str]  # one sentence, with the number in it
    status: str  # one of STATUSES
    evidence: str  # the key of the pack table (or part) that backs it: the link target
    value: float | None = None  # the number behind the answer
    sources: tuple[str, ...] = ()  # the figure keys / metrics views it was read from

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"answer {self.key}: status {self.status!r} is not one of {STATUSES}")


@dataclass(frozen=True)
class Decision:
    """A decision requested of the readers this month (approve +N nodes, move quota, change a rule)."""

    text: dict[str, str]  # {"en": ..., "zh": ...}
    evidence: str  # the pack table key that backs it
    sources: tuple[str, ...] = field(default_factory=tuple)
