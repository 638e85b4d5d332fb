"""Page 1 of a pack: the questions it answers, each with a one-sentence answer, the number behind it,
a status and the evidence section that backs it; and the decisions requested this month.

An answer's number is one of the pack's own figures or table cells (or a query on a metrics view
recorded with it), never a number computed here from raw tables."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

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


# On partial evidence (a period with fewer days of data than days: pipelines/coverage.py) no status is
# better than this: figures read from a few days may be those days' (a release week, a holiday, an
# exporter down), not the month's, so "on track" would claim more than the data holds.
PARTIAL_EVIDENCE_BEST_STATUS = "watch"


def capped(status: str, partial: bool) -> str:
    """`status`, no better than PARTIAL_EVIDENCE_BEST_STATUS when the evidence is partial."""
    if not partial:
        return status
    best = STATUSES.index(PARTIAL_EVIDENCE_BEST_STATUS)
    return STATUSES[max(STATUSES.index(status), best)]


def on_coverage(answers: list[Answer], coverage) -> list[Answer]:
    """The answers of a period whose coverage (pipelines.coverage.Coverage, None: not read) is partial, each
    saying so first ("3 of 30 days with data: ...") and capped at PARTIAL_EVIDENCE_BEST_STATUS."""
    if coverage is None or not coverage.partial:
        return answers
    said = {"en": f"Partial month, {coverage.phrase('en')}: ", "zh": f"数据不完整（{coverage.phrase('zh')}）："}
    return [replace(a, answer={lang: said[lang] + text for lang, text in a.answer.items()},
                    status=capped(a.status, True)) for a in answers]
