"""The days a build's microbatch models rebuild (pipelines/build_window.py): each clause of the rule on a
few raw rows and a hand-written previous build (marts.fct_allocations, fct_allocation_segments,
dim_days), no dbt. tests/models/test_late_data.py checks the rule end to end against a full refresh."""
from __future__ import annotations

import datetime as dt

import pytest

from pipelines.build_window import rebuild_window, telemetry_days
from pipelines.clock import utc_naive
from pipelines.warehouse import Warehouse
from tests.models.builders import at, event, load, series, simple_job

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
D = {n: dt.date(2026, 11, n) for n in range(1, 7)}


@pytest.fixture
def wh(tmp_path) -> Warehouse:
    """Telemetry on days 1 to 4 (the data's last day is 4)."""
    wh = Warehouse(tmp_path / "gpupool")
    for n in range(1, 5):
        load(wh, "dcgm_parquet", D[n], dcgm_samples=series("h1", 0, GR, at("12:00", day=n), 2, 0.5))
    return wh


def previous_build(wh: Warehouse, allocations: dict[str, tuple[str, int, int]], as_of: dt.datetime) -> None:
    """The marts as a previous build left them: allocation id -> (job id, first day, last day)."""
    with wh.writer() as con:
        con.execute("create schema if not exists marts")
        con.execute("create table marts.fct_allocations (allocation_id varchar, source varchar, job_id varchar)")
        con.execute("create table marts.fct_allocation_segments (allocation_id varchar, day date)")
        con.execute("create table marts.dim_days (day date, as_of_at timestamp)")
        for allocation_id, (job_id, first, last) in allocations.items():
            con.execute("insert into marts.fct_allocations values (?, 'allocator', ?)", [allocation_id, job_id])
            for n in range(first, last + 1):
                con.execute("insert into marts.fct_allocation_segments values (?, ?)", [allocation_id, D[n]])
        con.execute("insert into marts.dim_days values (?, ?)", [as_of.date(), as_of])


def window(wh: Warehouse, changed: list[int], host: list[int] = ()) -> tuple[dt.date, dt.date]:
    with wh.writer() as con:
        return rebuild_window(con, [D[n] for n in changed], [D[n] for n in host])


def test_the_telemetrys_days_are_the_lake_versions_days_and_what_a_scan_finds(wh):
    load(wh, "node_exporter_parquet", D[5], host_samples=[
        {"host": "h1", "metric": "node_load1", "value": 1.0, "sampled_at": at("00:30", day=5),
         "source": "node_exporter", "source_file": "h1.prom"}])
    # a partition may hold samples of another day (a writer that does not split by day): the samples' days count
    load(wh, "dcgm_text", D[4], dcgm_samples=series("h1", 0, GR, at("23:59", day=5), 3, 0.5))
    with wh.writer() as con:
        recorded = telemetry_days(con)
        assert con.execute("select count(*) from ops.lake_versions where first_day is not null").fetchone()[0] == 2
        con.execute("update ops.lake_versions set first_day = null")  # a view written before the days were recorded
        scanned = telemetry_days(con)
        con.execute("update ops.lake_versions set first_day = ?, last_day = ?", [D[2], D[6]])
        assert telemetry_days(con) == (D[2], D[6])  # what is recorded is what the build reads
    assert recorded == scanned == (D[1], D[6])


def test_telemetry_of_a_day_rebuilds_that_day_alone(wh):
    assert window(wh, [2]) == (D[2], D[3])


def test_host_samples_of_a_day_rebuild_the_day_after_too_while_it_has_data(wh):
    assert window(wh, [2], host=[2]) == (D[2], D[4])
    assert window(wh, [4], host=[4]) == (D[4], D[5])  # day 5 has no data


def test_a_late_end_rebuilds_every_day_the_previous_build_had_the_allocation_running(wh):
    events, placements = simple_job("j1", "h1", 0, at("22:00"), None)
    load(wh, "allocator_events", D[1], job_events=events, job_gpus=placements)
    previous_build(wh, {"a1": ("j1", 1, 4)}, dt.datetime(2026, 11, 5))  # running to the data's end
    load(wh, "allocator_events", D[2], job_events=[event("j1", "finish", at("04:46", day=2), state="COMPLETED")])
    assert window(wh, [2]) == (D[2], D[5])


def test_an_allocation_removed_by_a_re_ingest_rebuilds_its_previous_days(wh):
    previous_build(wh, {"a1": ("gone", 2, 3)}, dt.datetime(2026, 11, 5))
    assert window(wh, [2]) == (D[2], D[4])


def test_a_late_start_rebuilds_up_to_its_end_already_loaded(wh):
    events, placements = simple_job("j1", "h1", 0, at("20:00", day=2), at("03:00", day=3))
    load(wh, "allocator_events", D[3], job_events=[e for e in events if e["event_type"] == "finish"])
    previous_build(wh, {}, dt.datetime(2026, 11, 5))
    load(wh, "allocator_events", D[2], job_events=[e for e in events if e["event_type"] != "finish"],
         job_gpus=placements)
    assert window(wh, [2]) == (D[2], D[4])


def test_a_late_start_still_running_rebuilds_to_the_data_end(wh):
    events, placements = simple_job("j1", "h1", 0, at("20:00", day=2), None)
    previous_build(wh, {}, dt.datetime(2026, 11, 5))
    load(wh, "allocator_events", D[2], job_events=events, job_gpus=placements)
    assert window(wh, [2]) == (D[2], D[5])


def test_a_snapshot_filing_earlier_events_under_its_day_rebuilds_from_their_day(wh):
    events, placements = simple_job("j1", "h1", 0, at("10:00"), at("11:00"))
    load(wh, "slurm_sacct", D[3], job_events=events, job_gpus=placements)  # sacct queried on day 3
    previous_build(wh, {}, dt.datetime(2026, 11, 5))
    assert window(wh, [3]) == (D[1], D[4])


def test_new_data_past_an_end_of_data_within_a_day_rebuilds_from_that_day(wh):
    previous_build(wh, {}, dt.datetime(2026, 11, 3, 12, 2))  # the data ended at 12:02 on day 3
    assert window(wh, [4]) == (D[3], D[5])
    # ended at midnight: the next day alone
    with wh.writer() as con:
        con.execute("update marts.dim_days set as_of_at = timestamp '2026-11-04 00:00'")
    assert window(wh, [4]) == (D[4], D[5])


def test_nothing_changed_or_no_telemetry_is_no_window(tmp_path, wh):
    assert window(wh, []) is None
    empty = Warehouse(tmp_path / "empty")
    with empty.writer() as con:
        assert rebuild_window(con, [D[1]]) is None


def test_a_dagster_run_of_a_day_is_widened_by_the_same_rule(wh):
    import dagster as dg

    from pipelines.assets.marts import _run_window

    events, placements = simple_job("j1", "h1", 0, at("22:00"), None)
    load(wh, "allocator_events", D[1], job_events=events, job_gpus=placements)
    previous_build(wh, {"a1": ("j1", 1, 4)}, dt.datetime(2026, 11, 5))
    load(wh, "allocator_events", D[2], job_events=[event("j1", "finish", at("04:46", day=2), state="COMPLETED")])
    day2 = dg.TimeWindow(dt.datetime(2026, 11, 2, tzinfo=dt.UTC), dt.datetime(2026, 11, 3, tzinfo=dt.UTC))
    with wh.writer() as con:
        assert _run_window(con, day2, full_refresh=False) == (D[2], D[5])
        assert _run_window(con, day2, full_refresh=True) == (D[2], D[3])


def test_the_changed_days_include_rows_merged_into_another_day_without_a_log_row(wh):
    import polars as pl

    from pipelines.build import _changed_days
    from pipelines.contracts import contract

    since = utc_naive()
    load(wh, "dcgm_parquet", D[3], dcgm_samples=series("h1", 0, GR, at("13:00", day=3), 1, 0.5))
    late_sample = {"sampled_at": at("23:59"), "host": "h1", "metric": "node_cpu_seconds_total", "value": 1.0,
                   "cpu": "all", "mode": "user", "source": "node_exporter", "source_file": "day2.prom"}
    frame = contract("host_samples").conform(pl.from_dicts([late_sample]))
    wh.merge_files("node_exporter", D[1], {"host_samples": frame}, ["day2.prom"])  # a day-2 file's day-1 record
    with wh.writer() as con:
        assert _changed_days(con, since) == ([D[1], D[3]], [D[1]])


def test_the_changed_days_include_audit_records_and_decision_log_lines_merged_into_another_day(wh):
    import polars as pl

    from pipelines.build import _changed_days
    from pipelines.contracts import contract

    since = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    record = {"audit_id": "au-1", "occurred_at": at("23:59"), "actor": "admin-1", "action": "enforcement.reclaim",
              "source": "allocator", "source_file": "day2.jsonl"}
    line = {"record": "decision", "occurred_at": at("23:58", day=2), "idempotency_key": "k-1", "finding_id": "f-1",
            "policy": "idle-allocation", "policy_version": "3", "policy_kind": "idle_allocation", "mode": "enforce",
            "engine": "allocator", "attempt": 1, "tenant": "vision",
            "step_index": 0, "action": "reclaim", "job_id": "j1", "status": "queued",
            "api_version": "gpupool.governance/v1", "source_file": "day3.jsonl"}
    # a day-2 file's day-1 audit record, a day-3 file's day-2 decision: merged without a log row
    wh.merge_files("allocator_audit", D[1], {"audit_events": contract("audit_events").conform(pl.from_dicts([record]))},
                   ["day2.jsonl"])
    wh.merge_files("governance_actions", D[2],
                   {"governance_actions": contract("governance_actions").conform(pl.from_dicts([line]))}, ["day3.jsonl"])
    with wh.writer() as con:
        assert _changed_days(con, since) == ([D[1], D[2]], [])
