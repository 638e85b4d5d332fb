"""The dbt project's own tests (data_tests in the properties files, singular tests in models/tests/,
unit_tests in models/metrics/_unit_tests.yml) pass on a small built warehouse, and catch a broken key
and allocation above capacity. dbt runs in a subprocess, as a data team runs `dbt test`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from pipelines.paths import MODELS_DIR
from pipelines.warehouse import Warehouse
from tests.models.builders import at, build, gpu, load, quota, series, simple_job

pytestmark = pytest.mark.slow  # dbt builds and dbt's own tests

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DBT = Path(sys.executable).with_name("dbt")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    """Two tenants on two A100s and a MIG H100: a job with an idle hour, one across midnight, a MIG
    slice, one still running at the data's end."""
    warehouse = Warehouse(tmp_path_factory.mktemp("dbt-tests") / "gpupool")
    busy_then_idle = simple_job("j-idle", "a100-01", 0, at("00:00"), at("02:00"))
    overnight = simple_job("j-night", "a100-01", 1, at("09:00"), at("02:00", day=2), tenant="nlp", queue="nlp-train")
    mig = simple_job(
        "j-mig", "h100-01", 0, at("10:00"), at("11:00"), gpu_model="H100",
        placement_fields={"gpu_instance_id": 1, "gpu_instance_profile": "1g.10gb", "fraction": 1 / 7},
    )
    running = simple_job("j-run", "a100-01", 0, at("13:00"), None)
    jobs = [busy_then_idle, overnight, mig, running]
    load(
        warehouse,
        gpu_inventory=[
            gpu("a100-01", 0), gpu("a100-01", 1),
            gpu("h100-01", 0, "H100", share_mode="mig", gpu_instance_id=1, gpu_instance_profile="1g.10gb",
                fraction=1 / 7, memory_mib=9984),
            gpu("h100-01", 0, "H100", share_mode="mig", gpu_instance_id=2, gpu_instance_profile="3g.40gb",
                fraction=3 / 7, memory_mib=40192),
        ],
        queue_quotas=[quota("vision-train", "vision", "A100", 1), quota("nlp-train", "nlp", "A100", 1)],
        job_events=[e for events, _ in jobs for e in events],
        job_gpus=[p for _, placements in jobs for p in placements],
        dcgm_samples=series("a100-01", 0, GR, at("00:00"), 60, 0.8) + series("a100-01", 0, GR, at("01:00"), 60, 0.0),
    )
    build(warehouse).close()
    return warehouse


def dbt_test(warehouse: Warehouse, *select: str) -> dict[str, str]:
    """Run `dbt test` on the warehouse; the status of each test by unique_id. Runs share one target
    folder, so a later run reuses the first one's parse."""
    tmp = warehouse.home / "dbt-test"
    subprocess.run(
        [str(DBT), "test", "--project-dir", str(MODELS_DIR), "--profiles-dir", str(MODELS_DIR),
         "--target-path", str(tmp / "target"), "--log-path", str(tmp / "logs"), "--quiet",
         "--no-send-anonymous-usage-stats", "--no-version-check", *(["--select", *select] if select else [])],
        env=os.environ | {"GPUPOOL_HOME": str(warehouse.home)}, check=False, capture_output=True, text=True,
    )
    results = json.loads((tmp / "target" / "run_results.json").read_text())["results"]
    return {r["unique_id"]: r["status"] for r in results}


def test_every_data_singular_and_unit_test_passes(built):
    statuses = dbt_test(built)
    assert {uid: s for uid, s in statuses.items() if s != "pass"} == {}
    singular = {p.stem for p in (MODELS_DIR / "tests").glob("*.sql")}
    ran = {uid.split(".")[2] for uid in statuses if uid.startswith("test.")}
    assert singular <= ran
    assert sum(uid.startswith("unit_test.") for uid in statuses) >= 3
    assert sum(uid.startswith("test.") for uid in statuses) >= 200


def test_a_duplicated_job_and_allocation_above_capacity_fail(built, tmp_path):
    # dbt tests read the writers' file (models/profiles.yml); a published release is never written
    saved = shutil.copyfile(built.writer_path, tmp_path / built.writer_path.name)
    try:
        with duckdb.connect(str(built.writer_path)) as con:
            con.execute("insert into marts.dim_jobs select * from marts.dim_jobs where job_id = 'j-mig'")
            con.execute("update marts.fct_capacity_daily set capacity_gpu_hours = 1 where gpu_model = 'A100'")
        statuses = dbt_test(built, "dim_jobs", "allocated_within_capacity")
    finally:
        shutil.copyfile(saved, built.writer_path)
    failed = {uid.split(".")[2] for uid, s in statuses.items() if s == "fail"}
    assert failed == {"unique_combination_dim_jobs_source__job_id", "allocated_within_capacity"}
