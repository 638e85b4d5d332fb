"""The smallest sufficient change, on tiny pools whose answer is known by construction
(tests/capacity/tiny.py)."""
from __future__ import annotations

import pytest

from pipelines.capacity.recommend import load_rules, search, search_summary
from pipelines.capacity.rounds import next_sizes, sizes_to_probe
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
    steps: list[str] = []
    found = search(demand(8), advice(4), sizes(4), rules, policies=False, workers=2, on_step=steps.append)
    assert found.smallest == 2
    assert found.enough == {0: False, 1: False, 2: True, 4: True}  # rounds: {0, 4, 2}, then {1}
    assert [s for s in steps if s.startswith("replaying")] == [
        "replaying baseline, +4 H100 nodes, +2 H100 nodes side by side", "replaying +1 H100 node"]
    summary = search_summary(advice(4), found, sizes(4), rules)
    assert summary["smallest_change"] == "+2 H100 nodes" and summary["replays"] == 4
    assert [p["size"] for p in summary["curve"]] == [0, 1, 2, 4]
    assert summary["curve"][1]["wait_p95_H100_min"] == pytest.approx(6 * 60, rel=0.05)
    lines = curve_lines(summary, "H100")
    assert lines[0].startswith("smallest sufficient change: +2 H100 nodes") and len(lines) == 2 + 4


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


def test_a_round_probes_what_makes_the_worst_case_shortest() -> None:
    # 2 cores, +6 advised: one size beside the baseline and +6 (half a replay longer) saves a third round
    assert sizes_to_probe({0: False}, 6, 2, fixed=2) == [3]
    assert sizes_to_probe({0: False, 6: True, 3: False}, 6, 2) == [4, 5]
    assert sizes_to_probe({0: False, 6: True, 3: True}, 6, 2) == [1, 2]
    assert sizes_to_probe({0: False}, 6, 2, fixed=1) == [3]  # a kept baseline: the same size, one replay fewer
    assert sizes_to_probe({0: False}, 6, 1, fixed=2) == []  # one core: the baseline and advice alone, then halves
    assert sizes_to_probe({0: False, 6: True}, 6, 1) == [3]
    assert sizes_to_probe({0: False, 1: True}, 1, 2) == []
    assert sizes_to_probe({0: False}, 1, 2, fixed=2) == []


def _planned_search(advised: int, cores: int, smallest: int, plan) -> tuple[int, float]:
    """(The smallest sufficient size found, the wall time in replay times: max(1, n / cores) a round of n)
    of a search whose sizes from `smallest` on are sufficient, each round's sizes from `plan`."""
    enough: dict[int, bool] = {0: False}
    todo, wall = [0, advised, *plan(enough, advised, cores, 2)], 0.0
    while todo:
        assert len(todo) <= cores + 1 and not set(todo) & (enough.keys() - {0})
        wall += max(1.0, len(todo) / cores)
        enough |= {n: n >= smallest for n in todo if n}
        todo = plan(enough, advised, cores, 0)
    return min(n for n, ok in enough.items() if ok), wall


def _cores_at_a_time(enough, advised, cores, fixed):  # the plan before: a round of at most the cores
    return next_sizes(enough, advised, max(cores - fixed, 0) if fixed else cores)


@pytest.mark.parametrize("cores", [1, 2, 3, 4])
def test_the_planned_rounds_find_the_smallest_size_and_never_take_longer_at_worst(cores: int) -> None:
    for advised in range(1, 25):
        planned = [_planned_search(advised, cores, a, lambda e, ad, c, f: sizes_to_probe(e, ad, c, fixed=f))
                   for a in range(1, advised + 1)]
        before = [_planned_search(advised, cores, a, _cores_at_a_time) for a in range(1, advised + 1)]
        assert [found for found, _ in planned] == list(range(1, advised + 1))
        assert max(w for _, w in planned) <= max(w for _, w in before), (advised, planned, before)
