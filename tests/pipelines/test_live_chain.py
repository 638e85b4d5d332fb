"""The live chain's builds (`live_chain`, pipelines/assets/marts.py INTRADAY): an intraday ingest of today
requests today's models that read it, once; older days, and sources not loaded today, do not."""
from __future__ import annotations

import datetime as dt

import dagster as dg

from pipelines.assets.marts import dbt_models, live_chain_sensor
from pipelines.definitions import defs

NOW = dt.datetime(2026, 12, 3, 10, 7, tzinfo=dt.UTC)
TODAY, YESTERDAY = "2026-12-03", "2026-12-02"
SCRAPED = dg.AssetKey("raw_dcgm_parquet")
ACTIVITY = dg.AssetKey(["marts", "fct_gpu_activity"])
POOL_DAILY = dg.AssetKey(["metrics", "pool_daily"])
JOB_EVENTS = dg.AssetKey(["staging", "stg_scheduler__job_events"])  # reads the schedulers', not the telemetry


def ingested(instance: dg.DagsterInstance, key: dg.AssetKey, day: str) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(key, partition=day))


def requested(result) -> dict[dg.AssetKey, set[str]]:
    return {key: set(subset.expensively_compute_partition_keys())
            for key, subset in ((r.key, r.true_subset) for r in result.results) if subset.size}


def evaluate(instance, cursor=None):
    return dg.evaluate_automation_conditions(defs=defs, instance=instance, evaluation_time=NOW, cursor=cursor)


def test_an_intraday_ingest_rebuilds_todays_models_that_read_it_once():
    instance = dg.DagsterInstance.ephemeral()
    first = evaluate(instance)
    assert first.total_requested == 0  # nothing updated yet: nothing to build
    ingested(instance, SCRAPED, TODAY)
    second = evaluate(instance, first.cursor)
    wanted = requested(second)
    assert wanted[ACTIVITY] == {TODAY} and wanted[POOL_DAILY] == {TODAY}  # the telemetry's whole chain
    assert set(wanted) <= set(dbt_models.keys) and JOB_EVENTS in dbt_models.keys and JOB_EVENTS not in wanted
    assert evaluate(instance, second.cursor).total_requested == 0  # handled: not again


def test_a_late_ingest_of_an_older_day_waits_for_the_daily_build():
    instance = dg.DagsterInstance.ephemeral()
    first = evaluate(instance)
    ingested(instance, SCRAPED, YESTERDAY)
    assert evaluate(instance, first.cursor).total_requested == 0


def test_the_live_chain_starts_stopped_and_runs_as_the_build_job():
    assert live_chain_sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert defs.resolve_job_def("build_models").tags["gpupool/writer"] == "build"
    assert live_chain_sensor.run_tags["gpupool/writer"] == "build"
