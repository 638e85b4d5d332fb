"""Confidence from the evidence: weeks of data are days / 7, thin evidence weighs less and is never "high", a
what-if whose baseline misses the observed month lowers it and says why, and advice names the smallest
sufficient change first. Pure functions, plus the rules on the 3-day demo month."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from pipelines.capacity.recommend import (
    THIN_EVIDENCE_CEILING,
    _confidence,
    load_rules,
    on_evidence,
    recommend,
    smallest_first,
    weighed,
    with_whatif,
)
from pipelines.capacity.store import Recommendation
from pipelines.warehouse import Warehouse

RULES = load_rules()
NEED = RULES["min_weeks_for_high_confidence"]


def seen_every_day(days: int, trend_agrees: bool | None = True) -> float:
    """The confidence of evidence that shows up on every one of `days` days with data."""
    return weighed(_confidence(1.0, days / 7, RULES, trend_agrees=trend_agrees), days / 7, RULES)


def advice(weeks_of_data: float, score: float = 0.6) -> Recommendation:
    return Recommendation(kind="add_nodes", target="H100", recommendation="Add 8 nodes of H100 (64 GPUs): work waited.",
                          recommendation_zh="增加 8 台 H100 节点（64 块 GPU）：作业等待。", quantity=8, unit="nodes",
                          confidence_score=score, impact_gpu_hours=1.0, gpu_model="H100",
                          evidence={"gpus_per_node": 8, "weeks_of_data": weeks_of_data})


def replayed(confirms: bool | None, within_tolerance: bool) -> dict:
    return {"confirms": confirms, "baseline_within_tolerance": within_tolerance,
            "wait_p95_min": {"observed": 100.0, "baseline": 160.0, "changed": 40.0}}


def test_three_days_of_a_pattern_weigh_clearly_less_than_thirty_days_of_it():
    three, thirty = seen_every_day(3), seen_every_day(30)
    assert three < thirty - 0.3
    assert Recommendation("add_nodes", "H100", "", "", 1, "nodes", three, 0, {}).confidence == "low"
    assert Recommendation("add_nodes", "H100", "", "", 1, "nodes", thirty, 0, {}).confidence == "high"


@pytest.mark.parametrize("trend_agrees", [True, None, False])
def test_more_days_of_the_same_evidence_never_lower_confidence(trend_agrees):
    scores = [seen_every_day(days, trend_agrees) for days in range(1, 32)]
    assert scores == sorted(scores)


def test_high_only_from_the_rules_minimum_weeks_of_data():
    just_short = NEED * 7 - 1
    assert seen_every_day(just_short) <= THIN_EVIDENCE_CEILING < 0.7
    assert seen_every_day(NEED * 7) >= 0.7


def test_thin_data_never_raises_a_score():
    assert weighed(0.1, 3 / 7, RULES) == pytest.approx(0.1)


def test_evidence_records_days_and_weeks_of_data():
    rec = on_evidence(advice(0.0, score=0.8), days_with_data=3, days_in_month=30, rules=RULES)
    assert rec.evidence["days_with_data"] == 3 and rec.evidence["days_in_month"] == 30
    assert rec.evidence["weeks_of_data"] == pytest.approx(0.43)
    assert rec.confidence_score < 0.4


def test_a_confirming_replay_raises_confidence_but_never_lifts_thin_evidence_to_high():
    assert with_whatif(advice(4.0), replayed(True, True), RULES).confidence_score == pytest.approx(0.75)
    assert with_whatif(advice(3 / 7), replayed(True, True), RULES).confidence_score == THIN_EVIDENCE_CEILING


def test_a_baseline_outside_tolerance_lowers_confidence_and_says_why():
    before = advice(4.0)
    trusted = with_whatif(before, replayed(True, True), RULES)
    off = with_whatif(before, replayed(True, False), RULES)
    assert off.confidence_score < before.confidence_score < trusted.confidence_score
    assert "Confidence lowered" in off.recommendation and "beyond tolerance" in off.recommendation
    assert "100 min observed, 160 min replayed" in off.recommendation
    assert "置信度已下调" in off.recommendation_zh and "超出容差" in off.recommendation_zh
    assert "Confidence lowered" not in trusted.recommendation


def search(smallest: int | None, advised: int = 8) -> dict:
    waits = {0: 600.0, 3: 50.0, advised: 10.0}
    return {"smallest_sufficient": smallest, "advised": advised, "decided_by": "wait_p95_H100_min",
            "curve": [{"size": n, "wait_p95_H100_min": w} for n, w in waits.items()]}


def test_advice_names_the_smallest_sufficient_change_first_and_the_full_change_beside_it():
    rec = smallest_first(advice(4.0), search(3))
    assert rec.recommendation.startswith("Add 3 nodes of H100 (24 GPUs) first")
    assert "H100 wait p95 600 -> 50 min; 10 min with the full change" in rec.recommendation
    assert rec.recommendation.endswith("Full change: Add 8 nodes of H100 (64 GPUs): work waited.")
    assert rec.recommendation_zh.startswith("先增加 3 台 H100 节点（24 块 GPU）")
    assert rec.recommendation_zh.endswith("完整变更：增加 8 台 H100 节点（64 块 GPU）：作业等待。")
    assert rec.quantity == 8  # the rule's size stays the advice's quantity


@pytest.mark.parametrize("smallest", [8, None])
def test_advice_is_unchanged_when_the_full_change_is_the_smallest_or_none_suffices(smallest):
    assert smallest_first(advice(4.0), search(smallest)) == advice(4.0)


@pytest.mark.slow
def test_three_days_of_the_demo_give_no_high_confidence(small_demo_home: Path):
    with Warehouse(small_demo_home).connect(read_only=True) as con:
        found = recommend(con, dt.date(2026, 11, 1), RULES)
    assert found
    assert all(r.evidence["days_with_data"] == 3 and r.evidence["weeks_of_data"] == pytest.approx(0.43)
               for r in found)
    assert all(r.confidence != "high" for r in found)
