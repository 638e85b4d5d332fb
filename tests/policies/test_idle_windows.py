"""The idle windows' search (`candidate_windows`, over arrays) at its edges: rows judged together as each
alone, minutes whose idleness is unknown, evaluation moments of their own."""
from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipelines.policies.idle import all_idle_spans, candidate_windows
from pipelines.policies.inputs import MINUTE_SCHEMA, TS
from tests.policies.frames import T0, at

PARAMS_SCHEMA = {"allocation_id": pl.String, "activity_threshold": pl.Float64, "memory_floor_mib": pl.Float64,
                 "spike_max_minutes": pl.Int64, "min_coverage": pl.Float64, "started_at": TS, "ended_at": TS,
                 "evaluated_at": TS}


def rule(allocation_id: str = "a0", **fields) -> dict:
    return {"allocation_id": allocation_id, "activity_threshold": 0.05, "memory_floor_mib": None,
            "spike_max_minutes": 2, "min_coverage": 0.9, "started_at": None, "ended_at": None,
            "evaluated_at": None} | fields


def minutes(allocation_id: str, values: list[float | None], fb: float | None = 0.0) -> list[dict]:
    """A row per minute from T0 (None: a row whose activity is unknown)."""
    return [{"allocation_id": allocation_id, "minute_at": at(i), "activity": v, "fb_used_mib": fb}
            for i, v in enumerate(values)]


def windows(rows: list[dict], params: list[dict], now: dt.datetime) -> list[dict]:
    return candidate_windows(pl.DataFrame(rows, schema=MINUTE_SCHEMA), pl.DataFrame(params, schema=PARAMS_SCHEMA),
                             now).to_dicts()


def test_a_minute_of_unknown_activity_stays_inside_an_idle_run_and_never_starts_one():
    # unknown minutes before the first idle one start nothing; one inside the run is bridged like a busy minute
    [w] = windows(minutes("a0", [None] * 4 + [0.0] * 10 + [None] + [0.0] * 10), [rule()], at(60))
    assert (w["window_start_at"], w["window_end_at"]) == (at(4), at(25))
    assert (w["telemetry_minutes"], w["idle_minutes"], w["busy_minutes"], w["spikes"]) == (21, 20, 1, 0)
    assert w["mean_activity"] == 0.0  # the unknown minute is not averaged in


def test_unknown_framebuffer_under_a_memory_floor_is_not_idle():
    rows = minutes("a0", [0.0] * 30, fb=None)
    assert windows(rows, [rule(memory_floor_mib=1000.0)], at(60)) == []
    [w] = windows(rows, [rule()], at(60))  # without a floor memory is not read
    assert w["peak_fb_used_mib"] is None and w["span_minutes"] == 30


def test_a_row_evaluated_earlier_sees_only_the_minutes_before_its_moment():
    rows = minutes("a0", [0.0] * 40)
    [early, late] = windows(rows, [rule(evaluated_at=at(20)), rule()], at(60))
    assert (early["params_row"], early["window_end_at"], early["reaches_end"]) == (0, at(20), True)
    assert (late["params_row"], late["window_end_at"], late["reaches_end"]) == (1, at(40), False)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rows_judged_together_find_what_each_finds_alone(seed):
    """Rows of several allocations and parameter sets, some with a moment of their own, found in one call
    equal each row found alone: a run never crosses from one row's minutes into the next's."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    for a in range(4):
        taken = np.sort(rng.choice(240, size=int(rng.integers(0, 200)), replace=False))
        values = rng.choice([0.0, 0.01, 0.5, 0.9, np.nan, -1.0], p=[.4, .2, .15, .1, .05, .1], size=taken.size)
        fbs = rng.choice([0.0, 500.0, 5000.0, -1.0], size=taken.size)
        rows += [{"allocation_id": f"a{a}", "minute_at": at(int(m)), "activity": None if v == -1 else float(v),
                  "fb_used_mib": None if f == -1 else float(f)} for m, v, f in zip(taken, values, fbs)]
    params = [rule(f"a{int(rng.integers(0, 5))}", activity_threshold=float(rng.choice([0.05, 0.02])),
                   memory_floor_mib=rng.choice([None, 1000.0]), spike_max_minutes=int(rng.integers(0, 4)),
                   min_coverage=float(rng.choice([0.5, 0.9, 1.0])),
                   started_at=T0 + dt.timedelta(seconds=int(rng.integers(0, 3600))),
                   evaluated_at=rng.choice([None, at(int(rng.integers(30, 240)))]))
              for _ in range(12)]
    frame = pl.DataFrame(rows, schema=MINUTE_SCHEMA)
    together = candidate_windows(frame, pl.DataFrame(params, schema=PARAMS_SCHEMA), at(240))
    alone = pl.concat([
        candidate_windows(frame, pl.DataFrame([p], schema=PARAMS_SCHEMA), at(240)).with_columns(params_row=pl.lit(i, pl.UInt32))
        for i, p in enumerate(params)])
    assert together.height > 10
    assert_frame_equal(together, alone)  # NaN activity averages to NaN in both


@pytest.mark.parametrize("seed", [4, 5])
def test_every_gpu_idle_spans_are_the_minutes_all_held_gpus_sit_in_a_window(seed):
    """The sweep's spans equal a minute-by-minute count: maximal runs of minutes where every GPU the
    attempt holds is inside one of its windows; a run reaching windows still open at the data's end is
    ongoing and ends at the attempt's now_at."""
    rng = np.random.default_rng(seed)
    windows, holdings, expected = [], [], set()
    for a in range(6):
        job, gpus, now_at = f"j{a}", int(rng.integers(1, 4)), at(int(rng.integers(200, 260)))
        holdings.append({"source": "allocator", "job_id": job, "attempt": 1, "gpus_held": gpus, "now_at": now_at})
        idle_at = np.zeros((gpus, 400), bool)  # minute by minute; an open window runs to the grid's end
        for g in range(gpus):
            minute = 0
            while minute < 180:
                minute += int(rng.integers(0, 30))
                length, still_open = int(rng.integers(1, 80)), bool(rng.random() < 0.15)
                idle_at[g, minute:400 if still_open else minute + length] = True
                windows.append({"source": "allocator", "job_id": job, "attempt": 1, "window_start_at": at(minute),
                                "window_end_at": at(minute + length), "reaches_end": still_open})
                minute += length + 1
                if still_open:
                    break
        every = np.concatenate(([False], idle_at.all(axis=0), [False]))
        for start, stop in zip(np.flatnonzero(every[1:] & ~every[:-1]), np.flatnonzero(~every[1:] & every[:-1])):
            ongoing = stop == 400
            expected.add((job, at(int(start)), now_at if ongoing else at(int(stop)), bool(ongoing)))
    spans = all_idle_spans(
        pl.DataFrame(windows, schema={"source": pl.String, "job_id": pl.String, "attempt": pl.Int64,
                                      "window_start_at": TS, "window_end_at": TS, "reaches_end": pl.Boolean}),
        pl.DataFrame(holdings, schema={"source": pl.String, "job_id": pl.String, "attempt": pl.Int64,
                                       "gpus_held": pl.UInt32, "now_at": TS}),
        at(300))
    assert len(expected) > 5
    assert set(spans.select("job_id", "span_start_at", "span_end_at", "is_ongoing_span").rows()) == expected
