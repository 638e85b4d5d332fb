"""Running work behind one interface (pipelines/governance/running.py): Slurm's `squeue --json` read
into the allocator API's job_view, and a tick over two engines at once.

The squeue document is what the real Slurm 22.05.8 of scripts/slurm-up.sh answered
(tests/fixtures/real-data/slurm/squeue_json_slurm_22_5_8_gpupool_cluster.json, see PROVENANCE.md):
job 73 (batch, account vision, 2 GPUs IDX 3-4, --comment=gpupool:training, 120 min), 74 (urgent,
nlp, IDX 0-2, 30 min), 75 (batch, platform, IDX 5, requeued once: restart_cnt 1) running; 76
pending. They started at 07:18:17 and 07:18:31 (75's second attempt) UTC on 2026-12-03.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest

from pipelines.config import ConfigError
from pipelines.connectors.slurm import CommandResult, SlurmCommandError, SlurmConfig, SlurmGovernance
from pipelines.contracts import DecisionStatus, StepAction
from pipelines.governance.factory import build_readers
from pipelines.governance.live import SAMPLE_SCHEMA, SCRAPE_SOURCE, allocations_from_jobs
from pipelines.governance.outbox import Outbox
from pipelines.governance.running import AllocatorWork, SlurmWork, slurm_running_work
from pipelines.governance.tick import governance_tick
from pipelines.policies.inputs import ALLOCATION_SCHEMA
from tests.conftest import REAL_DATA
from tests.governance.conftest import Recorder, catalog

SQUEUE = REAL_DATA / "slurm" / "squeue_json_slurm_22_5_8_gpupool_cluster.json"


def squeue_started_before(now: dt.datetime, folder: Path, ago: dt.timedelta = dt.timedelta(minutes=40)) -> Path:
    """SQUEUE with its times moved so that its first job started `ago` before `now`, written in `folder`:
    for tests on the real clock, whose jobs must run well inside their limits whatever the day (the
    recorded jobs ran past them a day after the recording)."""
    doc = json.loads(SQUEUE.read_text())
    shift = int((now - ago).replace(tzinfo=dt.UTC).timestamp()) - doc["jobs"][0]["start_time"]
    for job in doc["jobs"]:
        for key, value in job.items():
            if key.endswith("_time") and key != "time_limit" and isinstance(value, int) and value > 0:
                job[key] = value + shift
    moved = folder / SQUEUE.name
    moved.write_text(json.dumps(doc))
    return moved
SCOPE = SlurmGovernance(partitions=["batch", "urgent"], template_by_partition={"urgent": "interactive"})
GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def recorded() -> dict:
    return json.loads(SQUEUE.read_bytes())


def by_id(work) -> dict[str, dict]:
    return {j["job_id"]: j for j in work.jobs}


def test_running_jobs_of_the_real_squeue_as_job_views():
    work = slurm_running_work(SQUEUE.read_bytes(), SCOPE)
    assert work.source == "slurm" and not work.skipped and work.queues == []
    jobs = by_id(work)
    assert set(jobs) == {"73", "74", "75"}  # 76 is pending
    train = jobs["73"]
    assert (train["user"], train["tenant"], train["queue"], train["attempt"]) == ("root", "vision", "batch", 1)
    assert [(g["host"], g["gpu"]) for g in train["gpus"]] == [("localhost", 3), ("localhost", 4)]
    assert train["started_at"] == "2026-12-03T07:18:17Z" and train["ended_at"] is None
    assert train["spec"]["template"] == "training"  # the Comment marker
    assert train["spec"]["expected_runtime_s"] == train["spec"]["time_limit_s"] == 7200
    assert jobs["74"]["spec"]["template"] == "interactive"  # the partition's
    assert [g["gpu"] for g in jobs["74"]["gpus"]] == [0, 1, 2]
    requeued = jobs["75"]
    assert (requeued["attempt"], requeued["tenant"], requeued["started_at"]) == (2, "platform", "2026-12-03T07:18:31Z")
    assert requeued["spec"]["template"] is None  # nothing names one, no default

    allocations = allocations_from_jobs(work.jobs, {}, source="slurm")
    assert allocations.filter(pl.col("job_id") == "75")["allocation_id"].to_list() == ["slurm:75:2:localhost/5"]
    assert allocations["source"].unique().to_list() == ["slurm"] and allocations["is_running"].all()


def test_a_start_written_with_an_offset_is_read_as_the_same_moment_in_utc():
    """A reader or API that writes its times with an offset instead of Z: the allocation starts at the
    same moment in UTC (the offset converted, not dropped), beside one written with Z."""
    work = slurm_running_work(SQUEUE.read_bytes(), SCOPE)
    offset = [dict(job, started_at="2026-12-03T09:18:17+02:00") if job["job_id"] == "73" else job
              for job in work.jobs]
    allocations = allocations_from_jobs(offset, {}, source="slurm")
    started = dict(allocations.select("job_id", "started_at").unique().iter_rows())
    assert started["73"] == dt.datetime(2026, 12, 3, 7, 18, 17)
    assert started["75"] == dt.datetime(2026, 12, 3, 7, 18, 31)


def test_records_with_parts_missing_give_one_row_per_placed_gpu():
    """A record without GPUs (none, an empty list) gives no row, a null entry in its list is skipped, a
    record without spec gives null spec fields, and the queue's limits come from the queues by name."""
    jobs = [{"job_id": "1", "attempt": 1, "queue": "batch", "state": "RUNNING", "started_at": "2026-12-03T07:18:17Z",
             "gpus": [{"host": "n1", "gpu": 0}, None, {"host": "n1", "gpu": 1, "gpu_instance_id": 3, "fraction": 0.5}]},
            {"job_id": "2", "attempt": 1, "queue": "batch", "gpus": None},
            {"job_id": "3", "attempt": 1, "queue": "urgent", "gpus": [],
             "spec": {"template": "training", "expected_runtime_s": 60}}]
    allocations = allocations_from_jobs(jobs, {"batch": {"max_runtime_s": 3600, "low_priority": True}}, source="slurm")
    assert allocations.select("allocation_id", "fraction", "max_runtime_s", "queue_low_priority", "template",
                              "is_running").rows() == [
        ("slurm:1:1:n1/0", 1.0, 3600, True, None, True), ("slurm:1:1:n1/1/3", 0.5, 3600, True, None, True)]
    assert {name: dtype for name, dtype in allocations.schema.items() if name in ALLOCATION_SCHEMA} == {
        name: dtype for name, dtype in ALLOCATION_SCHEMA.items() if name != "evaluated_at"}
    assert allocations_from_jobs([]).schema == allocations.schema


def test_only_the_partitions_in_scope_are_read_and_the_queue_may_be_the_qos():
    scope = SlurmGovernance(partitions=["batch"], queue_from="qos", template_by_qos={"normal": "experiment"},
                            template_by_partition={"batch": "training"}, template_comment_prefix=None)
    jobs = by_id(slurm_running_work(SQUEUE.read_bytes(), scope))
    assert set(jobs) == {"73", "75"}  # 74 runs in urgent
    assert {j["queue"] for j in jobs.values()} == {"normal"}
    assert {j["spec"]["template"] for j in jobs.values()} == {"experiment"}  # QOS before partition, no marker


def test_an_unlimited_time_limit_is_no_expected_run_time():
    doc = recorded()
    doc["jobs"][0]["time_limit"] = 4294967295  # INFINITE in 22.05's plain numbers
    assert by_id(slurm_running_work(json.dumps(doc), SCOPE))["73"]["spec"]["expected_runtime_s"] is None


def test_malformed_jobs_are_skipped_and_counted_by_reason():
    doc = recorded()
    doc["jobs"][0]["gres_detail"] = ["gpu:2(IDX:4-3)"]
    doc["jobs"][1]["restart_cnt"] = "twice"
    doc["jobs"].append(["not", "a", "job"])
    doc["jobs"].append({**doc["jobs"][2], "job_id": 77, "start_time": 0})
    work = slurm_running_work(json.dumps(doc), SCOPE)
    assert set(by_id(work)) == {"75"}
    assert sum(work.skipped.values()) == 4
    assert any("bad index range" in reason for reason in work.skipped)
    assert any("restart_cnt" in reason for reason in work.skipped)
    assert any("RUNNING without a start_time" in reason for reason in work.skipped)


def test_a_document_that_is_not_squeues_raises():
    with pytest.raises(ValueError, match="invalid JSON document"):
        slurm_running_work(b"slurm_load_jobs error: Unable to contact slurm controller", SCOPE)


class Squeue:
    """squeue as a runner: answers a document (or fails) and remembers the command lines."""

    def __init__(self, doc: dict | None):
        self.doc, self.calls = doc, []

    def __call__(self, argv, timeout_s):
        self.calls.append(tuple(argv))
        if self.doc is None:
            return CommandResult(tuple(argv), 1, b"", "slurm_load_jobs error: Unable to contact slurm controller")
        return CommandResult(tuple(argv), 0, json.dumps(self.doc).encode(), "")


def test_the_slurm_reader_runs_squeue_and_needs_a_scope():
    squeue = Squeue(recorded())
    work = SlurmWork(SlurmConfig(governance=SCOPE), run=squeue).read()
    assert squeue.calls == [("squeue", "--json", "--states=RUNNING")] and len(work.jobs) == 3
    with pytest.raises(SlurmCommandError, match="Unable to contact"):
        SlurmWork(SlurmConfig(governance=SCOPE), run=Squeue(None)).read()
    with pytest.raises(ValueError, match="slurm.governance is not set"):
        SlurmWork(SlurmConfig())


# --- a tick over the allocator and Slurm at once --------------------------------------------------

START = dt.datetime(2026, 12, 3, 7, 19)
ALLOCATOR_JOB = {
    "job_id": "j-000001", "attempt": 1, "tenant": "vision", "queue": "vision-train", "user": "vic",
    "state": "RUNNING", "started_at": "2026-12-03T07:10:00Z", "ended_at": None,
    "gpus": [{"host": "a100-01", "gpu": 0, "fraction": 1.0}],
    "spec": {"template": "training", "expected_runtime_s": 86400, "share_mode": "whole", "gpu_model": "A100"},
}


class Allocator:
    def __init__(self):
        self.jobs = [ALLOCATOR_JOB]

    def running_jobs(self):
        return self.jobs

    def queues(self):
        return [{"name": "vision-train", "max_runtime_s": 172800, "low_priority": False}]


def land_rounds(landing, minutes: int) -> None:
    """One round a minute from 07:19: Slurm's localhost GPUs 0-2 (job 74) busy, 3-5 (jobs 73 and
    75) idle; the allocator's a100-01 GPU 0 idle."""
    folder = landing / SCRAPE_SOURCE / START.date().isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    for m in range(minutes):
        t = START + dt.timedelta(minutes=m, seconds=10)
        rows = [(t, "localhost", gpu, None, GR, 0.9 if gpu < 3 else 0.0) for gpu in range(8)]
        rows.append((t, "a100-01", 0, None, GR, 0.0))
        pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row").write_parquet(
            folder / f"scrape-{t:%H%M%S}-r{m}.parquet")


def idle_catalog():
    """The governance tests' catalog with the idle rule's remaining parameters set."""
    cat = catalog()
    idle = cat.policies["idle-allocation"]
    params = {**idle.params, "spike_max_minutes": 2, "min_coverage": 0.8}
    return dataclasses.replace(cat, policies={**cat.policies, "idle-allocation": dataclasses.replace(idle, params=params)})


def test_a_tick_over_two_engines_matches_findings_and_ended_jobs_per_engine(tmp_path):
    landing = tmp_path / "landing"
    land_rounds(landing, 62)
    cat, lookback = idle_catalog(), dt.timedelta(minutes=60)
    squeue = Squeue(recorded())
    engines = [AllocatorWork(Allocator()), SlurmWork(SlurmConfig(governance=SCOPE), run=squeue)]
    outbox = Outbox(tmp_path / "outbox.db", landing)
    # both engines accept every action: the reminds go out, so the reclaims after them fall due
    enforcers = {"allocator": Recorder(), "slurm": Recorder()}
    try:
        first = governance_tick(dt.datetime(2026, 12, 3, 8, 0), landing=landing, catalog=cat, outbox=outbox,
                                client=None, enforcers=enforcers, lookback=lookback, work=engines)
        assert not first.errors and first.running_by_source == {"allocator": 1, "slurm": 3}
        assert "4 running jobs (allocator 1, slurm 3)" in first.summary()
        found = sorted(first.findings.select("source", "job_id", "attempt").iter_rows())
        assert found == [("allocator", "j-000001", 1), ("slurm", "73", 1), ("slurm", "75", 2)]  # 74 is busy
        assert first.decisions == {"remind queued": 3}

        # 75 ends in Slurm; the reclaims of the others fall due after the grace
        squeue.doc = recorded()
        squeue.doc["jobs"] = [j for j in squeue.doc["jobs"] if j["job_id"] != 75]
        second = governance_tick(dt.datetime(2026, 12, 3, 8, 20), landing=landing, catalog=cat, outbox=outbox,
                                 client=None, enforcers=enforcers, lookback=lookback, work=engines)
        reclaims = {(r["engine"], r["job_id"]): r for r in outbox.rows() if r["action"] == StepAction.RECLAIM.value}
        assert reclaims[("slurm", "75")]["status"] == DecisionStatus.DROPPED.value
        assert "no longer found when the reclaim was due" in json.loads(reclaims[("slurm", "75")]["planned_json"])["status_reason"]
        assert reclaims[("slurm", "73")]["outcome"] == reclaims[("allocator", "j-000001")]["outcome"] == "applied"
        assert second.running_jobs == 3

        # Slurm unreadable: the allocator's work is still planned, Slurm's findings are left alone
        squeue.doc = None
        third = governance_tick(dt.datetime(2026, 12, 3, 8, 21), landing=landing, catalog=cat, outbox=outbox,
                                client=None, enforcers=enforcers, lookback=lookback, work=engines)
        assert third.running_by_source == {"allocator": 1, "slurm": None} and third.running_jobs == 1
        assert "running jobs (slurm): SlurmCommandError" in third.summary()
        assert "nothing planned this tick for slurm" in third.summary()
        assert not [r for r in outbox.rows() if r["engine"] == "slurm" and r["decided_at"] >= "2026-12-03T08:21"]
        assert {p.job_id for p in outbox.open_findings(dt.datetime(2026, 12, 3))} >= {"73", "j-000001"}
    finally:
        outbox.close()


def test_the_factory_reads_slurm_only_where_its_governance_section_names_partitions(tmp_path):
    config = tmp_path / "gpupool.yml"
    config.write_text("slurm:\n  sacct: sacct\n")
    client = Allocator()
    assert [r.source for r in build_readers(config, client, tmp_path)] == ["allocator"]
    config.write_text("slurm:\n  governance:\n    partitions: [batch]\n    queue_from: qos\n")
    readers = build_readers(config, client, tmp_path)
    assert [r.source for r in readers] == ["allocator", "slurm"] and readers[1].scope.queue_from == "qos"
    config.write_text("slurm:\n  governance:\n    partitions: []\n")
    with pytest.raises(ConfigError, match="partitions"):
        build_readers(config, client, tmp_path)
