"""How many replays a round of the smallest-change search runs side by side, and which sizes
(pipelines.capacity.recommend.search): pure functions of what the rounds so far found and the cores.

A round replays, side by side, sizes evenly spaced strictly between the largest size known not to be
enough and the smallest known to be. How many: as many as make the whole search's worst case shortest,
a round of n replays on c cores taking max(1, n / c) replay times, and never more than one replay
beyond the cores (each holds the month's demand and a simulated pool in memory)."""
from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Mapping

# Cores the search uses at most (side_by_side).
MAX_SIDE_BY_SIDE = 4


def next_sizes(enough: Mapping[int, bool], advised: int, k: int) -> list[int]:
    """Up to k sizes, evenly spaced, strictly between the largest size known not to be enough (0 at first)
    and the smallest known to be (the advised size until a replay says otherwise)."""
    lo, hi = _open_interval(enough, advised)
    if hi - lo <= k + 1:
        return list(range(lo + 1, hi))
    return sorted({lo + round((hi - lo) * j / (k + 1)) for j in range(1, k + 1)})


def _open_interval(enough: Mapping[int, bool], advised: int) -> tuple[int, int]:
    hi = min((n for n, ok in enough.items() if ok), default=advised)
    lo = max((n for n, ok in enough.items() if not ok and n < hi), default=0)
    return lo, hi


def sizes_to_probe(enough: Mapping[int, bool], advised: int, cores: int, fixed: int = 0) -> list[int]:
    """The sizes a round replays beside the `fixed` replays it must run anyway (the first round's baseline
    and advised size): as many as make the whole search's worst case shortest (`_worst_case`), a round
    of n replays taking max(1, n / cores) replay times. So the first round on 2 cores replays one size
    more than the cores, half a replay's time longer, when that saves a whole later round in which one
    replay would run alone: +6 nodes in {baseline, +6, +3} then two sizes beside +3, against {baseline,
    +6}, {+2, +4} and a third round of one."""
    lo, hi = _open_interval(enough, advised)
    unknown = hi - lo - 1
    if unknown <= 0:
        return []
    best = min(_round_choices(unknown, fixed, cores), key=lambda k: _round_then_rest(unknown, k, fixed, cores))
    return next_sizes(enough, advised, best)


def _round_choices(unknown: int, fixed: int, cores: int) -> range:
    """How many sizes a round may probe: at least one unless it runs `fixed` replays anyway, and at most as
    many as keep the round to one replay more than the cores (each replay holds the month in memory)."""
    least = 0 if fixed else 1
    return range(least, max(least, min(unknown, cores + 1 - fixed)) + 1)


def _round_then_rest(unknown: int, k: int, fixed: int, cores: int) -> tuple[float, int, int]:
    """(worst-case wall time in replay times, worst-case replays, k) of a round of `fixed` + k replays, k of
    them probing `unknown` sizes, and the search after it: compared in that order, so that a tie goes to
    fewer replays, then to fewer side by side."""
    wall, replays = _worst_case(_largest_gap(unknown, k), cores)
    return max(1.0, (fixed + k) / cores) + wall, k + replays, k


@functools.cache
def _worst_case(unknown: int, cores: int) -> tuple[float, int]:
    """(Wall time in replay times, replays) of searching `unknown` sizes in the worst case, each round
    probing the number of sizes that makes this least."""
    if unknown <= 0:
        return 0.0, 0
    return min(_round_then_rest(unknown, k, 0, cores) for k in _round_choices(unknown, 0, cores))[:2]


def _largest_gap(unknown: int, k: int) -> int:
    """The most sizes left unknown after probing k of `unknown` sizes evenly spaced (next_sizes)."""
    points = [0, *next_sizes({0: False}, unknown + 1, k), unknown + 1]
    return max(b - a - 1 for a, b in itertools.pairwise(points))


def side_by_side() -> int:
    """How many replays run at once: the CPUs this process may use, at most MAX_SIDE_BY_SIDE."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # not on macOS
    return max(1, min(cpus, MAX_SIDE_BY_SIDE))
