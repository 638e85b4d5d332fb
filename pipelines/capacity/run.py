"""One month's recommendations end to end: read the views (read-only, one published release, which is
pinned and recorded with the advice), replay the top ones (searching the smallest sufficient change of
those that add nodes or move quota), write the governance table (the warehouse's writer). Shared by the
Dagster asset and `gpupool recommend`."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from pipelines.capacity.recommend import (
    load_rules,
    month_bounds,
    recommend,
    smallest_change,
    whatif_change,
    whatif_sizes,
    whatif_summary,
    with_whatif,
)
from pipelines.capacity.review import review_previous
from pipelines.capacity.store import Recommendation, write_month
from pipelines.clock import utc_naive
from pipelines.coverage import Coverage, read_coverage
from pipelines.lake import release_read
from pipelines.warehouse import Warehouse


@dataclass(frozen=True)
class MonthOutcome:
    month: dt.date
    recommendations: list[Recommendation]
    replayed: int
    rules_version: str
    release_id: int  # the warehouse release the advice was computed from (pinned)
    coverage: Coverage | None = None  # the month's days with data per kind of source (pipelines/coverage.py)
    review: dict | None = None  # the verdict on the previous month's top advice (pipelines/capacity/review.py)


def recommend_month(wh: Warehouse, month: dt.date, *, whatif_top: int = 1,
                    on_step: Callable[[str], None] = lambda _m: None) -> MonthOutcome:
    from pipelines.capacity.replay import whatif

    rules = load_rules()
    month = month.replace(day=1)
    with wh.connect(read_only=True) as con:
        release_id = release_read(con)
        # pinned before the views are read: publishes meanwhile must not expire it
        wh.pin_release(release_id, f"recommendation {month:%Y-%m}")
        found = recommend(con, month, rules)
        coverage = read_coverage(con, *month_bounds(month))
        changes = [whatif_change(con, rec) for rec in found]
        sizes = [whatif_sizes(con, rec) for rec in found]
    on_step(f"{len(found)} recommendations for {month:%Y-%m} from release {release_id}")
    replayed = 0
    for i, (rec, change) in enumerate(zip(found, changes, strict=True)):
        if replayed >= whatif_top:
            break
        if change is None:
            continue
        on_step(f"what-if for #{i + 1}: {change.describe()}")
        if sizes[i]:
            found[i] = smallest_change(wh.home, rec, sizes[i], month=f"{month:%Y-%m}", rules=rules, on_step=on_step)
        else:
            result = whatif(wh.home, change, month=f"{month:%Y-%m}", on_step=on_step)
            found[i] = with_whatif(rec, whatif_summary(rec, result), rules)
        replayed += 1
    with wh.writer() as con:
        write_month(con, month, found, rules["version"], utc_naive(),
                    release_id=release_id)
    # the fair judge of last month's advice replays this month's demand twice: only when replays are asked for
    review = review_previous(wh.home, month, on_step=on_step) if whatif_top > 0 else None
    return MonthOutcome(month, found, replayed, rules["version"], release_id, coverage, review)
