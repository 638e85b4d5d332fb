"""Coverage: the days of a period that hold data, against the days in it, per kind of source.

Read from metrics.ingest_daily (one row per ingest source and day, the day's latest run): a source has
data on a day when that day's run loaded a record. Sources are grouped into the kinds a reader knows
(GPU telemetry, scheduler events, host telemetry, ...); a kind has data on a day when any of its sources
has. Nothing here computes a metric: it counts the days the view already lists.

A period's `days_with_data` are the days on which every REQUIRED kind that the release holds at all has
data: the pool's figures (allocation, utilisation, waits, failures) rest on both GPU telemetry and the
scheduler's events, so a day with only one of them is not a day of the month's figures. A required kind
that the release never held (a site with no DCGM exporter) is reported as not collected rather than
making every period partial; the other kinds are shown beside them and never make a period partial (a
quiet day has no audit record or governance decision).

Every pack (pipelines/pack) and every capacity recommendation (pipelines/capacity) carries its period's
coverage; a period with fewer days of data than days is partial, and is said to be on page 1, in each
headline and in the advice's evidence.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb

from pipelines.labels import COVERAGE_KINDS, coverage_phrase

# kind -> (its labels, pipelines/labels.py; the ingest sources of pipelines/sources/registry.py that feed
# it); a test checks that every registered source is in exactly one kind
KINDS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "gpu_telemetry": (COVERAGE_KINDS["gpu_telemetry"], ("dcgm_text", "dcgm_parquet", "prometheus")),
    "scheduler": (COVERAGE_KINDS["scheduler"],
                  ("allocator_events", "slurm_sacct", "slurm_sacct_json", "slurm_squeue", "kueue")),
    "host_telemetry": (COVERAGE_KINDS["host_telemetry"], ("node_exporter", "node_exporter_parquet")),
    "inventory": (COVERAGE_KINDS["inventory"], ("allocator_pool",)),
    "audit": (COVERAGE_KINDS["audit"], ("allocator_audit", "k8s_audit", "slurm_sacctmgr")),
    "governance": (COVERAGE_KINDS["governance"], ("governance_actions",)),
    "artifacts": (COVERAGE_KINDS["artifacts"], ("allocator_artifacts", "mlflow")),
}
OTHER_KIND = (COVERAGE_KINDS["other"], ())
# the kinds every day of a period's figures needs (module doc)
REQUIRED = ("gpu_telemetry", "scheduler")


def kind_of(source: str) -> str:
    return next((k for k, (_, sources) in KINDS.items() if source in sources), "other")


@dataclass(frozen=True)
class KindCoverage:
    kind: str
    label: dict[str, str]  # {"en": ..., "zh": ...}
    days_with_data: int
    sources: tuple[str, ...]  # the ingest sources with data in the period
    required: bool  # one of REQUIRED
    collected: bool  # the release holds some day of it, in any period


@dataclass(frozen=True)
class Coverage:
    first: dt.date
    following: dt.date  # the day after the period
    days_with_data: int  # days every required kind the release holds has data (module doc)
    kinds: tuple[KindCoverage, ...]

    @property
    def days_in_period(self) -> int:
        return (self.following - self.first).days

    @property
    def partial(self) -> bool:
        return self.days_with_data < self.days_in_period

    def phrase(self, lang: str) -> str:
        return coverage_phrase(self.days_with_data, self.days_in_period, lang)

    def as_dict(self) -> dict:
        """For JSON (figures.json, a recommendation's evidence): the period, its days with data and each kind's."""
        return {"first_day": self.first.isoformat(), "last_day": (self.following - dt.timedelta(days=1)).isoformat(),
                "days_in_period": self.days_in_period, "days_with_data": self.days_with_data, "partial": self.partial,
                "required": list(REQUIRED), "view": "metrics.ingest_daily",
                "by_source": {k.kind: {"days_with_data": k.days_with_data, "sources": list(k.sources),
                                       "required": k.required, "collected": k.collected} for k in self.kinds}}


def read_coverage(con: duckdb.DuckDBPyConnection, first: dt.date, following: dt.date) -> Coverage:
    """The coverage of [first, following) in the release `con` reads (metrics.ingest_daily)."""
    rows = con.execute(
        "select ingest_source, list(distinct day order by day) from metrics.ingest_daily "
        "where day >= ? and day < ? and records_loaded > 0 group by ingest_source order by ingest_source",
        [first, following]).fetchall()
    held = {r[0] for r in con.execute(
        "select distinct ingest_source from metrics.ingest_daily where records_loaded > 0").fetchall()}
    days: dict[str, set[dt.date]] = {}
    sources: dict[str, list[str]] = {}
    for source, listed in rows:
        kind = kind_of(source)
        days.setdefault(kind, set()).update(listed)
        sources.setdefault(kind, []).append(source)
    collected = {kind_of(s) for s in held}
    kinds = [KindCoverage(k, label, len(days.get(k, ())), tuple(sources.get(k, ())), k in REQUIRED, k in collected)
             for k, (label, _) in KINDS.items()]
    if "other" in days:
        kinds.append(KindCoverage("other", OTHER_KIND[0], len(days["other"]), tuple(sources["other"]), False, True))
    needed = [days.get(k, set()) for k in REQUIRED if k in collected]
    both = set.intersection(*needed) if needed else set()
    return Coverage(first, following, len(both), tuple(kinds))
