"""governance.capacity_recommendations: the recommendations of each month, kept as rows with their
evidence (the table's DDL: pipelines/contracts.py). One writer per month: a run replaces that
month's rows (delete then insert, one transaction); metrics.capacity_recommendations reads it."""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import duckdb

from pipelines.contracts import RECOMMENDATIONS_DDL, RECOMMENDATIONS_TABLE, TABLES

# Confidence scores from which advice is "high" and "medium" (below: "low"); pipelines/capacity/recommend.py
# keeps advice on thin evidence under HIGH_CONFIDENCE_FROM.
HIGH_CONFIDENCE_FROM = 0.7
MEDIUM_CONFIDENCE_FROM = 0.4


@dataclass(frozen=True)
class Recommendation:
    """One piece of advice with the numbers behind it. `impact_gpu_hours`: the month's GPU-hours
    it addresses (waited, idle or movable), used to rank; `whatif` the replay's predicted effect
    when one was run."""

    kind: str  # add_nodes | remove_nodes | resplit_mig | move_quota | move_to_backfill | change_queue_limit
    target: str
    recommendation: str
    recommendation_zh: str
    quantity: float
    unit: str
    confidence_score: float
    impact_gpu_hours: float
    evidence: dict
    gpu_model: str | None = None
    tenant: str | None = None
    queue: str | None = None
    wait_cause: str | None = None
    whatif: dict | None = field(default=None)

    @property
    def confidence(self) -> str:
        return ("high" if self.confidence_score >= HIGH_CONFIDENCE_FROM
                else "medium" if self.confidence_score >= MEDIUM_CONFIDENCE_FROM else "low")

    def recommendation_id(self, month: dt.date) -> str:
        return f"{month:%Y-%m}:{self.kind}:{self.target}"


def write_month(con: duckdb.DuckDBPyConnection, month: dt.date, recommendations: Sequence[Recommendation],
                rules_version: str, now: dt.datetime, *, release_id: int | None = None) -> int:
    """Replace the month's rows with these (ranked in the given order). `release_id`: the warehouse
    release they were computed from (None: not from a published release, e.g. a test's own rows)."""
    rows = [
        (r.recommendation_id(month), month, now, rank, r.kind, r.gpu_model, r.tenant, r.queue, r.target,
         r.recommendation, r.recommendation_zh, r.quantity, r.unit, r.wait_cause, r.confidence,
         round(r.confidence_score, 3), r.impact_gpu_hours, json.dumps(r.evidence, sort_keys=True, default=str),
         None if r.whatif is None else json.dumps(r.whatif, sort_keys=True, default=str), rules_version,
         release_id)
        for rank, r in enumerate(recommendations, start=1)
    ]
    for statement in (RECOMMENDATIONS_DDL, *TABLES[RECOMMENDATIONS_TABLE].migrations):
        con.execute(statement)
    con.execute("begin transaction")
    try:
        con.execute(f"delete from {RECOMMENDATIONS_TABLE} where period_month = ?", [month])
        if rows:
            con.executemany(f"insert into {RECOMMENDATIONS_TABLE} values ({', '.join('?' * 21)})", rows)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return len(rows)


def as_dict(r: Recommendation) -> dict:
    return {**asdict(r), "confidence": r.confidence}
