"""The smallest sufficient change, on tiny pools whose answer is known by construction
(tests/capacity/tiny.py)."""
from __future__ import annotations

import pytest

from pipelines.capacity.recommend import load_rules, next_sizes, search, search_summary
from pipelines.cli.capacity import curve_lines
from tests.capacity.tiny import advice, demand, sizes


@pytest.mark.parametrize("workers", [1, 2])
def test_one_node_is_enough_where_three_are_advised(workers: int) -> None:
    # 4 jobs x 2 GPUs fit one more node at once: +1 takes the wait to 0, as +3 does
    steps: list[str] = []
    found = search(demand(4), advice(3), sizes(3), load_rules(), policies=False, workers=workers,
                   on_step=steps.append)
    assert found.smallest == 1
    assert sorted(found.figures) == [0, 1, 2, 3]  # rounds: {0, 3} then {1, 2} side by side, or {2} then {1}
    assert sum(s.startswith("baseline:") for s in steps) == 1  # replayed once for every size
    assert found.figures[0].wait_p95_by_model_s["H100"] > 18 * 3600  # they waited for the 20-hour job
    assert found.figures[1].wait_p95_by_model_s["H100"] == 0 and found.share_of_full[1] == pytest.approx(1.0)
    assert any("+1 H100 node" in s and "wait p95 0 min" in s for s in steps)


def test_the_search_narrows_to_the_smallest_size_that_is_enough() -> None:
    # 8 jobs x 2 GPUs: +1 node runs half of them (the rest wait 6 h, under 80% of the cut), +2 runs all
    rules = load_rules()
    found = search(demand(8), advice(4), sizes(4), rules, policies=False, workers=2)
    assert found.smallest == 2
    assert found.enough == {0: False, 1: False, 2: True, 3: True, 4: True}  # rounds: {0, 4}, {1, 3}, {2}
    summary = search_summary(advice(4), found, sizes(4), rules)
    assert summary["smallest_change"] == "+2 H100 nodes" and summary["replays"] == 5
    assert [p["size"] for p in summary["curve"]] == [0, 1, 2, 3, 4]
    assert summary["curve"][1]["wait_p95_H100_min"] == pytest.approx(6 * 60, rel=0.05)
    lines = curve_lines(summary, "H100")
    assert lines[0].startswith("smallest sufficient change: +2 H100 nodes") and len(lines) == 2 + 5


def test_a_change_that_helps_nobody_is_not_searched_below() -> None:
    # nothing waits: the advised change cannot cut a wait, so no size is sufficient and only two replays run
    found = search(demand(0), advice(3), sizes(3), load_rules(), policies=False, workers=1)
    assert found.smallest is None and sorted(found.figures) == [0, 3]


def test_next_sizes_split_the_open_interval() -> None:
    assert next_sizes({0: False}, 6, 2) == [2, 4]
    assert next_sizes({0: False, 6: True, 2: True}, 6, 2) == [1]
    assert next_sizes({0: False, 6: True, 2: False, 4: True}, 6, 1) == [3]
    assert next_sizes({0: False, 1: True}, 1, 3) == []
    assert next_sizes({0: False}, 8, 0) == []  # the first round's spare workers: none beyond baseline and advice
