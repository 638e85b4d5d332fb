"""Judging last month's advice fairly (page 1's question 1).

Comparing last month's what-if prediction with this month's outcome judges the demand, not the advice: a
replay of last month's demand cannot know this month's, so it reads "off" whenever demand moved. The fair
judge replays THIS month's demand twice through the allocator, on the pool with last month's top advice
and on the pool without it, and compares the two:

- was the advice applied? node advice: the model's physical GPUs this month against last month
  (metrics.pool_daily); quota moves: the receiving tenant's quota of the model up and the donor's down
  (metrics.tenant_quota). Unknown (None) when a month lacks the figures: judged as not applied.
- the month as it was is the replay of this month's pool (the baseline, held to the observed month within
  the what-if's tolerance); the other world is this month's pool with the change undone (applied) or
  made (not applied).
- the advice helped when the world with it waits less for the advice's model (the what-if's own test,
  recommend._confirms) on this month's demand.

Verdicts (VERDICTS): credited (applied and it helped), would_have_helped (not applied, or not visible,
and it would have), not_credited (it did not help on this month's demand), not_relied_on (the baseline
missed the observed month beyond tolerance: neither replay is evidence). `gpupool recommend --month M`
records the verdict of M-1's top advice in that advice's whatif_json (`review`), which
metrics.capacity_recommendations passes through to the pack.
"""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import duckdb

from pipelines.capacity.store import Recommendation
from pipelines.contracts import RECOMMENDATIONS_TABLE

VERDICTS = ("credited", "would_have_helped", "not_credited", "not_relied_on")
REVIEWED_KINDS = ("add_nodes", "remove_nodes", "move_quota")


def _previous(month: dt.date) -> dt.date:
    return (month.replace(day=1) - dt.timedelta(days=1)).replace(day=1)


def _next(month: dt.date) -> dt.date:
    return (month.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


def top_advice(con: duckdb.DuckDBPyConnection, month: dt.date) -> Recommendation | None:
    """The previous month's rank-1 advice, when the replay can express it (REVIEWED_KINDS). Read from the
    table this asset writes, not its metrics view: the view depends on the asset (a cycle otherwise)."""
    rows = con.execute(
        "select kind, target, recommendation, recommendation_zh, quantity, unit, confidence_score, impact_gpu_hours, "
        f"evidence_json, gpu_model, tenant, queue from {RECOMMENDATIONS_TABLE} "
        "where period_month = ? and rank = 1", [_previous(month)]).fetchall()
    row = rows[0] if rows else None
    if row is None or row[0] not in REVIEWED_KINDS:
        return None
    return Recommendation(kind=row[0], target=row[1], recommendation=row[2], recommendation_zh=row[3],
                          quantity=row[4], unit=row[5], confidence_score=row[6], impact_gpu_hours=row[7],
                          evidence=json.loads(row[8] or "{}"), gpu_model=row[9], tenant=row[10], queue=row[11])


def was_applied(con: duckdb.DuckDBPyConnection, rec: Recommendation, month: dt.date) -> bool | None:
    """Whether `rec` (last month's advice) shows in this month's pool (module doc); None: cannot be seen."""
    before, after = _previous(month), _next(month)
    if rec.kind in ("add_nodes", "remove_nodes"):
        was, now = con.execute(
            "select max(physical_gpus) filter (where day < ?), max(physical_gpus) filter (where day >= ?) "
            "from metrics.pool_daily where gpu_model = ? and day >= ? and day < ?",
            [month, month, rec.gpu_model, before, after]).fetchall()[0]
        if was is None or now is None:
            return None
        return now > was if rec.kind == "add_nodes" else now < was
    donor = rec.target.split("->")[0]
    rows = {(t, m >= month): q for t, m, q in con.execute(
        "select tenant, date_trunc('month', day)::date, max(quota_gpus) from metrics.tenant_quota "
        "where gpu_model = ? and tenant in (?, ?) and day >= ? and day < ? group by all",
        [rec.gpu_model, donor, rec.tenant, before, after]).fetchall()}
    keys = [(donor, False), (donor, True), (rec.tenant, False), (rec.tenant, True)]
    if any(rows.get(k) is None for k in keys):
        return None
    return rows[(rec.tenant, True)] > rows[(rec.tenant, False)] and rows[(donor, True)] < rows[(donor, False)]


def other_world(con: duckdb.DuckDBPyConnection, rec: Recommendation, applied: bool):
    """The change that turns this month's pool into the world the month did not have: the advice undone when
    it was applied, made when it was not. None when the replay cannot express it (no queue holds the quota)."""
    from pipelines.capacity.recommend import _queue_quota
    from pipelines.capacity.replay import Change

    n = int(rec.quantity)
    if rec.kind in ("add_nodes", "remove_nodes"):
        sign = 1 if rec.kind == "add_nodes" else -1
        return Change(add_nodes={rec.gpu_model: -sign * n if applied else sign * n})
    donor_tenant = rec.target.split("->")[0]
    donor, receiver = _queue_quota(con, donor_tenant, rec.gpu_model), _queue_quota(con, rec.tenant, rec.gpu_model)
    if donor is None or receiver is None:
        return None
    moved = -n if applied else n  # undo: the receiver gives the GPUs back
    return Change(quotas={(donor[0], rec.gpu_model): max(donor[1] - moved, 0.0),
                          (receiver[0], rec.gpu_model): max(receiver[1] + moved, 0.0)})


def judge(rec: Recommendation, applied: bool | None, result) -> dict:
    """The verdict on last month's advice from a what-if of this month (replay.WhatIfResult: `baseline` this
    month's pool as it was, `changed` the other world), as recorded in its whatif_json `review`."""
    from pipelines.capacity.recommend import _confirms, _key_wait_s

    as_was, other = result.baseline, result.changed
    with_change, without = (as_was, other) if applied else (other, as_was)
    key_with, key_without = _key_wait_s(rec, with_change), _key_wait_s(rec, without)
    helped = _confirms(rec, key_without, key_with)
    within = result.within_tolerance
    verdict = ("not_relied_on" if not within else "not_credited" if not helped
               else "credited" if applied else "would_have_helped")
    model = rec.gpu_model or "pool"
    return {
        "month": result.month_start.isoformat(), "days": result.days, "applied": applied,
        "other_world": result.change.describe(), "baseline_within_tolerance": within, "helped": helped,
        "verdict": verdict, "decided_by": f"wait_p95_{model}_min",
        "wait_p95_min": {"observed": result.observed.wait_p95_s / 60, "with_change": with_change.wait_p95_s / 60,
                         "without_change": without.wait_p95_s / 60},
        f"wait_p95_{model}_min": {"with_change": key_with / 60, "without_change": key_without / 60},
        "key_wait_p95_min": {"with_change": key_with / 60, "without_change": key_without / 60},
    }


def review_previous(home: Path | str, month: dt.date, *, parallel: bool = True,
                    on_step: Callable[[str], None] = lambda _m: None) -> dict | None:
    """Judge the previous month's top advice on `month`'s demand (module doc) and record the verdict in its
    whatif_json; returns the review, or None when there is no such advice or the replay cannot express it.
    `parallel`: the two replays side by side (replay.whatif forks a process: not from a process whose other
    threads may hold locks, such as a long test session)."""
    from pipelines.capacity.replay import whatif
    from pipelines.warehouse import Warehouse

    wh = Warehouse(Path(home))
    with wh.connect(read_only=True) as con:
        rec = top_advice(con, month)
        if rec is None:
            return None
        applied = was_applied(con, rec, month)
        change = other_world(con, rec, bool(applied))
    if change is None:
        return None
    on_step(f"judging {_previous(month):%Y-%m}'s top advice ({rec.kind} {rec.target}, "
            f"{ {True: 'applied', False: 'not applied'}.get(applied, 'not visible') }) on {month:%Y-%m}'s demand: "
            f"replaying the month as it was and with {change.describe()}")
    result = whatif(wh.home, change, month=f"{month:%Y-%m}", parallel=parallel, on_step=on_step)
    review = judge(rec, applied, result)
    with wh.writer() as con:
        stored = con.execute("select whatif_json from governance.capacity_recommendations "
                             "where period_month = ? and rank = 1", [_previous(month)]).fetchall()
        whatif_json = json.loads((stored[0][0] if stored else None) or "{}")
        con.execute("update governance.capacity_recommendations set whatif_json = ? where period_month = ? and rank = 1",
                    [json.dumps({**whatif_json, "review": review}, sort_keys=True, default=str), _previous(month)])
    on_step(f"verdict on {_previous(month):%Y-%m}'s advice: {review['verdict']}")
    return review
