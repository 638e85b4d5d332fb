"""A build after any ingest gives what one full refresh of the same landing files gives, whatever the
order the files were loaded in (issue 27). The same three simulated days of a small pool (allocations
crossing midnight, host counters, GPU faults, checkpoints: tests/models/replay.py) are loaded in
several orders, with a build after each ingest run: days in order, reversed, shuffled, a day
re-ingested after later days were built, a day's sources split around a later day, a correction to an
earlier day's files, two days in one run, the last day in intraday cycles (its telemetry and scheduler
records as landed by 08:00, then by 16:00, then the whole day with its pool snapshot: issue 30). Each ordering ends with every relation of marts and metrics
equal to a full refresh of the final landing files (scripts/compare_metrics.py). Only what the
relations hold is compared, never how a model was built, so the property holds for any incremental
strategy. (test_late_data.py replays two more orderings, the issue's own.)"""
from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import polars as pl
import pytest

from tests.models.replay import DAYS, Replays, Run, run

SHUFFLE_SEED = 7
# day 2's sources loaded after day 3 was built (test_late_data.py holds back the others)
SPLIT_LATE = ("dcgm_parquet", "allocator_artifacts", "allocator_pool", "allocator_audit")


# --- corrections: a day's landing file of a source replaced by a corrected one -----------------------

def correct_job_ends(landing: Path) -> None:
    """Day 1's allocator events, corrected: the finish of the last attempt of day 1 that ran over an
    hour is an hour earlier, and the finish of the one before it is removed (that attempt now runs
    past midnight, to the end of the data)."""
    path = landing / "allocator_events" / DAYS[0].isoformat() / "events.jsonl"
    lines = path.read_text().splitlines()
    events = [json.loads(line) for line in lines]
    started = {(e["job_id"], e["attempt"]): _time(e) for e in events if e["type"] == "start"}
    long = [i for i, e in enumerate(events) if e["type"] == "finish"
            and _time(e) - started.get((e["job_id"], e["attempt"]), _time(e)) > dt.timedelta(hours=1)]
    assert len(long) >= 2, "two attempts started and finished on day 1"
    moved, removed = long[-1], long[-2]
    ts = events[moved]["ts"]
    lines[moved] = lines[moved].replace(ts, (_time(events[moved]) - dt.timedelta(hours=1)).isoformat(
        timespec="microseconds").replace("+00:00", "Z"))
    del lines[removed]
    path.write_text("\n".join(lines) + "\n")


def _time(event: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(event["ts"])


def correct_host_counter(landing: Path) -> None:
    """Day 1's host samples, corrected: the first host's user CPU counter at day 1's last sample is
    half a minute's increase lower (still counting up), so day 2's first CPU rate of that host changes."""
    path = landing / "node_exporter_parquet" / DAYS[0].isoformat() / "samples.parquet"
    samples = pl.read_parquet(path)
    counter = (pl.col("metric") == "node_cpu_seconds_total") & (pl.col("mode") == "user")
    series = samples.filter(counter & (pl.col("host") == samples["host"].min())).sort("sampled_at")
    before, last = series["value"].tail(2)
    last_at = series["sampled_at"][-1]
    assert last_at.date() == DAYS[0] and last > before
    target = counter & (pl.col("host") == series["host"][0]) & (pl.col("sampled_at") == last_at)
    samples.with_columns(value=pl.when(target).then(last - (last - before) / 2).otherwise("value")) \
        .write_parquet(path)


# --- orderings ---------------------------------------------------------------------------------------

def _shuffled() -> list[int]:
    order = [1, 2, 3]
    random.Random(SHUFFLE_SEED).shuffle(order)
    return order


CORRECTED = "day-1-corrected-after-day-3"
ORDERINGS: dict[str, tuple[Run, ...]] = {
    "days-in-order": (run(1), run(2), run(3)),
    "days-reversed": (run(3), run(2), run(1)),
    f"days-shuffled-seed-{SHUFFLE_SEED}": tuple(run(d) for d in _shuffled()),
    "day-2-reingested-after-day-3": (run(1), run(2), run(3), run(2)),
    "day-2-sources-split-around-day-3": (
        run(1), run(2, skip=SPLIT_LATE), run(3), run(2, sources=SPLIT_LATE)),
    CORRECTED: (run(1), run(2), run(3), run(1, corrections=(correct_job_ends, correct_host_counter))),
    "day-3-then-days-1-2-in-one-run": (run(3), run(1, 2)),
    "day-3-in-intraday-cycles": (run(1), run(2), run(3, until=dt.time(8)), run(3, until=dt.time(16)), run(3)),
}


@pytest.mark.slow
def test_the_landing_files_exercise_what_crosses_days(replays: Replays):
    """The pool's data has what makes a day's build reach other days (else every ordering is trivially
    equal): allocations crossing midnight, host counters, GPU hardware faults, checkpoints; the
    corrections change what they say; the orderings differ (the shuffle is neither in order nor
    reversed, both halves of the split have sources)."""
    assert _shuffled() not in ([1, 2, 3], [3, 2, 1])
    assert set() < set(SPLIT_LATE) < set(replays.sources)
    midnight = [dt.datetime.combine(DAYS[1], dt.time())]
    first_rates = "select host, cpu_busy_fraction from marts.fct_host_activity where minute_at = ? order by host"
    running = "select count(*) from marts.fct_allocations where is_running"
    with replays.reference().connect() as con:
        crossing = con.execute(
            "select count(*) from marts.fct_allocations where cast(started_at as date) < cast(ended_at as date)"
        ).fetchone()[0]
        hardware_faults = con.execute(
            "select count(*) from marts.fct_gpu_health_events where is_hardware_fault").fetchone()[0]
        checkpoints = con.execute("select sum(checkpoints_ok) from marts.fct_attempt_checkpoints").fetchone()[0]
        rates, still_running = con.execute(first_rates, midnight).fetchall(), con.execute(running).fetchone()[0]
    assert crossing > 0, "allocations that cross midnight"
    assert any(rate is not None for _, rate in rates), "day 2's first host rates, from day 1's last counter samples"
    assert hardware_faults > 0, "GPU hardware faults"
    assert checkpoints > 0, "checkpoints reported by the allocator"
    with replays.reference(ORDERINGS[CORRECTED]).connect() as corrected:
        assert corrected.execute(running).fetchone()[0] > still_running, \
            "the corrected day 1 leaves an attempt running to the end of the data"
        assert corrected.execute(first_rates, midnight).fetchall() != rates, \
            "the corrected counter changes day 2's first host rate"
    crossing_a_cut = (
        "select count(*) from marts.fct_allocations where started_at < ? and ended_at between ? and ?")
    with replays.reference().connect() as con:
        for cut, later in ((dt.time(8), dt.time(16)), (dt.time(16), dt.time(23, 59))):
            at, by = dt.datetime.combine(DAYS[2], cut), dt.datetime.combine(DAYS[2], later)
            assert con.execute(crossing_a_cut, [at, at, by]).fetchone()[0] > 0, \
                f"allocations running at an intraday cycle ({cut:%H:%M}) end in the next"


@pytest.mark.slow
@pytest.mark.parametrize("runs", ORDERINGS.values(), ids=ORDERINGS.keys())
def test_every_ordering_of_the_landing_files_equals_one_full_refresh(replays: Replays, runs: tuple[Run, ...]):
    replays.assert_equal_to_full_refresh(runs)
