"""The pipeline's own metrics: what `gpupool metrics serve` exposes to Prometheus, read at each scrape.

Read-only, from what the pipeline already keeps:
- the published release (`warehouse.duckdb`): ops.ingest_log per source (the newest ingest, records
  loaded and quarantined, how long since the newest one that loaded records) and lake.release (the
  release it is and when it was made). A release is what readers see, so this is their freshness;
- the outbox (`Outbox.read_status`): actions queued and the oldest of them, drains in force, and the
  reclaim tick's record (`Outbox.record_tick`).

A part that cannot be read (no warehouse yet, no outbox because reclaim never ran, a file that will not
open) makes no series of its own and says so in `gpupool_exporter_part_up{part}`: a scrape always
answers. Times are naive UTC (pipelines.clock); timestamps are exported as Unix seconds.
"""
from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pipelines.clock import utc_naive
from pipelines.governance.outbox import OutboxStatus, read_status
from pipelines.lake.reader import RELEASE_TABLE
from pipelines.warehouse import Warehouse

log = logging.getLogger(__name__)
T = TypeVar("T")

INGEST_SQL = """
    select ingest_source, max(finished_at), max(finished_at) filter (where records_loaded > 0),
           sum(records_loaded), sum(records_quarantined)
    from ops.ingest_log group by ingest_source order by ingest_source"""


@dataclass(frozen=True)
class SourceIngest:
    """One ingest source's record in ops.ingest_log (every run kept, so the sums only grow)."""

    source: str
    last_run_at: dt.datetime
    last_loaded_at: dt.datetime | None  # the newest run that loaded at least one record
    records_loaded: int
    records_quarantined: int


@dataclass(frozen=True)
class Release:
    release_id: int
    created_at: dt.datetime


def unix(moment: dt.datetime) -> float:
    return moment.replace(tzinfo=dt.UTC).timestamp()


def read_warehouse(warehouse: Warehouse) -> tuple[list[SourceIngest], Release | None]:
    """The ingest record per source and the release, from the published release (FileNotFoundError
    before the first publish)."""
    with warehouse.connect(read_only=True) as con:
        ingests = [SourceIngest(*row) for row in con.execute(INGEST_SQL).fetchall()]
        row = con.execute(f"select release_id, created_at from {RELEASE_TABLE}").fetchone()
    return ingests, Release(*row) if row else None


def ingest_families(ingests: list[SourceIngest], now: dt.datetime) -> Iterator[Metric]:
    labels = ["source"]
    last_run = GaugeMetricFamily("gpupool_ingest_last_run_timestamp_seconds",
                                 "End of the newest ingest run of the source.", labels=labels)
    lag = GaugeMetricFamily("gpupool_ingest_lag_seconds",
                            "Seconds since the newest ingest run of the source that loaded records.", labels=labels)
    loaded = CounterMetricFamily("gpupool_ingest_records_loaded", "Records loaded by the source's ingests.",
                                 labels=labels)
    quarantined = CounterMetricFamily("gpupool_ingest_records_quarantined",
                                      "Records the source's ingests quarantined (ops.quarantine).", labels=labels)
    for ingest in ingests:
        last_run.add_metric([ingest.source], unix(ingest.last_run_at))
        if ingest.last_loaded_at is not None:
            lag.add_metric([ingest.source], max((now - ingest.last_loaded_at).total_seconds(), 0.0))
        loaded.add_metric([ingest.source], ingest.records_loaded)
        quarantined.add_metric([ingest.source], ingest.records_quarantined)
    yield from (last_run, lag, loaded, quarantined)


def release_families(release: Release | None, now: dt.datetime) -> Iterator[Metric]:
    if release is None:
        return
    yield GaugeMetricFamily("gpupool_release_id", "The release readers open now.", release.release_id)
    yield GaugeMetricFamily("gpupool_release_age_seconds", "Seconds since the release readers open was published.",
                            max((now - release.created_at).total_seconds(), 0.0))


def outbox_families(status: OutboxStatus, now: dt.datetime) -> Iterator[Metric]:
    yield GaugeMetricFamily("gpupool_outbox_queued_actions", "Enforcement actions recorded and not yet answered.",
                            status.queued)
    oldest = 0.0 if status.oldest_queued_at is None else max((now - status.oldest_queued_at).total_seconds(), 0.0)
    yield GaugeMetricFamily("gpupool_outbox_oldest_queued_age_seconds",
                            "Age of the oldest action still queued (0 when none is).", oldest)
    drains = GaugeMetricFamily("gpupool_drains_in_force", "Nodes or GPUs drained and not undrained.",
                               labels=["target_kind"])
    for kind in ("gpu", "node"):
        drains.add_metric([kind], status.drains_in_force.get(kind, 0))
    yield drains
    tick = status.tick
    if tick is None:
        return
    yield GaugeMetricFamily("gpupool_reclaim_tick_last_run_timestamp_seconds", "When the newest reclaim tick ran.",
                            unix(tick.last_at))
    if tick.last_ok_at is not None:
        yield GaugeMetricFamily("gpupool_reclaim_tick_last_success_timestamp_seconds",
                                "When the newest reclaim tick without a problem ran.", unix(tick.last_ok_at))
    yield GaugeMetricFamily("gpupool_reclaim_tick_duration_seconds", "How long the newest reclaim tick took.",
                            tick.last_duration_s)
    yield CounterMetricFamily("gpupool_reclaim_ticks", "Reclaim ticks run.", tick.runs)
    yield CounterMetricFamily("gpupool_reclaim_tick_failures",
                              "Reclaim ticks with a problem (an engine unreadable, an action undeliverable).",
                              tick.failures)
    yield GaugeMetricFamily("gpupool_reclaim_tick_consecutive_failures",
                            "Reclaim ticks in a row with a problem, up to the newest.", tick.consecutive_failures)


class PipelineCollector(Collector):
    """Every family above, read at each scrape from the home and the outbox."""

    def __init__(self, warehouse: Warehouse, outbox: Path, clock: Callable[[], dt.datetime] = utc_naive):
        self.warehouse = warehouse
        self.outbox = outbox
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        up = GaugeMetricFamily("gpupool_exporter_part_up", "1 when the part could be read at this scrape, else 0.",
                               labels=["part"])
        read = part(up, "warehouse", lambda: read_warehouse(self.warehouse))
        if read is not None:
            yield from ingest_families(read[0], now)
            yield from release_families(read[1], now)
        status = part(up, "outbox", lambda: read_status(self.outbox))
        if status is not None:
            yield from outbox_families(status, now)
        yield up


def part(up: GaugeMetricFamily, name: str, read: Callable[[], T]) -> T | None:
    """`read()`, and whether it worked in `up`; None when it did not. A scrape must answer whatever the
    home holds, so nothing is raised: a missing file is normal (a new home, reclaim never ran), anything
    else is logged."""
    try:
        value = read()
    except FileNotFoundError as exc:
        log.debug("metrics: no %s yet: %s", name, exc)
    except Exception as exc:  # noqa: BLE001 - see above
        log.warning("metrics: cannot read the %s: %s", name, exc)
    else:
        up.add_metric([name], 1)
        return value
    up.add_metric([name], 0)
    return None


def pipeline_registry(warehouse: Warehouse, outbox: Path, clock: Callable[[], dt.datetime] = utc_naive
                      ) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(PipelineCollector(warehouse, outbox, clock))
    return registry
