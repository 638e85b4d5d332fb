"""The code location loads, and holds what the product needs."""
import datetime as dt
import os
import subprocess
import sys

import dagster as dg

from pipelines.assets.marts import dbt_models
from pipelines.cli.demo import CODE_LOCATION
from pipelines.definitions import defs, from_env
from pipelines.paths import REPO_ROOT
from pipelines.sources.registry import SOURCES


def test_dagster_validates_the_code_location_from_any_folder(tmp_path):
    """By module, as the demo's closing hint starts it: no pyproject.toml where it runs."""
    result = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-m", CODE_LOCATION],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},  # this checkout, as an installed package is found
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_ingest_asset_per_source_plus_the_dbt_models_and_the_connectors():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    landing = {"slurm_accounting_landing", "kueue_workloads_landing"}
    derived = {"policy_findings", "capacity_recommendations", "review_pack"}
    models = {k.to_user_string() for k in dbt_models.keys}
    external = {"ops/check_results", "ops/scrape_gaps"}  # dbt sources written by checks and the scrape sensor
    assert keys == {f"raw_{name}" for name in SOURCES} | derived | landing | models | external
    assert {k for k in keys if not graph.get(dg.AssetKey.from_user_string(k)).is_materializable} == external


def test_the_daily_ingest_job_does_not_run_the_connectors():
    selected = {k.to_user_string() for k in defs.resolve_job_def("ingest_daily").asset_layer.executable_asset_keys}
    assert selected == {f"raw_{name}" for name in SOURCES}
    landing = {k.to_user_string() for k in defs.resolve_job_def("land_connectors_daily").asset_layer.executable_asset_keys}
    assert landing == {"slurm_accounting_landing", "kueue_workloads_landing"}


def test_every_ingest_asset_has_its_expectations_check():
    names = {(k.asset_key.to_user_string(), k.name) for k in defs.resolve_asset_graph().asset_check_keys}
    for source in SOURCES:
        assert (f"raw_{source}", "expectations_suite") in names
    assert ("metrics/ingest_daily", "ingest_accounting_balanced") in names
    assert ("metrics/catalog", "catalog_matches_models") in names


def test_schedules_and_jobs_are_defined():
    assert {j.name for j in defs.jobs} >= {"ingest_daily", "build_models", "land_connectors_daily",
                                           "policy_findings_daily", "capacity_monthly", "review_pack_monthly",
                                           "maintain_lake"}
    assert len(list(defs.schedules)) == 7
    assert {s.name for s in defs.sensors} == {"dcgm_scrape", "node_exporter_scrape", "slurm_gpu_snapshot", "idle_reclaim",
                                                "mlflow_pull", "slurm_admin_audit", "prometheus_pull", "live_chain"}
    # nothing lands, builds or acts until an operator turns it on
    assert {s.name for s in defs.sensors if s.default_status != dg.DefaultSensorStatus.STOPPED} == set()


def test_the_daily_ingest_schedule_targets_the_day_that_just_ended():
    from pipelines.assets.ingest import ingest_schedule

    context = dg.build_schedule_context(scheduled_execution_time=dt.datetime(2026, 11, 29, 0, 20, tzinfo=dt.UTC))
    request = ingest_schedule(context)
    assert request.partition_key == "2026-11-28"


def test_the_daily_models_schedule_builds_the_day_that_just_ended():
    from pipelines.assets.marts import models_schedule

    context = dg.build_schedule_context(scheduled_execution_time=dt.datetime(2026, 11, 29, 0, 50, tzinfo=dt.UTC))
    assert models_schedule(context).partition_key == "2026-11-28"


def test_the_monthly_capacity_schedule_targets_the_month_that_just_ended():
    from pipelines.assets.capacity import capacity_schedule

    context = dg.build_schedule_context(scheduled_execution_time=dt.datetime(2026, 12, 1, 2, 30, tzinfo=dt.UTC))
    assert capacity_schedule(context).partition_key == "2026-11-01"


def test_the_monthly_pack_schedule_targets_the_month_that_just_ended():
    from pipelines.assets.pack import pack_schedule

    context = dg.build_schedule_context(scheduled_execution_time=dt.datetime(2026, 12, 1, 4, 0, tzinfo=dt.UTC))
    assert pack_schedule(context).partition_key == "2026-11-01"


def test_settings_from_the_environment_are_bound_only_when_set(monkeypatch):
    """An unset EnvVar fails a run's config in dagster, so the zero-config default stays the resource's own."""
    monkeypatch.delenv("GPUPOOL_HOME", raising=False)
    assert from_env("GPUPOOL_HOME") == ""
    monkeypatch.setenv("GPUPOOL_HOME", "/srv/gpupool")
    bound = from_env("GPUPOOL_HOME")
    assert isinstance(bound, dg.EnvVar) and bound.env_var_name == "GPUPOOL_HOME"


def test_every_resource_setting_is_described_for_the_ui():
    for key, resource in defs.resources.items():
        fields = resource.get_resource_definition().config_schema.config_type.fields
        assert fields, key
        for name, field in fields.items():
            assert field.description, f"{key}.{name}"
