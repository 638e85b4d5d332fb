"""Incremental marts cost what changed: a build after a new day rebuilds the rows the window reaches and
keeps the others as they are. Each test marks rows of a unit outside the window (an update in the
warehouse), ingests a day, builds, and finds the marks kept while the window's rows are rebuilt."""
from __future__ import annotations

import datetime as dt

import pytest

from pipelines.warehouse import Warehouse
from tests.models.builders import DAY1, at, build, gpu, load, rows, series, simple_job

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


# -- allocation marts: dim_jobs, fct_allocations and the marts that read it -------------------------
DAY2 = DAY1 + dt.timedelta(days=1)
HOSTS = [gpu("a100-01", 0), gpu("a100-01", 1), gpu("a100-01", 2)]


def _day1(warehouse: Warehouse) -> None:
    """Day 1: 'old' on GPU 0 10:00-11:00, idle; GPU 0 busy for nobody 15:00-15:40; 'blind' on GPU 2
    13:00-14:00 without telemetry; 'long' on GPU 1 from 12:00, still running (sampled from then). GPU 0
    sampled until 23:59: the data's end is day 2's midnight, so day 2's build opens the window at day 2."""
    old_events, old_gpus = simple_job("old", "a100-01", 0, at("10:00"), at("11:00"))
    blind_events, blind_gpus = simple_job("blind", "a100-01", 2, at("13:00"), at("14:00"))
    long_events, long_gpus = simple_job("long", "a100-01", 1, at("12:00"), None)
    gpu0 = series("a100-01", 0, GR, at("00:00"), 1440, 0.0)
    for sample in gpu0[15 * 60:15 * 60 + 40]:
        sample["value"] = 1.0
    load(warehouse, gpu_inventory=HOSTS, job_events=old_events + blind_events + long_events,
         job_gpus=old_gpus + blind_gpus + long_gpus,
         dcgm_samples=gpu0 + series("a100-01", 1, GR, at("12:00"), 720, 0.5))


def _mark_every_allocation_mart(warehouse: Warehouse) -> None:
    """A mark on every row of the allocation marts: a rebuilt row loses it."""
    with warehouse.writer() as con:
        for table, column in [
            ("dim_jobs", "job_name"), ("fct_allocations", "user_name"), ("fct_idle_windows", "policy_scope"),
            ("fct_telemetry_reconciliation", "detail"),
        ]:
            con.execute(f"update marts.{table} set {column} = 'marked'")
        for table, column in [
            ("fct_allocation_segments", "allocated_hours"), ("fct_allocation_daily", "idle_gpu_hours"),
            ("fct_allocation_usage", "active_gpu_hours"), ("fct_allocation_steps", "allocated_gpus"),
            ("fct_allocation_levels", "hours"),
        ]:
            con.execute(f"update marts.{table} set {column} = -1")


def _marked(con, table: str, column: str, key: str) -> dict[str, bool]:
    """key -> whether every row of it still carries the mark."""
    mark = "'marked'" if column in ("job_name", "user_name", "policy_scope", "detail") else "-1"
    return dict(con.execute(
        f"select {key}, bool_and({column} is not distinct from {mark}) from marts.{table} group by 1 order by 1"
    ).fetchall())


@pytest.mark.slow
def test_allocation_marts_keep_work_that_ended_before_the_window_and_rebuild_the_rest(warehouse: Warehouse):
    _day1(warehouse)
    build(warehouse).close()
    _mark_every_allocation_mart(warehouse)

    # day 2: GPU 1 still held by 'long'; GPU 0 busy for nobody 09:00-09:30
    gpu0 = series("a100-01", 0, GR, at("09:00", day=2), 30, 1.0)
    load(warehouse, ingest="day2", day=DAY2,
         dcgm_samples=gpu0 + series("a100-01", 1, GR, at("00:00", day=2), 600, 0.5))
    con = build(warehouse)

    # the jobs that ended on day 1 keep every row; the running one is rebuilt whole, day 1 included
    kept = {"old": True, "blind": True, "long": False}
    assert _marked(con, "dim_jobs", "job_name", "job_id") == kept
    assert _marked(con, "fct_allocations", "user_name", "job_id") == kept
    allocation_marks = {
        table: _marked(con, table, column, "split_part(allocation_id, ':', 2)")
        for table, column in [("fct_allocation_segments", "allocated_hours"),
                              ("fct_allocation_daily", "idle_gpu_hours"),
                              ("fct_allocation_usage", "active_gpu_hours")]
    }
    assert allocation_marks == {table: kept for table in allocation_marks}
    assert _marked(con, "fct_idle_windows", "policy_scope", "job_id") == {"old": True}
    long_days = rows(con, "select day, allocated_hours, telemetry_minutes from marts.fct_allocation_daily "
                          "where job_id = 'long' order by day")
    assert long_days == [{"day": DAY1, "allocated_hours": pytest.approx(12.0), "telemetry_minutes": 720},
                         {"day": DAY2, "allocated_hours": pytest.approx(10.0), "telemetry_minutes": 600}]

    # findings: an allocation's by allocation, a GPU's busy minutes by day
    findings = rows(con, "select finding, day, job_id, detail = 'marked' as is_marked "
                         "from marts.fct_telemetry_reconciliation order by day, finding")
    assert findings == [
        {"finding": "allocation_without_telemetry", "day": DAY1, "job_id": "blind", "is_marked": True},
        {"finding": "busy_unallocated", "day": DAY1, "job_id": None, "is_marked": True},
        {"finding": "busy_unallocated", "day": DAY2, "job_id": None, "is_marked": False},
    ]

    # the GPUs held: steps that ended before the window are kept, the one the window cuts keeps its
    # start (the end of 'blind', an allocation the build did not read) and runs to the new data's end
    steps = rows(con, "select level_start_at, level_end_at, allocated_gpus from marts.fct_allocation_steps "
                      "where level_scope = 'pool' order by level_start_at")
    assert steps == [
        {"level_start_at": at("10:00"), "level_end_at": at("11:00"), "allocated_gpus": -1},
        {"level_start_at": at("12:00"), "level_end_at": at("13:00"), "allocated_gpus": -1},
        {"level_start_at": at("13:00"), "level_end_at": at("14:00"), "allocated_gpus": -1},
        {"level_start_at": at("14:00"), "level_end_at": at("10:00", day=2), "allocated_gpus": 1.0},
    ]
    levels = dict(con.execute("select day, bool_and(hours = -1) from marts.fct_allocation_levels "
                              "group by day").fetchall())
    assert levels == {DAY1: True, DAY2: False}
    con.close()


@pytest.mark.slow
def test_a_job_a_correction_removes_leaves_no_row_in_the_allocation_marts(warehouse: Warehouse):
    _day1(warehouse)
    build(warehouse).close()

    old_events, old_gpus = simple_job("old", "a100-01", 0, at("10:00"), at("11:00"))
    long_events, long_gpus = simple_job("long", "a100-01", 1, at("12:00"), None)
    load(warehouse, job_events=old_events + long_events, job_gpus=old_gpus + long_gpus)  # day 1 again, no 'blind'
    con = build(warehouse)

    for table in ["dim_jobs", "fct_allocations", "fct_allocation_segments", "fct_allocation_daily",
                  "fct_allocation_usage"]:
        jobs = [r[0] for r in con.execute(
            f"select distinct split_part(allocation_id, ':', 2) from marts.{table} order by 1"
            if table != "dim_jobs" else "select job_id from marts.dim_jobs order by 1").fetchall()]
        assert jobs == ["long", "old"], table
    assert con.execute("select count(*) from marts.fct_telemetry_reconciliation "
                       "where job_id = 'blind'").fetchone()[0] == 0
    con.close()
