"""End to end through the `gpupool` command: demo, sql, ingest."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GPUPOOL = [sys.executable, "-m", "pipelines.cli"]


def gpupool(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*GPUPOOL, *args, "--home", str(home)], check=False, capture_output=True, text=True, timeout=900
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def sql_json(query: str, home: Path) -> list[dict]:
    return json.loads(gpupool("sql", query, "--format", "json", home=home).stdout)


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("demo")
    result = gpupool("demo", "--days", "2", home=home)
    assert "Pool 2026-11-01 .. 2026-11-02" in result.stdout
    return home


@pytest.mark.slow
def test_demo_builds_the_metrics_and_finds_the_planted_waste(demo_home):
    # The sample's interactive session sits idle from 16:00 on day 1 until it is reclaimed at 05:30 on day 2.
    idle = sql_json("select job_id, window_start_at, window_end_at from metrics.idle_allocations "
                    "where job_id = 'j-1004'", demo_home)
    assert len(idle) == 1
    assert idle[0]["window_start_at"].startswith("2026-11-01 16:00") or idle[0]["window_start_at"].startswith(
        "2026-11-01T16:00")
    # The preempted training job resumes as a second attempt.
    job = sql_json("select attempts, preemptions from metrics.job_summary where job_id = 'j-1002'", demo_home)
    assert job == [{"attempts": 2, "preemptions": 1}]
    # The rogue process on a100-01 GPU 5 is busy with no allocation.
    rogue = sql_json("select host, gpu from metrics.telemetry_reconciliation where finding = 'busy_unallocated'",
                     demo_home)
    assert {"host": "a100-01", "gpu": 5} in rogue
    pool = sql_json("select * from metrics.pool_period where gpu_model = 'all'", demo_home)[0]
    assert pool["physical_gpus"] == 28
    assert 0 < pool["allocation_rate_pct"] <= 100


@pytest.mark.slow
def test_sql_is_read_only_and_explains_errors(demo_home):
    refused = gpupool("sql", "delete from raw.job_events", home=demo_home, check=False)
    assert refused.returncode != 0
    assert "read-only" in (refused.stdout + refused.stderr).lower()
    bad = gpupool("sql", "select * from metrics.no_such_view", home=demo_home, check=False)
    assert bad.returncode != 0 and "query failed" in bad.stderr


@pytest.mark.slow
def test_ingest_a_broken_file_quarantines_with_reasons(demo_home, tmp_path):
    home = tmp_path / "copy"
    shutil.copytree(demo_home, home)
    broken = tmp_path / "broken.prom"
    broken.write_text(
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n1"} 50 1793404800000\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2",Hostname="n1"} NaN 1793404800000\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-3",Hostname="n1\n'
    )
    result = gpupool("ingest", "dcgm_text", str(broken), "--date", "2026-11-05", home=home)
    assert "3 read, 1 loaded, 2 quarantined" in result.stdout
    reasons = sql_json("select reason from ops.quarantine where source_file like '%broken.prom'", home)
    assert len(reasons) == 2


def test_sql_without_a_warehouse_says_what_to_do(tmp_path):
    result = gpupool("sql", "select 1", home=tmp_path / "empty", check=False)
    assert result.returncode != 0
    assert "gpupool demo" in result.stderr
