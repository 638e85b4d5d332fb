"""Against the real one-node cluster: a preemption, a cancel, and their accounting through the pipeline.

One scenario for the module: train-x (batch, --requeue, 6 GPUs) runs; urgent-y (urgent, 4 GPUs)
preempts it; x is requeued; y is cancelled; x starts again (attempt 2; about 10 s after the
requeue, the test cluster's cred_expire) and is cancelled.
"""
from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass

import polars as pl
import pytest
import requests

from pipelines.build import build
from pipelines.connectors.slurm import (
    LiveAccounting,
    SlurmConfig,
    land,
    run_command,
    squeue_command,
)
from pipelines.ingest import ingest_partition
from pipelines.resources.slurm import SlurmAccounting
from pipelines.sources.slurm_sacct import parse_sacct_json, parse_sacct_parsable2
from pipelines.sources.slurm_squeue import parse_squeue_job_gpus, slurm_number
from tests.slurm.conftest import REST_URL, STATE, SlurmCluster, slurm

SETTLE_S = 3  # how long the job to be preempted runs first (the scenario)

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Scenario:
    day: dt.date
    x: str  # preempted, requeued, run again, cancelled
    y: str  # the urgent job that preempted x, then cancelled
    squeue_while_y_ran: bytes
    job_map_while_y_ran: dict[int, list[str]]  # dcgm-exporter job mapping: GPU index → job ids
    job_map_when_x_ran_again: dict[int, list[str]]


def _is_time(value: str) -> bool:
    return value[:2] == "20"  # not Unknown / None


def _job_map() -> dict[int, list[str]]:
    return {int(p.name): p.read_text().split() for p in (STATE / "hpc-job-map").glob("[0-9]*")}


@pytest.fixture(scope="module")
def scenario(slurm_cluster: SlurmCluster) -> Scenario:
    c = slurm_cluster
    c.cancel_all()
    day = dt.datetime.now(dt.UTC).date()
    x = c.submit(partition="batch", gpus=6, requeue=True, name="train-x")
    c.wait_running(x)
    # preempt x only once accounting has its start: on a loaded machine a job preempted within a second
    # or two of its allocation was accounted with no start for that attempt
    c.wait_accounted(x, lambda rows: len(rows) == 1 and _is_time(rows[0]["start"]), "started")
    # and once it has run a few seconds: in CI a job preempted 2 s after its start, its start already in
    # sacct, was still accounted with none (the requeue archives the attempt as slurmctld last knew it)
    started = slurm_number(c.job(x)["start_time"], "start_time")
    c.wait_for(f"job {x} to run {SETTLE_S} s", lambda: time.time() - started >= SETTLE_S, SETTLE_S + 10)
    y = c.submit(partition="urgent", gpus=4, account="nlp", name="urgent-y")
    c.wait_running(y)
    c.wait_for(f"job {x} to be requeued by the preemption",
               lambda: (job := c.job(x)) is not None and c.state(x) == "PENDING" and job["restart_cnt"] == 1)
    squeue = run_command(squeue_command(SlurmConfig()), 30).stdout
    job_map = _job_map()
    c.cancel(y)
    # a requeued job may start again once its credential expired (cred_expire: 10 s in the test cluster)
    c.wait_running(x, timeout_s=45)
    # slurmd runs the prolog as the job starts: give it a moment to write the mapping
    c.wait_for(f"the prolog to map job {x}", lambda: sum(x in jobs for jobs in _job_map().values()) == 6, 10)
    job_map_again = _job_map()
    c.cancel(x)
    c.wait_accounted(x, lambda rows: len(rows) == 2 and rows[1]["state"].startswith("CANCELLED")
                     and all(_is_time(r["start"]) and _is_time(r["end"]) for r in rows),
                     "with two attempts, both started and ended, the second cancelled")
    c.wait_accounted(y, lambda rows: len(rows) == 1 and rows[0]["state"].startswith("CANCELLED")
                     and _is_time(rows[0]["end"]), "cancelled")
    return Scenario(day, x, y, squeue, job_map, job_map_again)


def test_the_cluster_has_eight_gpus_and_two_partitions(slurm_cluster):
    partitions = {line.split()[0].rstrip("*"): line.split()[1]
                  for line in slurm("sinfo", "-h", "-o", "%P %G").splitlines()}
    assert partitions == {"batch": "gpu:8", "urgent": "gpu:8"}


def test_sacct_ingest_shows_the_preemption_the_requeue_and_the_cancel(scenario, warehouse, tmp_path):
    config_file = tmp_path / "gpupool.yml"
    config_file.write_text("slurm:\n  accounting: [sacct, sacct_json]\n  command_timeout_s: 20\n")
    landed = SlurmAccounting(config_file=str(config_file)).land_day(warehouse.landing, scenario.day)
    assert sorted(p.relative_to(warehouse.landing).as_posix() for p in landed) == [
        f"slurm_sacct/{scenario.day}/sacct.txt", f"slurm_sacct_json/{scenario.day}/sacct.json"]

    for source in ("slurm_sacct", "slurm_sacct_json"):
        report = ingest_partition(warehouse, source, scenario.day)
        assert report.records_loaded >= 3, report.summary()  # x twice (both attempts), y
    with warehouse.connect() as con:
        quarantined = con.execute("select raw from ops.quarantine").fetchall()
    ours = [raw for (raw,) in quarantined if raw and raw.split("|")[0] in (scenario.x, scenario.y)]
    assert ours == []
    build(warehouse)
    with warehouse.connect() as con:
        attempts = con.execute(
            "select a.job_id, a.attempt, j.queue, j.tenant, j.gpus_requested, a.started_at is not null, "
            "a.end_event_type, a.end_state from marts.fct_job_attempts a join marts.dim_jobs j using (source, job_id) "
            "where a.source = 'slurm' and a.job_id in (?, ?) order by a.job_id, a.attempt",
            [scenario.x, scenario.y]).fetchall()
        events = con.execute(
            "select attempt, event_type, state from staging.stg_scheduler__job_events "
            "where source = 'slurm' and job_id = ? order by attempt, occurred_at, "
            "list_position(['submit', 'admit', 'start', 'preempt', 'requeue', 'finish'], event_type)",
            [scenario.x]).fetchall()
    by_job = {(job, attempt): rest for job, attempt, *rest in attempts}
    assert len(by_job) == 3, f"attempts {attempts}; events of {scenario.x}: {events}"
    assert by_job[(scenario.x, 1)] == ["batch", "vision", 6, True, "preempt", "PREEMPTED"]
    assert by_job[(scenario.x, 2)] == ["batch", "vision", 6, True, "finish", "CANCELLED"]
    assert by_job[(scenario.y, 1)] == ["urgent", "nlp", 4, True, "finish", "CANCELLED"]
    assert events == [(1, "submit", "PENDING"), (1, "admit", "PENDING"), (1, "start", "RUNNING"),
                      (1, "preempt", "PREEMPTED"),
                      (2, "admit", "PENDING"), (2, "start", "RUNNING"), (2, "finish", "CANCELLED")]


def test_sacct_json_and_slurmrestd_give_the_same_events(scenario):
    try:
        requests.get(f"{REST_URL}/slurm/v0.0.38/ping", timeout=5).raise_for_status()
    except requests.RequestException as error:
        pytest.fail(f"slurmrestd is not reachable at {REST_URL} (scripts/slurm-up.sh starts it): {error}")
    config = SlurmConfig(accounting=["sacct", "sacct_json", "slurmrestd"], restd_url=REST_URL)
    deliveries = {d.filename: d.data for d in LiveAccounting(config).fetch(scenario.day)}
    assert json.loads(deliveries["slurmrestd.json"])["meta"]["Slurm"]["release"].startswith("22.05")

    def events(parsed) -> set:
        frame = parsed.tables["job_events"].filter(pl.col("job_id").is_in([scenario.x, scenario.y]))
        return set(frame.select("job_id", "attempt", "event_type", "occurred_at", "state").iter_rows())

    text = events(parse_sacct_parsable2(deliveries["sacct.txt"], "sacct.txt"))
    assert events(parse_sacct_json(deliveries["sacct.json"], "sacct.json")) == text
    assert events(parse_sacct_json(deliveries["slurmrestd.json"], "slurmrestd.json")) == text
    assert {(j, a, e) for j, a, e, _, _ in text} >= {(scenario.x, 1, "preempt"), (scenario.x, 2, "finish"),
                                                     (scenario.y, 1, "finish")}


def test_running_jobs_gpu_indices_match_the_dcgm_exporter_job_mapping(scenario):
    parsed = parse_squeue_job_gpus(scenario.squeue_while_y_ran, "squeue.json")
    assert parsed.quarantine.height == 0
    gpus = parsed.tables["job_gpus"]
    assert scenario.x not in gpus["job_id"].to_list()  # requeued: pending, no placement
    y_rows = gpus.filter(pl.col("job_id") == scenario.y)
    assert y_rows["attempt"].to_list() == [1] * 4
    assert y_rows["host"].unique().to_list() == ["localhost"]
    indices = sorted(y_rows["gpu"].to_list())
    assert len(set(indices)) == 4 and all(0 <= i < 8 for i in indices)
    # the prolog wrote the same GPUs for dcgm-exporter's hpc_job label, and the epilog removed them
    assert sorted(i for i, jobs in scenario.job_map_while_y_ran.items() if scenario.y in jobs) == indices
    again = scenario.job_map_when_x_ran_again
    assert not any(scenario.y in jobs for jobs in again.values())
    assert sum(scenario.x in jobs for jobs in again.values()) == 6


def test_the_day_lands_again_with_what_changed(scenario, warehouse):
    """A second fetch of the day replaces its files (the ingest then replaces the partition)."""
    config = SlurmConfig(accounting=["sacct"])
    first = land(warehouse.landing, scenario.day, LiveAccounting(config).fetch(scenario.day))
    second = land(warehouse.landing, scenario.day, LiveAccounting(config).fetch(scenario.day))
    assert first == second
    assert [p.name for p in first[0].parent.iterdir()] == ["sacct.txt"]
    assert scenario.x in first[0].read_text()
