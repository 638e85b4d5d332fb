"""Late data is right: on a small simulated pool (allocations crossing midnight, host counters, faults:
tests/models/replay.py), days ingested in order with a build after each, then day 2's allocator events
and host telemetry arriving after day 3 was built, then a build, give exactly what a full refresh of the
same landing files gives: every relation of marts and metrics, compared by scripts/compare_metrics.py.
So do days loaded newest first with a build after each, then a day re-ingested unchanged. (Issue 27's
scenarios; test_build_orderings.py replays more orderings of the same files.)"""
from __future__ import annotations

import datetime as dt

import pytest

from tests.models.replay import DAYS, Replays, run

LATE = ("allocator_events", "node_exporter_parquet")  # day 2's, landed after day 3 was built


@pytest.mark.slow
def test_a_late_file_then_a_build_equals_a_full_refresh(replays: Replays):
    assert set(LATE) <= set(replays.sources)
    with replays.reference().connect() as con:  # the late file matters beyond its own day
        crossing = con.execute(
            "select count(*) from marts.fct_allocations where cast(started_at as date) = ? "
            "and cast(ended_at as date) = ?", [DAYS[0], DAYS[1]]).fetchone()[0]
        first_rates = con.execute(
            "select count(cpu_busy_fraction) from marts.fct_host_activity where minute_at = ?",
            [dt.datetime.combine(DAYS[2], dt.time())]).fetchone()[0]
    assert crossing > 0, "an allocation from day 1 that ends in day 2's late events"
    assert first_rates > 0, "day 3's first host rates, from day 2's last samples"

    replays.assert_equal_to_full_refresh((run(1), run(2, skip=LATE), run(3), run(2, sources=LATE)))


@pytest.mark.slow
def test_days_newest_first_then_a_reingest_equal_a_full_refresh(replays: Replays):
    # day 2 re-ingested unchanged: the partition is replaced
    replays.assert_equal_to_full_refresh((run(3), run(2), run(1), run(2)))
