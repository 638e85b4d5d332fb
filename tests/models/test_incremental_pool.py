"""Incremental models rebuild only what a build's window reaches: a mark on a row outside the window is
kept by the next build, while the window's rows are rebuilt (pipelines/build.py, models/macros/build_window.sql).
Each helper's block tests its own models."""
from __future__ import annotations

import datetime as dt

import pytest

from pipelines.build import build
from pipelines.warehouse import Warehouse
from tests.models.builders import DAY1, at, gpu, load, quota, series

# ---- dims, capacity and quota, pool hours, GPU health (fct_gpu_series_daily, fct_capacity_daily,
# ---- fct_quota_daily, fct_pool_hours, fct_gpu_health_series_daily, fct_gpu_health_events) ----

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
ECC = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"

# a mark on day 1's rows of each model: only a rebuild of day 1 removes it
_DAY1_MARKS = {
    "fct_gpu_series_daily": ("uuid = 'marked'", "uuid = 'marked'", "day"),
    "fct_capacity_daily": ("capacity_gpu_hours = -1", "capacity_gpu_hours = -1", "day"),
    "fct_quota_daily": ("quota_gpu_hours = -1", "quota_gpu_hours = -1", "day"),
    "fct_pool_hours": ("capacity_gpu_hours = -1", "capacity_gpu_hours = -1", "day"),
    "fct_gpu_health_series_daily": ("last_value = -1", "last_value = -1", "day"),
    "fct_gpu_health_events": ("event_count = -1", "event_count = -1", "cast(minute_at as date)"),
}


def _telemetry_day(day: int) -> dict:
    """Day `day`: 10 minutes of activity, and an ECC counter at 10 x day that rises by 2 at 10:05."""
    ecc = series("a100-01", 0, ECC, at("10:00", day=day), 5, 10.0 * day)
    ecc += series("a100-01", 0, ECC, at("10:05", day=day), 5, 10.0 * day + 2)
    return {"dcgm_samples": series("a100-01", 0, GR, at("10:00", day=day), 10, 0.5) + ecc}


@pytest.fixture
def home(tmp_path) -> Warehouse:
    return Warehouse(tmp_path / "gpupool")


@pytest.mark.slow
def test_a_new_day_keeps_the_earlier_days_of_the_per_day_and_health_marts(home: Warehouse):
    load(home, ingest="day1", gpu_inventory=[gpu("a100-01", 0)], queue_quotas=[quota("q", "vision", "A100", 1)],
         **_telemetry_day(1))
    for day in (2, 3):
        load(home, ingest=f"day{day}", day=DAY1 + dt.timedelta(days=day - 1), **_telemetry_day(day))
    build(home)
    with home.writer() as con:
        for model, (mark, _, day) in _DAY1_MARKS.items():
            assert con.execute(f"update marts.{model} set {mark} where {day} = ?", [DAY1]).fetchone()[0] > 0, model

    load(home, ingest="day4", day=DAY1 + dt.timedelta(days=3), **_telemetry_day(4))
    build(home)

    with home.connect() as con:
        for model, (_, marked, day) in _DAY1_MARKS.items():
            kept, rows = con.execute(
                f"select count(*) filter (where {marked}), count(*) from marts.{model} where {day} = ?", [DAY1]
            ).fetchone()
            assert kept == rows > 0, f"{model}: day 1 rebuilt"
            assert con.execute(f"select count(*) from marts.{model} where {day} = ?",
                               [DAY1 + dt.timedelta(days=3)]).fetchone()[0] > 0, f"{model}: day 4 not built"
        # day 4's first ECC sample rises over day 3's last (carried into the window), then by 2 at 10:05
        assert con.execute(
            "select minute_at, event_count from marts.fct_gpu_health_events where minute_at >= ? order by 1",
            [at("00:00", day=4)]).fetchall() == [(at("10:00", day=4), 8.0), (at("10:05", day=4), 2.0)]
        # every hour, kept or rebuilt, has its trailing week on the new data's end (the view computes it)
        as_of = con.execute("select max(as_of_at) from marts.dim_days").fetchone()[0]
        assert as_of == at("10:10", day=4)
        assert con.execute(
            "select count(*) from marts.fct_pool_hourly"
            " where week_end_at <> ? - to_days(7 * weeks_before_end)", [as_of]).fetchone()[0] == 0
        assert con.execute("select min(weeks_before_end), max(weeks_before_end) from marts.fct_pool_hourly"
                           ).fetchone() == (0, 0)
