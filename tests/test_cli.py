"""End to end through the `gpupool` command: demo, sql, ingest, docs. The demo runs in a process of
its own, as an operator runs it; the other commands run in this process (CliRunner: a process costs
1.5 CPU-seconds of imports, the ingest's 7.5 with Great Expectations, more than most of these commands,
and the exit codes and printouts they check are the same)."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from allocator.sim.simulator import simulate
from pipelines import duckdb_limits
from pipelines.cli import beside, main
from pipelines.cli.beside import machine_allows
from pipelines.cli.demo import MIN_DAYS_FOR_INGEST_WORKERS, PhaseMeter, _ingest_workers
from pipelines.summary import POLICY_VIEWS

GPUPOOL = [sys.executable, "-m", "pipelines.cli"]


def gpupool(*args: str, home: Path) -> subprocess.CompletedProcess:
    """`gpupool ARGS --home HOME` in a process of its own."""
    result = subprocess.run(
        [*GPUPOOL, *args, "--home", str(home)], check=False, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def invoke(*args: str, home: Path) -> Result:
    """`gpupool ARGS --home HOME` in this process."""
    return CliRunner().invoke(main, [*args, "--home", str(home)])


def sql(query: str, home: Path, *args: str) -> Result:
    return invoke("sql", query, *args, home=home)


def sql_json(query: str, home: Path) -> list[dict]:
    result = sql(query, home, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


DEMO_ARGS = ("--days", "2", "--gpus", "32", "--seed", "7")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, str]:
    """The demo's home and what it printed."""
    home = tmp_path_factory.mktemp("demo")
    result = gpupool("demo", *DEMO_ARGS, home=home)
    assert "Pool 2026-11-01 .. 2026-11-02" in result.stdout
    assert "Idle-reclaim policies on vs off" in result.stdout
    return home, result.stdout


@pytest.fixture(scope="module")
def demo_home(demo_run) -> Path:
    return demo_run[0]


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, list[str]]:
    """The waste the simulator planted in the demo's two days (the simulation is deterministic)."""
    report = simulate(tmp_path_factory.mktemp("sim"), days=2, gpus=32, seed=7)
    return report.planted_examples


@pytest.mark.slow
def test_demo_finds_the_waste_the_simulator_planted(demo_home, planted):
    idle_jobs = {r["job_id"] for r in sql_json("select distinct job_id from metrics.idle_allocations", demo_home)}
    assert set(planted["idle_allocation"]) & idle_jobs, "no planted idle allocation was found idle"
    assert set(planted["forgotten_interactive"]) & idle_jobs, "no forgotten interactive session was found idle"
    storm = planted["retry_storm"][0]
    retries = sql_json(f"select retries from metrics.job_summary where job_id = '{storm}'", demo_home)
    assert retries and retries[0]["retries"] >= 1
    rogue = sql_json("select count(*) as n from metrics.telemetry_reconciliation where finding = 'busy_unallocated'",
                     demo_home)
    assert rogue[0]["n"] >= 1
    pool = sql_json("select * from metrics.pool_period where gpu_model = 'all'", demo_home)[0]
    assert pool["physical_gpus"] == 40
    assert 0 < pool["allocation_rate_pct"] <= 100


@pytest.mark.slow
def test_demo_prints_the_time_and_peak_memory_of_each_phase(demo_run):
    table = demo_run[1].partition("Time and peak memory (this process and its children) of each phase:")[2]
    rows = {line.split("  ")[1].strip(): line for line in table.splitlines()[2:] if line.startswith("  ")}
    phases = ["simulate", "ingest", "build", "summary", "baseline simulate", "baseline ingest", "baseline build",
              "comparison", "total"]
    assert list(rows) == phases, table
    for line in rows.values():
        assert re.search(r"\d+\.\d s +[\d,]+ MiB$", line), line


@pytest.mark.slow
def test_the_baseline_month_runs_side_by_side_where_the_machine_allows_and_prints_after(demo_run):
    """Its printout comes whole after the demo's own month and summary (pipelines/cli/beside.py)."""
    printout = demo_run[1]
    said = "the same month with the idle-reclaim policies off, for comparison (run side by side with it)"
    assert (said in printout) is machine_allows()
    summary, _, baseline = printout.partition("the same month with the idle-reclaim policies off")
    assert "with the idle-reclaim policies acting" in summary and "with no idle-reclaim" not in summary
    assert "with no idle-reclaim" in baseline and "raw_dcgm_parquet:" in baseline


@pytest.mark.slow
def test_the_baseline_month_loads_and_builds_only_what_the_comparison_reads(demo_run):
    home, printout = demo_run
    baseline = printout.partition("the same month with the idle-reclaim policies off")[2]
    assert "raw_allocator_events:" in baseline and "raw_node_exporter_parquet:" not in baseline
    relations = {r["name"] for r in sql_json(
        "select table_schema || '.' || table_name as name from information_schema.tables", home / "baseline")}
    assert {f"metrics.{view}" for view in POLICY_VIEWS} <= relations
    assert "marts.fct_gpu_activity" in relations and "marts.fct_host_activity" not in relations
    assert "marts.fct_host_activity" in {r["name"] for r in sql_json(
        "select table_schema || '.' || table_name as name from information_schema.tables", home)}


@pytest.mark.slow
def test_below_the_bar_the_baseline_month_runs_after_the_first_in_this_process(monkeypatch, tmp_path):
    monkeypatch.setattr(beside, "machine_allows", lambda: False)
    result = invoke("demo", "--days", "1", "--gpus", "8", "--seed", "7", home=tmp_path)
    assert result.exit_code == 0, result.output
    assert "for comparison\n" in result.output and "side by side" not in result.output
    table = result.output.partition("of each phase:")[2]
    assert all(f"  {phase} " in table for phase in ("baseline simulate", "baseline ingest", "baseline build"))
    assert "Idle-reclaim policies on vs off" in result.output


@pytest.mark.parametrize(("days", "cpus", "workers"), [
    (MIN_DAYS_FOR_INGEST_WORKERS, 2, 2), (30, 16, 2), (MIN_DAYS_FOR_INGEST_WORKERS - 1, 2, 1), (30, 1, 1),
])
def test_the_demo_ingests_in_two_processes_from_a_week_of_data_on_two_cores(monkeypatch, days, cpus, workers):
    monkeypatch.setattr(duckdb_limits, "machine_cpus", lambda: cpus)
    assert _ingest_workers(days) == workers


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="per-phase peaks need Linux's /proc")
def test_phase_meter_peak_is_the_phases_own():
    meter = PhaseMeter(interval_s=0.01)
    with meter.phase("big"):
        block = bytearray(300 * 2**20)
        block[:: 4096] = b"x" * (len(block) // 4096)  # touch every page: resident, not just reserved
        del block
    with meter.phase("small"):
        pass
    (_, _, big), (_, _, small) = [(name, wall, peak) for name, wall, peak in meter.rows]
    assert big - small > 250 * 2**20, (big, small)
    assert "total" in meter.table(1.0)


@pytest.mark.slow
def test_sql_is_read_only_and_explains_errors(demo_home):
    refused = sql("delete from raw.job_events", demo_home)
    assert refused.exit_code != 0
    assert "read-only" in refused.output.lower()
    bad = sql("select * from metrics.no_such_view", demo_home)
    assert bad.exit_code != 0 and "query failed" in bad.stderr


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
    result = invoke("ingest", "dcgm_text", str(broken), "--date", "2026-11-05", home=home)
    assert "3 read, 1 loaded, 2 quarantined" in result.stdout
    # Two thirds of the batch is bad: the blocking check fails, the models are not rebuilt, and cron hears it.
    assert "2 of 3 records quarantined (67%)" in result.stdout
    assert result.exit_code == 3, result.output
    assert "models not rebuilt" in result.stderr
    reasons = sql_json("select reason from ops.quarantine where source_file like '%broken.prom'", home)
    assert len(reasons) == 2


def test_sql_without_a_warehouse_says_what_to_do(tmp_path):
    result = sql("select 1", tmp_path / "empty")
    assert result.exit_code != 0
    assert "gpupool demo" in result.stderr


@pytest.mark.slow
def test_docs_builds_the_dbt_site_with_the_catalogs_definitions_on_the_views(demo_home, tmp_path):
    out = tmp_path / "site"
    result = invoke("docs", "--out", str(out), "--static", home=demo_home)
    assert result.exit_code == 0, result.output
    assert "python -m http.server" in result.stdout
    assert (out / "index.html").exists() and (out / "static_index.html").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    pool_daily = manifest["nodes"]["model.gpupool.pool_daily"]
    assert "allocated_gpu_hours" in pool_daily["config"]["meta"]["metrics"]
    described = pool_daily["columns"]["allocated_gpu_hours"]["description"]  # the catalog's doc block, rendered
    assert "**Allocated GPU-hours** · 已分配GPU小时" in described and "formula:" in described, described
    catalog = json.loads((out / "catalog.json").read_text())
    assert "model.gpupool.pool_daily" in catalog["nodes"], "column types read from the home's warehouse"
