"""The scrape domain: the dcgm-exporter scrape sensor, one scrape round per tick, and the day's
re-ingest now and then.

Dagster's sensor daemon evaluates sensors in a loop of a few seconds (`dagster/_daemon/sensor.py`
of the pinned dagster; bench/README.md, "Figures the code's choices rest on"), so a sensor can tick
every 15 s, which a cron schedule (one minute at best) cannot. Each tick:

1. scrapes every target once through the `telemetry` resource (live HTTP, or a folder of files);
2. writes the round's samples to `landing/dcgm_parquet/<day>/scrape-<HHMMSS>-<id>.parquet` and
   its gaps to `ops.scrape_gaps`;
3. every `ingest_every_rounds` rounds that brought samples, requests a run of the day's
   `raw_dcgm_parquet` partition (re-ingesting the day replaces it with every round so far), and
   on the first round of a new day one last run of the day before, so that its final rounds are
   in. The nightly `ingest_daily` schedule re-ingests yesterday anyway.

The cursor (JSON) keeps the day, the round counts and the totals; a tick without a run request
reports the round's counts as its skip message, so the tick history shows every round.

The `node_exporter_scrape` sensor does the same for the node_exporter targets of the
`node_exporter` section: rounds in `landing/node_exporter_parquet/<day>/`, re-ingested by
`raw_node_exporter_parquet` (it scrapes over HTTP itself: there is no offline resource for it).

The `prometheus_pull` sensor is for a pool whose dcgm-exporters Prometheus already scrapes: every
`prometheus.pull_interval_s` (default 5 min) it lands what Prometheus holds since its last pull
(`pull_window`: up to `settle_s` ago) as `gpupool backfill prometheus` does, and requests the ingest
of each day it touched (`raw_prometheus`). Its cursor keeps where the last pull ended.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace

import dagster as dg

from pipelines.assets.ingest import asset_name
from pipelines.assets.ingest_cursor import JsonCursor, due_ingests, ingest_result
from pipelines.clock import utc_naive
from pipelines.config import section
from pipelines.connectors.prometheus import LANDING_SOURCE as PROMETHEUS_SOURCE
from pipelines.connectors.prometheus import PrometheusConfig, backfill_prometheus, pull_window
from pipelines.connectors.scrape import (
    LANDING_SOURCE,
    NODE_EXPORTER,
    DcgmConfig,
    NodeExporterConfig,
    ScrapeRound,
    shared_scraper,
    targets_of,
    write_round,
)
from pipelines.ingest import record_scrape_gaps
from pipelines.resources.telemetry import TelemetrySource
from pipelines.resources.warehouse import WarehouseResource

RAW_DCGM_PARQUET = dg.AssetKey(asset_name(LANDING_SOURCE))
RAW_NODE_EXPORTER_PARQUET = dg.AssetKey(asset_name(NODE_EXPORTER.landing_source))
RAW_PROMETHEUS = dg.AssetKey(asset_name(PROMETHEUS_SOURCE))


@dataclass(frozen=True)
class ScrapeCursor(JsonCursor):
    day: str | None = None  # UTC day of the last round
    rounds: int = 0  # rounds run, all days
    since_ingest: int = 0  # rounds with samples on `day` since its last requested ingest
    samples: int = 0  # samples written, all rounds
    gaps: int = 0  # gap rows recorded, all rounds
    last: str = ""  # the last round's summary


def advance(
    cursor: ScrapeCursor, scrape: ScrapeRound, every: int
) -> tuple[ScrapeCursor, list[tuple[str, str]]]:
    """The cursor after `scrape`, and the (partition day, run key) ingests to request: a round without
    samples counts no progress."""
    day, rounds = scrape.round_at.date().isoformat(), cursor.rounds + 1
    since, ingests = due_ingests(scrape.landing_source, cursor.day, cursor.since_ingest, day, rounds,
                                 scrape.samples.height > 0, every)
    return (
        replace(
            cursor,
            day=day,
            rounds=rounds,
            since_ingest=since,
            samples=cursor.samples + scrape.samples.height,
            gaps=cursor.gaps + scrape.gaps.height,
            last=scrape.summary(),
        ),
        ingests,
    )


def build_scrape_sensor(
    interval_s: float | None = None,
    ingest_every_rounds: int | None = None,
    name: str = "dcgm_scrape",
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """The scrape sensor; interval and re-ingest cadence default to the `dcgm` section of the
    connector config (read once, here), else 15 s and 40 rounds."""
    settings = section("dcgm", DcgmConfig) or DcgmConfig()
    interval = interval_s if interval_s is not None else settings.interval_s
    every = ingest_every_rounds if ingest_every_rounds is not None else settings.ingest_every_rounds

    @dg.sensor(
        name=name,
        minimum_interval_seconds=max(1, math.ceil(interval)),
        asset_selection=[RAW_DCGM_PARQUET],
        default_status=default_status,
        description=(
            f"Scrapes every dcgm-exporter target each {interval:g} s into landing/{LANDING_SOURCE}/<day>/ "
            f"(gaps in ops.scrape_gaps) and every {every} rounds adds the rounds landed since to the day's "
            f"{RAW_DCGM_PARQUET.to_user_string()} partition (the day's last run reads it whole)."
        ),
    )
    def _scrape(
        context: dg.SensorEvaluationContext, telemetry: TelemetrySource, warehouse: WarehouseResource
    ) -> dg.SensorResult:
        scrape = telemetry.scrape_round(utc_naive())
        if scrape.targets == 0:
            return dg.SensorResult(
                skip_reason=f"no targets to scrape ({telemetry.describe()})", cursor=context.cursor
            )
        return _land(context, scrape, warehouse, every, name)

    return _scrape


def _land(
    context: dg.SensorEvaluationContext, scrape: ScrapeRound, warehouse: WarehouseResource, every: int, name: str
) -> dg.SensorResult:
    """Write the round and its gaps, advance the cursor, and request the ingests that are due."""
    wh = warehouse.get()
    path = write_round(wh.landing, scrape)
    record_scrape_gaps(wh, scrape.gaps)
    cursor, ingests = advance(ScrapeCursor.parse(context.cursor), scrape, every)
    context.log.info(f"{scrape.summary()}; written to {path}" if path else scrape.summary())
    return ingest_result(ingests, name, cursor, scrape.summary(), new_files=True)


def build_node_exporter_sensor(
    name: str = "node_exporter_scrape",
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """The node_exporter scrape sensor; interval and re-ingest cadence from the `node_exporter`
    section (read once, here), else 15 s and 40 rounds. Its targets are re-read each tick."""
    settings = section("node_exporter", NodeExporterConfig) or NodeExporterConfig()

    @dg.sensor(
        name=name,
        minimum_interval_seconds=max(1, math.ceil(settings.interval_s)),
        asset_selection=[RAW_NODE_EXPORTER_PARQUET],
        default_status=default_status,
        description=(
            f"Scrapes every node_exporter target each {settings.interval_s:g} s into "
            f"landing/{NODE_EXPORTER.landing_source}/<day>/ (gaps in ops.scrape_gaps) and every "
            f"{settings.ingest_every_rounds} rounds adds the rounds landed since to the day's "
            f"{RAW_NODE_EXPORTER_PARQUET.to_user_string()} partition (the day's last run reads it whole)."
        ),
    )
    def _scrape(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult:
        config = section("node_exporter", NodeExporterConfig)
        targets = targets_of(config) if config is not None else []
        if not targets:
            return dg.SensorResult(
                skip_reason="no node_exporter targets (the node_exporter section of gpupool.yml)",
                cursor=context.cursor,
            )
        scrape = shared_scraper(config, NODE_EXPORTER).scrape_round(utc_naive(), targets)
        return _land(context, scrape, warehouse, settings.ingest_every_rounds, name)

    return _scrape


@dataclass(frozen=True)
class PullCursor(JsonCursor):
    until: str | None = None  # ISO time (UTC) where the last pull's window ended
    pulls: int = 0  # pulls that landed something, all days
    files: int = 0  # files written, all pulls
    last: str = ""  # the last pull's summary


def build_prometheus_pull_sensor(
    name: str = "prometheus_pull",
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """The Prometheus pull sensor; its interval from the `prometheus` section (read once, here), else
    5 minutes. The section is re-read each tick: without it the tick skips and says so."""
    settings = section("prometheus", PrometheusConfig)
    interval = settings.pull_interval_s if settings is not None else PrometheusConfig.model_fields["pull_interval_s"].default

    @dg.sensor(
        name=name,
        minimum_interval_seconds=interval,
        asset_selection=[RAW_PROMETHEUS],
        default_status=default_status,
        description=(
            f"Lands what Prometheus holds of the DCGM series since the last pull, every {interval} s, into "
            f"landing/{PROMETHEUS_SOURCE}/<day>/ and ingests each day it touched ({RAW_PROMETHEUS.to_user_string()})."
        ),
    )
    def _pull(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult:
        config = section("prometheus", PrometheusConfig)
        if config is None:
            return dg.SensorResult(skip_reason="no Prometheus to pull (the prometheus section of gpupool.yml)",
                                   cursor=context.cursor)
        cursor = PullCursor.parse(context.cursor)
        last_end = dt.datetime.fromisoformat(cursor.until) if cursor.until else None
        window = pull_window(last_end, utc_naive(), config)
        if window is None:
            return dg.SensorResult(skip_reason=f"nothing new since {cursor.until}", cursor=context.cursor)
        report = backfill_prometheus(warehouse.get().landing, *window, config, now=window[1], log=context.log.info)
        cursor = replace(cursor, until=window[1].isoformat(), pulls=cursor.pulls + bool(report.files_written),
                         files=cursor.files + report.files_written, last=report.summary())
        stamp = f"{window[1]:%Y%m%dT%H%M%S}"
        ingests = [(day.isoformat(), f"{PROMETHEUS_SOURCE}:{day}:{stamp}") for day in report.days]
        return ingest_result(ingests, name, cursor, report.summary(), new_files=True)

    return _pull


dcgm_scrape_sensor = build_scrape_sensor()
node_exporter_scrape_sensor = build_node_exporter_sensor()
prometheus_pull_sensor = build_prometheus_pull_sensor()


defs = dg.Definitions(sensors=[dcgm_scrape_sensor, node_exporter_scrape_sensor, prometheus_pull_sensor])
