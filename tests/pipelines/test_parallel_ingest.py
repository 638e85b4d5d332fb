"""`gpupool ingest all LANDING --workers 2` (the ingest_backfill job, one process per (source, day))
loads the same rows as the ingest assets in one process (what `--workers 1` runs, and the demo): the raw
tables, the quarantine and the ingest log per (source, day), no duplicated telemetry, and the partitions
really ran in more than one process at the same time."""
from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from pipelines.assets.backfill import JOB_NAME
from pipelines.contracts import contract
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow  # an ingest of 3 days through the CLI: about a minute

GPUPOOL = str(Path(sys.executable).parent / "gpupool")
DAYS = 3  # the small demo's
# The simulator's samples are not unique on (time, host, gpu, metric): duplicates are counted against
# the one-process ingest, not against zero.
SAMPLE_KEY = "sampled_at, host, gpu, gpu_instance_id, uuid, metric, value, ingest_source"


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory, small_demo_home: Path) -> dict[int, Path]:
    """The small demo's landing zone (3 days) ingested in one process (the demo's own home, shared by
    the test run: read only) and with 2 workers (a home of its own)."""
    home = tmp_path_factory.mktemp("parallel-ingest") / "workers-2"
    done = subprocess.run([GPUPOOL, "ingest", "all", str(small_demo_home / "landing"), "--home", str(home),
                           "--workers", "2", "--no-build"], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr + done.stdout
    return {1: small_demo_home, 2: home}


def _counts(home: Path) -> dict[str, list[tuple]]:
    raw_tables = sorted({contract(t).table for src in SOURCES.values() for t in src.tables})
    with Warehouse(home).connect(read_only=True) as con:
        out = {
            table: con.execute(f"select ingest_source, partition_date, count(*) from {table} "
                               "group by all order by all").fetchall()
            for table in [*raw_tables, "ops.quarantine"]
        }
        out["ops.ingest_log"] = con.execute(
            "select ingest_source, partition_date, count(*), sum(files_read), sum(records_read), "
            "sum(records_loaded), sum(records_quarantined) from ops.ingest_log group by all order by all").fetchall()
        out["distinct samples"] = con.execute(
            f"select partition_date, count(*), count(distinct ({SAMPLE_KEY})) from raw.dcgm_samples "
            "group by all order by all").fetchall()
    return out


def test_two_workers_load_what_one_loads(homes: dict[int, Path]) -> None:
    one, two = _counts(homes[1]), _counts(homes[2])
    assert one["raw.dcgm_samples"], "the simulated landing loaded no telemetry"
    assert len(one["ops.ingest_log"]) == DAYS * len({row[0] for row in one["ops.ingest_log"]})
    for table in one:
        assert two[table] == one[table], table


def test_partitions_ran_in_parallel_processes(homes: dict[int, Path]) -> None:
    with dg.DagsterInstance.local_temp(str(homes[2] / "dagster")) as instance:
        [run] = instance.get_runs(dg.RunsFilter(job_name=JOB_NAME))
        assert run.status == dg.DagsterRunStatus.SUCCESS
        events = [r for r in instance.all_logs(run.run_id) if r.dagster_event
                  and (r.step_key or "").startswith("ingest_chunk")]
    pids = {e.dagster_event.event_specific_data.metadata["pid"].value for e in events
            if e.dagster_event.event_type_value == "STEP_WORKER_STARTED"}
    spans: dict[str, list[float]] = {}
    for e in events:
        if e.dagster_event.event_type_value in ("STEP_START", "STEP_SUCCESS"):
            spans.setdefault(e.step_key, []).append(e.timestamp)
    assert len(spans) == 2 and len(pids) == len(spans)  # one process per run of days
    intervals = sorted(tuple(s) for s in spans.values())
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(intervals)), \
        "the two runs of days were not loading at the same time"
    assert run.run_config["execution"]["config"]["max_concurrent"] == 2
