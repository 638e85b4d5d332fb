"""The patience a replay gives jobs that started: a Kaplan-Meier curve of the month's give-ups, drawn
beyond each job's own wait (pipelines/capacity/demand.py `PatienceCurve`)."""
from __future__ import annotations

import numpy as np
import pytest

from pipelines.capacity.demand import PatienceCurve


def test_the_curve_is_kaplan_meiers_with_starts_censored() -> None:
    # waits 10 (gave up), 15 (started), 20 (gave up), 25 (started), 30 and 40 (gave up): at risk 6, 4, 2, 1
    curve = PatienceCurve.estimate([10, 20, 30, 40], [15, 25])
    assert curve.times.tolist() == [10, 20, 30, 40]
    assert curve.surviving.tolist() == pytest.approx([5 / 6, 5 / 6 * 3 / 4, 5 / 6 * 3 / 4 / 2, 0.0])


def test_a_give_up_at_a_start_time_counts_the_start_as_still_waiting() -> None:
    # Kaplan-Meier's convention: the user who started at 10 was still at risk when the other gave up at 10
    assert PatienceCurve.estimate([10], [10]).surviving.tolist() == [0.5]


@pytest.mark.parametrize(("wait", "unit", "patience"), [
    (0, 0.0, 10),  # the next give-up
    (0, 0.5, 30),  # the median of everyone
    (12, 0.0, 20),  # never at or before the wait
    (12, 0.99, 40),
    (35, 0.2, 40),  # of those still waiting at 35: 0.3125 falls to 0 at 40
    (45, 0.1, None),  # past the last give-up the month says nothing: the user waits on
])
def test_a_patience_is_drawn_beyond_the_wait(wait, unit, patience) -> None:
    assert PatienceCurve.estimate([10, 20, 30, 40], [15, 25]).beyond(wait, unit) == patience


def test_a_patience_is_longer_than_the_wait_by_a_second_at_least() -> None:
    assert PatienceCurve.estimate([100.2], []).beyond(99.9, 0.0) == 100
    assert PatienceCurve.estimate([100.2], []).beyond(100.1, 0.0) == 101


def test_a_month_with_no_give_ups_gives_no_patience() -> None:
    assert PatienceCurve.estimate([], [60, 120]).beyond(0, 0.5) is None


def test_drawn_beyond_their_waits_the_started_users_patience_is_everyones() -> None:
    # users' patience lognormal (median 12 h), their jobs' start after an exponential wait (mean 8 h): each job
    # either started (its patience unseen, longer than its wait) or gave up (its patience seen)
    rng = np.random.default_rng(7)
    patience = rng.lognormal(np.log(12 * 3600), 1.0, 20_000)
    start = rng.exponential(8 * 3600, 20_000)
    gave_up = patience <= start
    curve = PatienceCurve.estimate(patience[gave_up].tolist(), start[~gave_up].tolist())
    drawn = [curve.beyond(w, u) for w, u in zip(start[~gave_up], rng.random((~gave_up).sum()))]
    assert all(p is None or p > w for p, w in zip(drawn, start[~gave_up]))
    # None: patient beyond anything the month saw give up, longer than any median
    everyone = np.concatenate([patience[gave_up], [np.inf if p is None else p for p in drawn]])
    assert np.median(everyone) == pytest.approx(np.median(patience), rel=0.05)
    # without the started users' draws, the give-ups alone say users are far less patient than they are
    assert np.median(patience[gave_up]) < 0.6 * np.median(patience)
