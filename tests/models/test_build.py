"""The dbt build (pipelines/build.py): progress per model, the catalog tables, a failed model named
with DuckDB's message and the previous warehouse kept, incremental days and --full-refresh, views
left alone by an incremental build, a full refresh when the project changed or a model is missing."""
from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from pipelines.build import BuildError, ModelBuild, build, raw_tables_read
from pipelines.catalog import load_catalog
from pipelines.paths import MODELS_DIR
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home
from tests.models.builders import DAY1, at, gpu, load, mark_day_files, one, series

pytestmark = pytest.mark.slow  # dbt builds of never-built homes, a changed project's parse

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DAY2 = DAY1 + dt.timedelta(days=1)
CATALOG_COLUMNS = [
    "metric_name", "metric_group", "label_en", "label_zh", "description", "description_zh", "metric_type", "grain",
    "unit", "formula", "source_fields", "view_name", "column_name", "also_in", "metric_version", "catalog_version",
]


# The module's first builds, on homes never built (not the built empty home the other model tests start
# from), shared: a build is seconds. Tests read these homes, or write to a copy.
@pytest.fixture(scope="module")
def inventory_built(tmp_path_factory) -> tuple[Path, list[ModelBuild], list[str]]:
    """A home never built, one GPU in its inventory and no telemetry, built: the home, the builds and
    the progress lines."""
    wh = Warehouse(tmp_path_factory.mktemp("inventory") / "gpupool")
    load(wh, gpu_inventory=[gpu("a100-01", 0)])
    steps: list[str] = []
    return wh.home, build(wh, on_step=steps.append), steps


@pytest.fixture(scope="module")
def two_days_built(tmp_path_factory) -> tuple[Path, set[str], set[str]]:
    """A home never built, ten minutes of one GPU's activity (0.5) on each of DAY1 and the day after,
    built: the home, what its first build built, and which of those are tables (incremental or not)."""
    wh = Warehouse(tmp_path_factory.mktemp("two-days") / "gpupool")
    load(wh, gpu_inventory=[gpu("a100-01", 0)], dcgm_samples=series("a100-01", 0, GR, at("10:00"), 10, 0.5))
    load(wh, ingest="day2", day=DAY2, dcgm_samples=series("a100-01", 0, GR, at("10:00", day=2), 10, 0.5))
    builds = build(wh)
    return wh.home, {b.name for b in builds}, {b.name for b in builds if b.kind in ("table", "incremental")}


def test_build_reports_every_model_and_writes_the_catalog(inventory_built):
    home, builds, steps = inventory_built
    warehouse = Warehouse(home)

    names = {b.name for b in builds}
    assert {"seeds.gpu_models", "staging.stg_dcgm__samples", "marts.fct_gpu_activity", "metrics.pool_daily",
            "metrics.catalog", "metrics.catalog_version"} <= names
    assert len(steps) == len(builds)
    assert all(s.startswith("[") and f"/{len(builds)}] " in s and " ok in " in s for s in steps)
    assert {s.split("] ")[1].split(" ")[0] for s in steps} == names
    catalog = load_catalog()
    with warehouse.connect() as con:
        assert [c[0] for c in con.execute("describe metrics.catalog").fetchall()] == CATALOG_COLUMNS
        assert con.execute("select count(*) from metrics.catalog").fetchone()[0] == len(catalog.metrics)
        version = one(con, "select catalog_version, metrics from metrics.catalog_version")
    assert version == {"catalog_version": catalog.version, "metrics": len(catalog.metrics)}


def _activity(warehouse: Warehouse) -> dict[dt.date, float]:
    with warehouse.connect() as con:
        return dict(con.execute(
            "select cast(minute_at as date), sum(activity) from marts.fct_gpu_activity group by 1").fetchall())


def test_an_incremental_build_rebuilds_the_changed_days_and_a_full_refresh_all(tmp_path, two_days_built):
    warehouse = Warehouse(copy_home(two_days_built[0], tmp_path / "gpupool"))
    assert _activity(warehouse) == {DAY1: pytest.approx(5.0), DAY2: pytest.approx(5.0)}
    mark_day_files(warehouse, "marts.fct_gpu_activity", DAY2, "0.0 as activity")  # only a rebuild of day 2 removes it

    load(warehouse, dcgm_samples=series("a100-01", 0, GR, at("10:00"), 10, 0.25))  # day 1 again, new values
    build(warehouse)
    assert _activity(warehouse) == {DAY1: pytest.approx(2.5), DAY2: pytest.approx(0.0)}

    build(warehouse, full_refresh=True)
    assert _activity(warehouse) == {DAY1: pytest.approx(2.5), DAY2: pytest.approx(5.0)}


def test_a_build_without_telemetry_creates_the_day_by_day_marts_empty(inventory_built):
    with Warehouse(inventory_built[0]).connect() as con:
        assert con.execute("select count(*) from marts.fct_gpu_activity").fetchone()[0] == 0


def _built(warehouse: Warehouse, **kwargs) -> set[str]:
    return {b.name for b in build(warehouse, **kwargs)}


def _mark_day1(warehouse: Warehouse) -> None:
    """Zero day 1's activity: only a build that rebuilds day 1 brings it back."""
    mark_day_files(warehouse, "marts.fct_gpu_activity", DAY1, "0.0 as activity")


def test_an_incremental_build_runs_the_tables_a_changed_project_everything_and_a_failed_model_keeps_the_warehouse(
        tmp_path, two_days_built):
    # one test, so that dbt parses the failing build's project again in part (about 1 CPU-second), not
    # whole as it would a second copy of the project (about 10)
    home, everything, tables = two_days_built
    warehouse = Warehouse(copy_home(home, tmp_path / "gpupool"))
    assert "marts.fct_gpu_activity" in tables and "metrics.pool_daily" not in tables

    _mark_day1(warehouse)
    assert _built(warehouse) == tables  # nothing changed: the tables and incrementals run, no view, no seed
    assert _activity(warehouse)[DAY1] == 0  # and day 1, outside the window, is kept as it was

    with warehouse.writer() as con:  # a view missing: everything again
        con.execute("drop view metrics.gpu_inventory")
    assert _built(warehouse) == everything
    with warehouse.connect() as con:
        assert con.execute("select host from metrics.gpu_inventory").fetchall() == [("a100-01",)]
    assert _activity(warehouse)[DAY1] == pytest.approx(5.0)

    models = tmp_path / "models"  # the same project elsewhere, one model changed: its old rows are not kept
    shutil.copytree(MODELS_DIR, models, ignore=shutil.ignore_patterns("target", "logs"))
    with (models / "metrics" / "pool_daily.sql").open("a") as sql:
        sql.write("\n-- changed\n")
    _mark_day1(warehouse)
    assert _built(warehouse, project_dir=models) == everything
    assert _activity(warehouse)[DAY1] == pytest.approx(5.0)
    assert _built(warehouse, project_dir=models) == tables

    stamp = warehouse.home / "dbt" / "state" / "fingerprint"  # the state as another dbt version left it
    stamp.write_text(stamp.read_text().replace("dbt-core ", "dbt-core 0.0.1-"))
    assert _built(warehouse, project_dir=models) == everything

    view = models / "metrics" / "gpu_inventory.sql"  # a model that fails: named, the warehouse kept
    view.write_text("select no_such_column from {{ ref('dim_gpus') }}")
    with pytest.raises(BuildError, match=r"models/metrics/gpu_inventory\.sql: building metrics\.gpu_inventory "
                                         r"failed: .*no_such_column"):
        build(warehouse, project_dir=models)
    with warehouse.connect() as con:
        assert con.execute("select host from metrics.gpu_inventory").fetchall() == [("a100-01",)]
    assert not (warehouse.home / "dbt" / "build").exists()


def test_the_raw_tables_a_model_reads_come_from_the_project_graph(tmp_path):
    wh = Warehouse(tmp_path)
    assert raw_tables_read(wh, ["host_period"]) == {"host_samples"}
    comparison = raw_tables_read(wh, ["pool_period", "job_period", "governance_period"])
    assert {"dcgm_samples", "job_events", "job_gpus", "governance_actions"} <= comparison
    assert not comparison & {"host_samples", "artifact_events"}
    with pytest.raises(BuildError, match="no model named nope"):
        raw_tables_read(wh, ["pool_period", "nope"])
