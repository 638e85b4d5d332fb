"""The idle_reclaim sensor's core (governance_tick), the sensor itself, and the daily policy_findings record."""
from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import polars as pl
import pytest

from pipelines.assets.reclaim import idle_reclaim_sensor, record_day
from pipelines.connectors.allocator import AllocatorClient
from pipelines.contracts import FINDINGS_TABLE, Mode
from pipelines.governance.factory import build_enforcers
from pipelines.governance.outbox import Outbox, read_status
from pipelines.governance.tick import governance_tick, recent_progress
from pipelines.policies.catalog import default_lookback, load_catalog
from pipelines.resources.governance import GovernanceResource
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse
from tests.governance.conftest import BOT, T0, TRAINING, submit
from tests.models.builders import at, build, event, gpu, load, placement, quota, series, simple_job

pytestmark = pytest.mark.slow  # ticks over built warehouses and a live allocator


def test_lookback_covers_the_longest_live_window():
    assert default_lookback(load_catalog()) == dt.timedelta(minutes=130)  # zombie's 120 min + 10


def test_progress_is_each_running_attempts_start_and_its_pulled_events(tmp_path):
    folder = tmp_path / "allocator_events" / T0.date().isoformat()
    folder.mkdir(parents=True)
    records = [
        {"ts": "2026-11-02T08:30:00Z", "type": "checkpoint", "job_id": "j-1", "attempt": 1},
        {"ts": "2026-11-02T06:00:00Z", "type": "submit", "job_id": "j-1", "attempt": 1},  # before the lookback
        {"ts": "2026-11-02T08:40:00Z", "type": "start", "job_id": "j-2", "attempt": 1},  # not running
    ]
    (folder / "api.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"ts": "half')
    jobs = [{"job_id": "j-1", "attempt": 1, "started_at": "2026-11-02T07:00:00Z"}]
    progress = recent_progress(tmp_path, jobs, T0, dt.timedelta(hours=2))
    assert sorted(progress["at"].to_list()) == [dt.datetime(2026, 11, 2, 7), dt.datetime(2026, 11, 2, 8, 30)]


def test_a_tick_against_the_live_allocator_and_one_it_cannot_reach(allocator, tmp_path):
    job = submit(allocator.url, TRAINING)
    outbox = Outbox(tmp_path / "outbox.db", tmp_path / "landing")
    try:
        report = governance_tick(T0, landing=tmp_path / "landing", catalog=load_catalog(), outbox=outbox,
                                 client=AllocatorClient(allocator.url, BOT), enforcers={})
        assert report.ok and report.running_jobs == 1 and report.findings.is_empty()
        assert report.pulled["events"] >= 3  # submit, admit, start
        assert "1 running jobs; findings: none; decisions: none" in str(report)
        assert (tmp_path / "landing/allocator_events/2026-11-02/api.jsonl").exists()

        from pipelines.connectors.http import RetryPolicy

        down = governance_tick(T0, landing=tmp_path / "landing", catalog=load_catalog(), outbox=outbox,
                               client=AllocatorClient("http://127.0.0.1:9", BOT, retry=RetryPolicy(retries=0)),
                               enforcers={})
        assert down.running_jobs is None and not down.ok
        assert "allocator unreadable" in down.summary() and "nothing planned this tick" in down.summary()
        assert job["job_id"]
        # both ticks counted for the metrics exporter: the second one as a failure, with its problem
        tick = read_status(tmp_path / "outbox.db").tick
        assert (tick.runs, tick.failures, tick.consecutive_failures) == (2, 1, 1)
        assert tick.last_at == tick.last_ok_at == T0 and "pull events" in tick.last_problem
    finally:
        outbox.close()


def test_the_sensor_reports_a_config_naming_no_engine_without_crashing(tmp_path):
    config = tmp_path / "gpupool.yml"
    config.write_text("governance:\n  outbox: state/outbox.db\n")
    context = dg.build_sensor_context(resources={
        "governance": GovernanceResource(config_file=str(config)),
        "warehouse": WarehouseResource(home=str(tmp_path / "home")),
    })
    result = idle_reclaim_sensor(context)
    assert isinstance(result, dg.SkipReason)
    assert "idle-reclaim tick failed, nothing decided: ConfigError" in result.skip_message
    assert "no engine to govern" in result.skip_message and "slurm.governance.partitions" in result.skip_message


def test_the_sensor_ticks_on_a_slurm_pool_without_the_allocator(tmp_path, real_data):
    # squeue here answers what the test cluster's squeue --json answered (the recorded sample)
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat {real_data / 'slurm' / 'squeue_json_slurm_22_5_8_gpupool_cluster.json'}\n")
    squeue.chmod(0o755)
    config = tmp_path / "gpupool.yml"
    config.write_text(f"governance:\n  outbox: state/outbox.db\n"
                      f"slurm:\n  squeue: {squeue}\n  governance:\n    partitions: [batch, urgent]\n")
    governance = GovernanceResource(config_file=str(config))
    assert governance.allocator() is None
    warehouse = Warehouse(tmp_path / "home")
    assert set(build_enforcers(config, None, warehouse.landing, tmp_path / "state")) == {"slurm"}
    context = dg.build_sensor_context(resources={
        "governance": governance, "warehouse": WarehouseResource(home=str(tmp_path / "home"))})
    result = idle_reclaim_sensor(context)
    # the sample's three running jobs in scope (the fourth is pending), read and judged; no allocator pulled
    assert "3 running jobs" in result.skip_message and "problems" not in result.skip_message, result.skip_message
    assert "pulled: nothing" in result.skip_message
    assert not (tmp_path / "home/landing/allocator_events").exists()


def test_the_sensor_ticks_against_the_allocator_named_in_the_config(allocator, tmp_path, monkeypatch):
    submit(allocator.url, TRAINING)
    monkeypatch.setenv("TEST_BOT_TOKEN", BOT)
    config = tmp_path / "gpupool.yml"
    config.write_text(f"governance:\n  outbox: state/outbox.db\n  lookback_minutes: 90\n"
                      f"allocator:\n  url: {allocator.url}\n  token: ${{TEST_BOT_TOKEN}}\n")
    governance = GovernanceResource(config_file=str(config))
    assert governance.outbox_path(None) == tmp_path / "state/outbox.db"
    assert governance.lookback() == dt.timedelta(minutes=90)
    context = dg.build_sensor_context(resources={
        "governance": governance, "warehouse": WarehouseResource(home=str(tmp_path / "home"))})
    result = idle_reclaim_sensor(context)
    assert "1 running jobs" in result.skip_message and "problems" not in result.skip_message
    assert (tmp_path / "state/outbox.db").exists()
    assert list((tmp_path / "home/landing/allocator_events").glob("*/api.jsonl"))


def test_slurm_and_kueue_enforcers_join_when_the_config_names_those_engines(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_BOT_TOKEN", BOT)
    config = tmp_path / "gpupool.yml"
    allocator = "allocator:\n  url: http://127.0.0.1:9\n  token: ${TEST_BOT_TOKEN}\n"
    config.write_text(allocator)
    governance = GovernanceResource(config_file=str(config))
    warehouse = Warehouse(tmp_path / "home")
    landing, ledgers = warehouse.landing, governance.outbox_path(warehouse).parent
    assert set(build_enforcers(config, governance.allocator(), landing, ledgers)) == {"allocator"}
    config.write_text(allocator + "slurm:\n  sacct: sacct\n")
    enforcers = build_enforcers(config, governance.allocator(), landing, ledgers)
    assert set(enforcers) == {"allocator", "slurm"} and enforcers["slurm"].engine == "slurm"


@pytest.fixture
def built(warehouse):
    """A day with an idle job (GPU 1 idle an hour), an overrun and a training job without its fields."""
    idle_events, idle_gpus = simple_job("j-idle", "a100-01", 0, at("10:00"), None,
                                        spec={"expected_runtime_s": 86400, "checkpoint_policy": "hourly"})
    idle_gpus.append(idle_gpus[0] | {"gpu": 1})
    bad_events = [event("j-bad", "submit", at("10:00"), tenant="vision", queue="vision-train", template="training",
                        gpu_model="A100", gpus_requested=1, spec_json=json.dumps({"checkpoint_policy": "none"})),
                  event("j-bad", "start", at("10:00")), event("j-bad", "finish", at("10:30"), state="COMPLETED")]
    samples = (series("a100-01", 0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", at("10:00"), 60, 0.8)
               + series("a100-01", 1, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", at("10:00"), 60, 0.0))
    load(warehouse, gpu_inventory=[gpu("a100-01", i) for i in range(4)],
         queue_quotas=[quota("vision-train", "vision", "A100", 4.0, max_runtime_s=172800)],
         job_events=idle_events + bad_events,
         job_gpus=[*idle_gpus, placement("j-bad", 1, "a100-01", 3, at("10:00"))], dcgm_samples=samples)
    build(warehouse).close()
    return warehouse


def test_the_daily_record_replaces_its_day_and_records_the_daily_kinds(built, tmp_path):
    day = at("00:00").date()
    outbox = Outbox(tmp_path / "outbox.db", built.landing, writer="daily")
    try:
        now = dt.datetime(2026, 11, 2, 1, 10)
        first = record_day(built, day, load_catalog(), outbox, now)
        again = record_day(built, day, load_catalog(), outbox, now + dt.timedelta(days=1))
        rows = outbox.rows()
    finally:
        outbox.close()
    assert first.by_policy == again.by_policy
    assert first.by_policy["idle-allocation"] == 1 and first.by_policy["template-breach"] == 1
    # oversized (GPU 1 never busy): a recommendation; template-breach: j-bad had ended, so its
    # reminder is dropped; idle-allocation is the sensor's
    assert first.decisions == {"recommend recommended": 1, "remind dropped": 1}
    assert again.decisions == {}  # decided once
    assert sorted((r["action"], r["status"]) for r in rows) == [("recommend", "recommended"), ("remind", "dropped")]
    with built.connect() as con:
        stored = con.sql(f"select partition_date, policy, job_id, catalog_version from {FINDINGS_TABLE} "
                         "order by policy").pl()
    assert stored.height == first.findings.height  # the rerun replaced the day, not appended to it
    assert stored["partition_date"].unique().to_list() == [day]
    assert set(stored["policy"]) == set(first.by_policy)
    assert stored.filter(pl.col("policy") == "idle-allocation")["job_id"].to_list() == ["j-idle"]
    log = (built.landing / "governance_actions" / "2026-11-02" / "daily.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["policy"] for line in log) == ["oversized", "template-breach"]


def test_the_daily_record_in_enforce_mode_sends_nothing_for_ended_work(built, tmp_path):
    outbox = Outbox(tmp_path / "outbox.db", built.landing, writer="daily")
    try:
        record = record_day(built, at("00:00").date(), load_catalog().with_mode(Mode.ENFORCE), outbox,
                            dt.datetime(2026, 11, 2, 1, 10))
        assert record.decisions == {"recommend recommended": 1, "remind dropped": 1}
        assert not [r for r in outbox.rows() if r["status"] == "queued"]  # nothing for an ended job
    finally:
        outbox.close()
