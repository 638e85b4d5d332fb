"""The marts domain: the dbt project in models/ as Dagster assets (every seed, staging view, mart
and metrics view), its tests as asset checks, the catalog and ingest-accounting checks, the
`build_models` job and its schedule; and the policy exemptions, loaded with every build so that
the dashboards read them from the warehouse.

Asset keys are the warehouse relations (`metrics/pool_daily`, `marts/fct_gpu_activity`). A dbt
source is drawn as the assets that write its table: `raw.<table>` as the ingest assets filling it,
ops.ingest_log and ops.quarantine as every ingest asset, governance.capacity_recommendations as
`capacity_recommendations`; the others (ops.check_results, ops.scrape_gaps: written by checks and
the scrape sensor) stay external assets.

The dbt assets share the ingest assets' daily partitions. A run over days D1..Dn runs `dbt build
--event-time-start S --event-time-end E`: the microbatch models (marts.fct_gpu_activity and the marts
built from it day by day) rebuild D1..Dn and every other day whose rows a change of those days can
alter (pipelines/build_window.py: allocations alive across them, the day after for host counter
deltas, ...), the rule `gpupool build` follows; every other model is rebuilt whole.
"""

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, dbt_assets
from pydantic import Field

from pipelines.assets.ingest import asset_name
from pipelines.build import dbt_vars, site_project, site_project_dir
from pipelines.build_checks import (
    BUILD_ASSET,
    CATALOG_MATCHES,
    INGEST_ACCOUNTING,
    catalog_problems,
    load_exemptions,
    unbalanced_ingests,
)
from pipelines.build_window import rebuild_window
from pipelines.lake.mart_files import settle_modes
from pipelines.partitions import daily_partitions
from pipelines.resources.dbt import prepared_project
from pipelines.resources.warehouse import WarehouseResource
from pipelines.schedules import daily_schedule
from pipelines.site import site_gpu_models
from pipelines.sources.registry import SOURCES


def _writers() -> dict[str, list[dg.AssetKey]]:
    """Source table ("raw.job_events") -> the assets that write it."""
    writers: dict[str, list[dg.AssetKey]] = defaultdict(list)
    for src in SOURCES.values():
        key = dg.AssetKey(asset_name(src.name))
        for table in (*src.tables, "ops.ingest_log", "ops.quarantine"):
            writers[table if "." in table else f"raw.{table}"].append(key)
    # pipelines.assets.capacity depends on the metrics views, so its key is named, not imported.
    writers["governance.capacity_recommendations"].append(dg.AssetKey("capacity_recommendations"))
    return dict(writers)


SOURCE_WRITERS = _writers()


def reads(*relations: str) -> list[dg.AssetKey]:
    """The assets behind warehouse relations a Python asset reads ("metrics.pool_daily",
    "raw.governance_actions"): a dbt model's own asset, a source table's writers."""
    keys: list[dg.AssetKey] = []
    for relation in relations:
        keys.extend(SOURCE_WRITERS.get(relation) or [dg.AssetKey(relation.split("."))])
    return keys


# The live chain's rule for every model: rebuild the latest day (today, UTC) once something it reads has
# been updated (an intraday ingest of the scrape rounds or a Prometheus pull), never while one of those is
# still being written or a build of it runs. Unlike Dagster's eager(), a source that has not loaded today
# (a scheduler accounting landed nightly) does not hold the others back. The daily schedule builds yesterday.
INTRADAY = (
    dg.AutomationCondition.in_latest_time_window()
    & dg.AutomationCondition.any_deps_updated().since_last_handled()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label("intraday")


class GpupoolDbtTranslator(DagsterDbtTranslator):
    """Keys and groups from the warehouse relation; sources, as the deps of models and of tests,
    replaced by the assets that write them; models rebuilt intraday (INTRADAY) while the live chain runs."""

    def get_automation_condition(self, dbt_resource_props: Mapping[str, Any]) -> dg.AutomationCondition | None:
        return INTRADAY if dbt_resource_props["resource_type"] == "model" else None

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> dg.AssetKey:
        if dbt_resource_props["resource_type"] == "source":
            return super().get_asset_key(dbt_resource_props)  # [source, table]; see get_asset_spec
        return dg.AssetKey([dbt_resource_props["schema"], dbt_resource_props["name"]])

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str:
        return dbt_resource_props["schema"]

    def get_asset_spec(self, manifest: Mapping[str, Any], unique_id: str, project: Any) -> dg.AssetSpec:
        spec = super().get_asset_spec(manifest, unique_id, project)
        if unique_id.startswith("source."):
            return spec
        deps: list[dg.AssetDep] = []
        for dep in spec.deps:
            writers = SOURCE_WRITERS.get(".".join(dep.asset_key.path), [])
            deps.extend([dg.AssetDep(w) for w in writers] if writers else [dep])
        return spec.replace_attributes(deps=deps)

    def get_asset_check_spec(self, asset_spec: dg.AssetSpec, manifest: Mapping[str, Any], unique_id: str,
                             project: Any) -> dg.AssetCheckSpec | None:
        spec = super().get_asset_check_spec(asset_spec, manifest, unique_id, project)
        if spec is None:
            return None
        deps = {w for dep in spec.additional_deps
                for w in SOURCE_WRITERS.get(".".join(dep.asset_key.path), [dep.asset_key])}
        return dg.AssetCheckSpec(spec.name, asset=spec.asset_key, description=spec.description,
                                 additional_deps=sorted(deps - {spec.asset_key}, key=str), blocking=spec.blocking,
                                 metadata=spec.metadata)


class BuildConfig(dg.Config):
    full_refresh: bool = Field(False, description="rebuild the incremental models from scratch (dbt --full-refresh)")


dbt_project = prepared_project()


@dbt_assets(
    manifest=dbt_project.manifest_path,
    project=dbt_project,
    name=BUILD_ASSET,
    dagster_dbt_translator=GpupoolDbtTranslator(),
    partitions_def=daily_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def dbt_models(context: dg.AssetExecutionContext, config: BuildConfig, dbt: DbtCliResource,
               warehouse: WarehouseResource) -> Iterator:
    """`dbt build` of the selected models and their tests for the run's days, then the policy
    exemptions (load_exemptions)."""
    wh = warehouse.get()
    with wh.writer() as con:  # a new home gets the raw, ops and governance tables the sources name
        start, end = _run_window(con, context.partition_time_window, config.full_refresh)
    args = ["build", "--event-time-start", f"{start:%Y-%m-%d}", "--event-time-end", f"{end:%Y-%m-%d}",
            "--vars", json.dumps(dbt_vars(wh.writer_path, wh.home, (start, end)))]
    if config.full_refresh:
        args.append("--full-refresh")
    gpu_models = site_gpu_models()
    with wh.writer_lock():  # dbt's target folder stays in the home, so the next run parses partially
        if gpu_models:  # the site's GPU models table: dbt parses and runs a copy of the project holding it
            # (dagster-dbt runs in the assets' project: the flag overrides the DBT_PROJECT_DIR it sets)
            project = site_project(Path(dbt_project.project_dir), site_project_dir(wh.home), gpu_models)
            args += ["--project-dir", str(project)]
        yield from dbt.cli(args, context=context, target_path=wh.home / "dbt" / "dagster").stream()
        settle_modes(wh.home)
    wh.publish_unless_deferred("build", f"dagster run {context.run_id}")
    problem = load_exemptions(wh)
    if problem:
        context.log.warning(f"policy exemptions not loaded, the last loaded are kept: {problem}")


def _run_window(con, window: dg.TimeWindow, full_refresh: bool) -> tuple[dt.date, dt.date]:
    """[start, end) of the days a run's microbatch models rebuild: the run's days, widened to every day
    whose rows they can change (pipelines.build_window, the rule `gpupool build` follows too); the run's
    days alone on a full refresh or without telemetry."""
    days = [window.start.date() + dt.timedelta(days=i) for i in range((window.end - window.start).days)]
    if full_refresh or not days:
        return window.start.date(), window.end.date()
    # which of the run's days have host samples is not known here: each may (the day after is rebuilt too)
    widened = rebuild_window(con, days, days)
    if widened is None:
        return window.start.date(), window.end.date()
    return min(widened[0], days[0]), max(widened[1], days[-1] + dt.timedelta(days=1))


@dg.asset_check(asset=dg.AssetKey(["metrics", "ingest_daily"]), name=INGEST_ACCOUNTING, blocking=False)
def ingest_accounting_balanced(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    """Every ingest run accounts for each record: read = loaded + quarantined."""
    bad = unbalanced_ingests(warehouse.get())
    return dg.AssetCheckResult(
        passed=not bad,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"unbalanced_partitions": len(bad), "examples": dg.MetadataValue.json([list(r) for r in bad[:10]])},
    )


CATALOG_VIEW = dg.AssetKey(["metrics", "catalog"])


# On the catalog's view, after every model: it compares the whole warehouse with the catalog.
@dg.asset_check(asset=CATALOG_VIEW, name=CATALOG_MATCHES, blocking=True,
                additional_deps=[spec.key for spec in dbt_models.specs if spec.key != CATALOG_VIEW])
def catalog_matches_models(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    """Every catalog metric exists as its view's column, and every model column is documented."""
    problems = catalog_problems(warehouse.get())
    return dg.AssetCheckResult(
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"problems": len(problems), "examples": dg.MetadataValue.json(problems[:20])},
    )


models_job = dg.define_asset_job(
    "build_models",
    selection=dg.AssetSelection.assets(dbt_models),
    partitions_def=daily_partitions,
    description="dbt build of staging, marts and the metrics views for the day's batches.",
    # a build holds the writers' lock for its whole run: a run queue limits this tag to 1 (docs/deploy.md)
    tags={"gpupool/writer": "build"},
)


# The one switch of the live chain's builds (stopped, as every sensor): with it on, Dagster evaluates INTRADAY
# every minute and runs the models whose inputs an intraday ingest updated, for today.
live_chain_sensor = dg.AutomationConditionSensorDefinition(
    "live_chain",
    target=dg.AssetSelection.assets(dbt_models),
    default_status=dg.DefaultSensorStatus.STOPPED,
    minimum_interval_seconds=60,
    run_tags=models_job.tags,  # the build's writer tag: one build at a time (docs/deploy.md)
    description="Rebuilds today's models once an intraday ingest (dcgm_scrape, prometheus_pull) updated what they "
                "read, and publishes a release: the live chain's builds.",
)


models_schedule = daily_schedule(
    models_job, "50 0 * * *", "models_schedule",
    "Builds the models for yesterday (UTC) at 00:50 UTC, once ingest_daily (00:20) is in.")


defs = dg.Definitions(
    assets=[dbt_models],
    asset_checks=[ingest_accounting_balanced, catalog_matches_models],
    jobs=[models_job],
    schedules=[models_schedule],
    sensors=[live_chain_sensor],
)
