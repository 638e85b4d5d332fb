"""Incremental models rebuild only what the build's window reaches: rows of units outside it (marked in
the warehouse after a build) are kept as they were, those it reaches are rebuilt (the mark is gone).
Helpers converting other model groups add their own block below."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

import pipelines.build
from allocator.sim.simulator import simulate
from pipelines.build import build
from pipelines.ingest import ingest_days
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse

# ---- attempts, waits and pool state: fct_attempt_*, fct_job_artifacts, fct_wait_*, fct_waiting_jobs,
# fct_pool_free_segments ---------------------------------------------------------------------------------

START = dt.date(2026, 11, 1)
DAYS = [START + dt.timedelta(days=n) for n in range(3)]

# model -> (the mark: a column set to a value no build writes, its test, the rows before the window's
# start ({ws}) that must be kept, the rows from it on that must be rebuilt, whether every row before it is
# kept: a unit with a record in the window is rebuilt whole, e.g. an artifact registered after the job ended,
# a wait that crosses the window's start)
MARKS = {
    # an attempt ended up to 16 min before the window's start is re-decided: the first scrape after its end
    # (in the window) is evidence of its cause (macros/build_window.sql, ended_attempts_from_at)
    "fct_attempt_outcomes": ("tenant = 'marked'", "ended_at < {ws} - interval 16 minute", "ended_at >= {ws} - interval 16 minute",
                             True),
    "fct_attempt_checkpoints": ("tenant = 'marked'", "ended_at < {ws}", "ended_at is null or ended_at >= {ws}", False),
    "fct_attempt_host_share": ("tenant = 'marked'", "ended_at < {ws}", "ended_at >= {ws}", True),
    "fct_job_artifacts": ("tenant = 'marked'", "finished_at < {ws}", "finished_at >= {ws}", False),
    "fct_wait_intervals": ("tenant = 'marked'", "pending_to_at < {ws}", "pending_to_at >= {ws}", True),
    "fct_waiting_jobs": ("tenant = 'marked'", "as_of_at <= {ws} - interval 1 day", "day >= {ws}", True),
    "fct_wait_causes": ("tenant = 'marked'", "hour_at < {ws}", "hour_at >= {ws}", False),
    "fct_pool_free_segments": ("unit_gpus = -1", "valid_from_at < {ws}", "valid_from_at >= {ws}", True),
}


def _ingest(wh: Warehouse, sources: list[str], day: dt.date) -> None:
    for name in sources:
        ingest_days(wh, name, [day], validate=False)


@pytest.mark.slow
def test_a_new_day_keeps_attempts_waits_and_pool_state_outside_the_window(tmp_path: Path, monkeypatch):
    wh = Warehouse(tmp_path / "gpupool")
    simulate(wh.landing, days=len(DAYS), gpus=16, seed=7, start=START, fault_scale=50.0)
    sources = [name for name in SOURCES if (wh.landing / name).is_dir()]
    for day in DAYS[:2]:
        _ingest(wh, sources, day)
    build(wh)
    with wh.writer() as con:
        for model, (mark, *_rest) in MARKS.items():
            con.execute(f"update marts.{model} set {mark}")

    windows = []
    rebuild_window = pipelines.build.rebuild_window
    monkeypatch.setattr(pipelines.build, "rebuild_window",
                        lambda *args, **kw: windows.append(rebuild_window(*args, **kw)) or windows[-1])
    _ingest(wh, sources, DAYS[2])
    build(wh)
    assert len(windows) == 1 and windows[0] is not None
    ws = f"timestamp '{windows[0][0]}'"
    assert windows[0][0] > DAYS[0], "the window starts after the first day: there are rows outside it"

    with wh.connect() as con:
        for model, (mark, before, after, every_unit) in MARKS.items():
            kept, outside = con.execute(
                f"select count(*) filter (where {mark}), count(*) from marts.{model} "
                f"where {before.format(ws=ws)}").fetchone()
            marked, inside = con.execute(
                f"select count(*) filter (where {mark}), count(*) from marts.{model} "
                f"where {after.format(ws=ws)}").fetchone()
            assert outside > 0 and inside > 0, f"{model}: rows on both sides of the window's start"
            assert kept == outside if every_unit else kept > 0, f"{model}: rows outside the window kept"
            assert marked == 0, f"{model}: {marked} of {inside} rows in the window not rebuilt"
