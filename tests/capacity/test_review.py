"""The fair judge of last month's advice (pipelines/capacity/review.py, page 1's question 1): this month's
demand replayed with and without the advice, not last month's prediction against this month's outcome."""
from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest

from pipelines.capacity.replay import Change, Figures, WhatIfResult
from pipelines.capacity.review import judge, other_world, review_previous, top_advice, was_applied
from pipelines.capacity.store import Recommendation, write_month
from pipelines.pack import questions as q
from pipelines.pack.figures import Figures as PackFigures
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home

NOVEMBER = dt.date(2026, 11, 1)
OCTOBER = dt.date(2026, 10, 1)


def _advice(kind: str = "add_nodes") -> Recommendation:
    return Recommendation(kind=kind, target="H100", recommendation="Add 1 node of H100 (8 GPUs)",
                          recommendation_zh="增加 1 台 H100 节点", quantity=1, unit="nodes", confidence_score=0.6,
                          impact_gpu_hours=100.0, evidence={"gpus_per_node": 8}, gpu_model="H100",
                          whatif={"wait_p95_min": {"baseline": 30.0, "changed": 10.0}, "confirms": True})


def _figures(wait_min: float, h100_min: float) -> Figures:
    return Figures(jobs=1000, jobs_started=990, wait_p50_s=600.0, wait_p95_s=wait_min * 60,
                   wait_p95_by_model_s={"H100": h100_min * 60}, capacity_gpu_hours=10_000.0,
                   allocated_gpu_hours=7_000.0, active_gpu_hours=5_000.0, idle_gpu_hours=300.0)


def _result(observed: Figures, as_was: Figures, other: Figures, change: Change) -> WhatIfResult:
    return WhatIfResult(NOVEMBER, 30, change, True, observed, as_was, other, {})


def test_advice_applied_while_demand_rose_is_credited():
    """Last month's replay predicted a 30 min wait p95; demand rose and this month's was 120 min, which the old
    Q1 called 300% off ("act"). Replayed on this month's demand, the pool with the added node waits 118 min
    (the month as it was, within tolerance) and the pool without it 400 min: the advice is credited."""
    rec = _advice()
    result = _result(_figures(120, 150), _figures(118, 148), _figures(400, 520), Change(add_nodes={"H100": -1}))
    review = judge(rec, True, result)
    assert review["verdict"] == "credited" and review["helped"] and review["baseline_within_tolerance"]
    assert review["key_wait_p95_min"] == {"with_change": 148, "without_change": 520}
    assert q.prediction_status(100 * abs(120 - 30) / 30) == "act"  # what the old comparison said
    row = {"rank": 1, "kind": "add_nodes", "target": "H100", "gpu_model": "H100", "physical_gpus_previous_month": 24,
           "physical_gpus": 32, "predicted_baseline_wait_p95_s": 1800.0, "predicted_wait_p95_s": 600.0,
           "queue_wait_p95_s": 7200.0, "review_verdict": review["verdict"], "review_applied": True,
           "replayed_wait_p95_with_change_s": 148 * 60.0, "replayed_wait_p95_without_change_s": 520 * 60.0}
    figs = PackFigures(month=NOVEMBER, catalog_version="test", release_id=1, tables={"advice_outcome": pl.DataFrame([row])},
                       values={"allocated_gpu_hours": 9000.0}, previous={"allocated_gpu_hours": 6000.0})
    q1 = q._q1(figs)
    assert q1.status == "on_track" and q1.value == pytest.approx(100 * (520 - 148) / 520)
    assert "148 min with it, 520 min without" in q1.answer["en"] and "credited" in q1.answer["en"]
    assert "建议有效" in q1.answer["zh"]


def test_other_verdicts_and_q5_takes_q1s_record():
    rec = _advice()
    change = Change(add_nodes={"H100": 1})
    # not applied, and the replay with it waits less: it would have helped
    assert judge(rec, False, _result(_figures(120, 150), _figures(119, 150), _figures(60, 70), change))["verdict"] \
        == "would_have_helped"
    # no better with it: not credited
    assert judge(rec, False, _result(_figures(120, 150), _figures(119, 150), _figures(119, 150), change))["verdict"] \
        == "not_credited"
    # the month as it was not reproduced: neither replay is evidence
    assert judge(rec, True, _result(_figures(120, 150), _figures(30, 40), _figures(400, 520), change))["verdict"] \
        == "not_relied_on"
    assert [q.REVIEW_STATUS[v] for v in ("credited", "would_have_helped", "not_credited", "not_relied_on")] == \
        ["on_track", "watch", "act", "watch"]
    recs = pl.DataFrame([{"kind": "add_nodes", "confidence": "high", "impact_gpu_hours": 10.0,
                          "whatif_confirms": True, "whatif_within_tolerance": True}])
    figs = PackFigures(month=NOVEMBER, catalog_version="test", release_id=1, tables={"capacity_recommendations": recs})
    assert q._q5(figs).status == "on_track"
    q5 = q._q5(figs, track_record="act")
    assert q5.status == "watch" and "did not hold up" in q5.answer["en"] and "问题1" in q5.answer["zh"]


def test_the_other_world_undoes_or_makes_the_change():
    assert other_world(None, _advice(), applied=True) == Change(add_nodes={"H100": -1})
    assert other_world(None, _advice(), applied=False) == Change(add_nodes={"H100": 1})


def test_review_replays_this_months_demand_and_records_the_verdict(advised_demo_home, tmp_path):
    """October's top advice (+1 H100 node) judged on November's demand of the small demo: the demo has no
    October inventory, so whether it was applied cannot be seen and it is judged as not applied; the verdict
    is stored in October's whatif_json and read by the pack's advice_outcome table."""
    home = copy_home(advised_demo_home, tmp_path / "gpupool")
    with Warehouse(home).writer() as con:
        write_month(con, OCTOBER, [_advice()], "test", dt.datetime(2026, 11, 1))
    with Warehouse(home).connect(read_only=True) as con:
        rec = top_advice(con, NOVEMBER)
        assert rec is not None and rec.kind == "add_nodes" and was_applied(con, rec, NOVEMBER) is None
    review = review_previous(home, NOVEMBER, parallel=False)  # no fork from the test session's threads
    assert review is not None and review["applied"] is None and review["other_world"] == "+1 H100 node"
    assert review["verdict"] in ("credited", "would_have_helped", "not_credited", "not_relied_on")
    with Warehouse(home).connect(read_only=True) as con:
        stored = json.loads(con.execute("select whatif_json from metrics.capacity_recommendations "
                                        "where period_month = ?", [OCTOBER]).fetchall()[0][0])
        from pipelines.pack.figures import TABLES, table_frame

        outcome = table_frame(con, next(t for t in TABLES if t.key == "advice_outcome"), NOVEMBER)
    assert stored["review"] == review and stored["confirms"] is True  # the advice's own what-if is kept
    assert outcome["review_verdict"][0] == review["verdict"]
    assert outcome["replayed_wait_p95_with_change_s"][0] == pytest.approx(review["key_wait_p95_min"]["with_change"] * 60)


def test_a_quota_move_is_seen_applied_in_the_two_tenants_quotas():
    import duckdb

    rec = Recommendation(kind="move_quota", target="nlp->research:H100", recommendation="Move 2", recommendation_zh="调 2",
                         quantity=2, unit="quota GPUs", confidence_score=0.5, impact_gpu_hours=10.0, evidence={},
                         gpu_model="H100", tenant="research")
    con = duckdb.connect()
    con.execute("create schema metrics")
    con.execute("create table metrics.tenant_quota (day date, tenant varchar, gpu_model varchar, quota_gpus double)")
    con.execute("create table metrics.queue_rules (queue varchar, tenant varchar, gpu_model varchar, quota_gpus double)")
    con.executemany("insert into metrics.tenant_quota values (?, ?, 'H100', ?)", [
        ("2026-10-15", "nlp", 8), ("2026-10-15", "research", 4), ("2026-11-15", "nlp", 6), ("2026-11-15", "research", 6)])
    con.executemany("insert into metrics.queue_rules values (?, ?, 'H100', ?)",
                    [("nlp-train", "nlp", 6), ("research-train", "research", 6)])
    assert was_applied(con, rec, NOVEMBER) is True
    # applied: the other world gives the GPUs back
    assert other_world(con, rec, applied=True) == Change(quotas={("nlp-train", "H100"): 8, ("research-train", "H100"): 4})
    con.execute("update metrics.tenant_quota set quota_gpus = 4 where tenant = 'research' and day = '2026-11-15'")
    assert was_applied(con, rec, NOVEMBER) is False
    con.execute("delete from metrics.tenant_quota where tenant = 'nlp' and day = '2026-10-15'")
    assert was_applied(con, rec, NOVEMBER) is None  # a month without the donor's quota: cannot be seen
