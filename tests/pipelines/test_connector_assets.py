"""The connector assets, the squeue snapshot sensor and `gpupool land`, without a live cluster."""
import datetime as dt
import json
import shutil
import stat
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from pipelines.assets.connectors import (
    SnapshotCursor,
    advance_snapshot,
    build_slurm_snapshot_sensor,
    kueue_workloads_landing,
    land_connectors_schedule,
    slurm_accounting_landing,
)
from pipelines.assets.ingest import ingest_assets
from pipelines.cli import main
from pipelines.resources.kueue import KueueState
from pipelines.resources.slurm import SlurmAccounting
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse

TESTS = Path(__file__).parent.parent
SLURM_FIXTURES = TESTS / "slurm" / "fixtures"
KUEUE_FIXTURES = TESTS / "kubernetes" / "fixtures"
DAY = "2026-11-29"  # the day the Slurm fixtures were recorded
RAW_SLURM_SACCT = next(a for a in ingest_assets if a.key.to_user_string() == "raw_slurm_sacct")


def recorded(tmp_path: Path, fixtures: Path, names: tuple[str, ...]) -> Path:
    """A folder laid out as the offline connectors read it: <folder>/<day>/<file>."""
    folder = tmp_path / "recorded"
    (folder / DAY).mkdir(parents=True)
    for name in names:
        shutil.copy(fixtures / name, folder / DAY / name)
    return folder


@pytest.fixture
def empty_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpupool.yml"
    path.write_text("")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(path))
    return path


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures, "the run did not fail"
    return failures[0].step_failure_data.error.message


@pytest.mark.parametrize(
    ("asset", "resource_key", "resource", "section"),
    [
        (slurm_accounting_landing, "slurm", SlurmAccounting(), "slurm"),
        (kueue_workloads_landing, "kueue", KueueState(), "kubernetes"),
    ],
)
def test_a_live_landing_asset_fails_when_its_section_is_missing(
    asset, resource_key, resource, section, empty_config: Path, warehouse: Warehouse
):
    result = dg.materialize(
        [asset],
        resources={resource_key: resource, "warehouse": WarehouseResource(home=str(warehouse.home))},
        partition_key=DAY,
        raise_on_error=False,
    )
    assert not result.success
    message = failure_message(result)
    assert f"{empty_config}: no `{section}` section" in message
    assert "gpupool.example.yml" in message
    assert not warehouse.landing.exists() or not any(warehouse.landing.rglob("*.*"))


def test_slurm_accounting_landing_lands_the_day_and_raw_slurm_sacct_ingests_it(
    tmp_path: Path, empty_config: Path, warehouse: Warehouse
):
    offline = recorded(tmp_path, SLURM_FIXTURES, ("sacct.txt", "sacct.json"))
    result = dg.materialize(
        [slurm_accounting_landing, RAW_SLURM_SACCT],
        resources={"slurm": SlurmAccounting(offline_dir=str(offline)),
                   "warehouse": WarehouseResource(home=str(warehouse.home))},
        partition_key=DAY,
    )
    landed = result.asset_materializations_for_node("slurm_accounting_landing")[0].metadata
    assert landed["files_landed"].value == 2
    assert (warehouse.landing / "slurm_sacct" / DAY / "sacct.txt").read_bytes() == (SLURM_FIXTURES / "sacct.txt").read_bytes()
    assert (warehouse.landing / "slurm_sacct_json" / DAY / "sacct.json").is_file()
    ingested = result.asset_materializations_for_node("raw_slurm_sacct")[0].metadata
    assert ingested["files_read"].value == 1
    assert ingested["records_loaded"].value > 0
    with warehouse.connect(read_only=True) as con:
        jobs = con.execute(
            "select count(distinct job_id) from raw.job_events where source_file like '%sacct.txt'"
        ).fetchone()[0]
    assert jobs > 0


def test_kueue_workloads_landing_lands_the_recorded_snapshot(tmp_path: Path, empty_config: Path, warehouse: Warehouse):
    offline = recorded(tmp_path, KUEUE_FIXTURES, ("workloads.json", "pods.json"))
    result = dg.materialize(
        [kueue_workloads_landing],
        resources={"kueue": KueueState(offline_dir=str(offline)),
                   "warehouse": WarehouseResource(home=str(warehouse.home))},
        partition_key=DAY,
    )
    metadata = result.asset_materializations_for_node("kueue_workloads_landing")[0].metadata
    assert metadata["files_landed"].value == 2
    assert json.loads((warehouse.landing / "kueue" / DAY / "workloads.json").read_text())["items"]


def test_snapshot_cursor_requests_an_ingest_every_n_snapshots_and_a_final_one_per_day():
    cursor, runs = SnapshotCursor(), []
    for minute in range(5):
        cursor, ingests = advance_snapshot(cursor, dt.datetime(2026, 11, 29, 23, 55 + minute), every=3)
        runs.extend(ingests)
    assert runs == [("2026-11-29", "slurm_squeue:2026-11-29:3")]
    cursor, ingests = advance_snapshot(cursor, dt.datetime(2026, 11, 30, 0, 0), every=3)
    assert ingests == [("2026-11-29", "slurm_squeue:2026-11-29:final")]
    assert (cursor.day, cursor.since_ingest, cursor.snapshots) == ("2026-11-30", 1, 6)
    assert SnapshotCursor.parse(cursor.to_json()) == cursor
    assert SnapshotCursor.parse("not json") == SnapshotCursor()


def test_slurm_gpu_snapshot_lands_squeue_and_requests_the_days_ingest(tmp_path: Path, warehouse: Warehouse):
    squeue = tmp_path / "fake-squeue"
    squeue.write_text(f"#!/bin/sh\ncat '{SLURM_FIXTURES / 'squeue.json'}'\n")
    squeue.chmod(squeue.stat().st_mode | stat.S_IEXEC)
    config = tmp_path / "gpupool.yml"
    config.write_text(f"slurm:\n  squeue: {squeue}\n")
    sensor = build_slurm_snapshot_sensor(ingest_every_ticks=1)
    resources = {"slurm": SlurmAccounting(config_file=str(config)),
                 "warehouse": WarehouseResource(home=str(warehouse.home))}
    with dg.build_sensor_context(resources=resources) as context:
        result = sensor(context)
    assert [r.partition_key for r in result.run_requests] == [dt.datetime.now(dt.UTC).date().isoformat()]
    landed = list((warehouse.landing / "slurm_squeue").rglob("squeue-*.json"))
    assert len(landed) == 1
    assert landed[0].read_bytes() == (SLURM_FIXTURES / "squeue.json").read_bytes()


def test_slurm_gpu_snapshot_skips_without_a_slurm_section(empty_config: Path, warehouse: Warehouse):
    resources = {"slurm": SlurmAccounting(), "warehouse": WarehouseResource(home=str(warehouse.home))}
    with dg.build_sensor_context(resources=resources) as context:
        result = build_slurm_snapshot_sensor()(context)
    assert not result.run_requests
    assert "no `slurm` section" in result.skip_reason.skip_message


def test_gpupool_land_help():
    runner = CliRunner()
    for args in (["land", "--help"], ["land", "slurm", "--help"], ["land", "kueue", "--help"],
                 ["k8s-audit-webhook", "--help"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
    assert "--date" in runner.invoke(main, ["land", "slurm", "--help"]).output


@pytest.mark.parametrize(("command", "section"), [("slurm", "slurm"), ("kueue", "kubernetes")])
def test_gpupool_land_without_a_section_says_what_to_add(command, section, empty_config: Path, tmp_path: Path):
    result = CliRunner().invoke(main, ["land", command, "--date", DAY, "--home", str(tmp_path / "home")])
    assert result.exit_code == 1
    assert f"no `{section}` section" in result.output
    assert "gpupool.example.yml" in result.output


def test_gpupool_land_mlflow_without_a_section_says_what_to_add(empty_config: Path, tmp_path: Path):
    result = CliRunner().invoke(main, ["land", "mlflow", "--home", str(tmp_path / "home")])
    assert result.exit_code == 1 and "no `mlflow` section" in result.output and "gpupool.example.yml" in result.output


def test_gpupool_land_slurm_offline_lands_and_ingests(tmp_path: Path, empty_config: Path):
    offline = recorded(tmp_path, SLURM_FIXTURES, ("sacct.txt",))
    home = tmp_path / "home"
    result = CliRunner().invoke(
        main, ["land", "slurm", "--date", DAY, "--home", str(home), "--offline-dir", str(offline), "--no-build"]
    )
    assert result.exit_code == 0, result.output
    assert "raw_slurm_sacct:" in result.output
    with Warehouse(home).connect(read_only=True) as con:
        assert con.execute("select count(*) from raw.job_events").fetchone()[0] > 0


def test_the_landing_schedule_lands_yesterday():
    context = dg.build_schedule_context(scheduled_execution_time=dt.datetime(2026, 11, 30, 0, 10, tzinfo=dt.UTC))
    request = land_connectors_schedule(context)
    assert request.partition_key == "2026-11-29"
