"""The Capacity page: recommendations with their evidence and what-if, headroom and the weekly
trend, for an operator and a tenant member."""
from __future__ import annotations

import json

import streamlit as st

from dashboards.i18n import STRINGS
from dashboards.views.capacity import _coverage, _figures, _search_curve, _whatif
from tests.dashboards.conftest import errors, frames, signed_in


def advice(at) -> list[str]:
    return [e.label for e in at.expander if e.label.startswith("#")]


def test_operator(dashboard_env):
    at = signed_in("ops", "capacity")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_capacity"]["en"]
    recs = advice(at)
    assert recs and recs[0].startswith("#1 ")
    assert all("confidence" in label.lower() for label in recs)
    # every recommendation's evidence as a figure/value table
    assert sum(list(df.columns) == ["figure", "value"] for df in frames(at)) == len(recs)
    assert len(at.get("vega_lite_chart")) >= 3  # impact, headroom, weekly headroom (3 days: no complete week)
    assert any(STRINGS["no_trend"]["en"] in i.value for i in at.info)
    headroom = next(df for df in frames(at) if "headroom_at_p95_gpus" in df.columns)
    assert set(headroom["gpu_model"]) >= {"H100"}


def test_tenant_member_sees_pool_advice_and_their_own(dashboard_env):
    at = signed_in("vic", "capacity")
    assert errors(at) == []
    queues = next(df for df in frames(at) if "quota_headroom_at_p95_gpus" in df.columns)
    assert set(queues["tenant"]) <= {"vision"}
    assert advice(at)


def test_quota_advice_follows_the_tenant_filter(dashboard_env):
    everything = advice(signed_in("ops", "capacity"))
    quota = [a for a in everything if "move_quota" in a]
    assert quota
    donor = quota[0].split(" · ")[2].split("->")[0]
    mine = advice(signed_in("ops", "capacity", tenant=donor))
    assert quota[0] in mine  # the donor sees the quota it would give away
    assert all("move_quota" not in a or donor in a for a in mine)


def test_model_filter_in_the_url(dashboard_env):
    at = signed_in("ops", "capacity", model="H100")
    assert errors(at) == []
    for df in frames(at):
        if "gpu_model" in df.columns:
            assert set(df["gpu_model"].dropna().unique()) <= {"H100"}


def test_chinese_shows_the_chinese_advice(dashboard_env):
    at = signed_in("ops", "capacity", lang="zh")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_capacity"]["zh"]
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in m.value) for m in at.markdown if m.value)


def test_no_warehouse_says_so(dashboard_env, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPOOL_HOME", str(tmp_path))
    st.cache_data.clear()  # a clean slate: nothing cached from the other tests
    at = signed_in("ops", "capacity")
    assert [e.value for e in at.exception] == []
    assert any(STRINGS["no_warehouse"]["en"] in w.value for w in at.warning)


def test_an_advices_coverage_is_one_row_per_kind_of_source_with_its_name():
    coverage = {"first_day": "2026-11-01", "last_day": "2026-11-30", "days_in_period": 30, "days_with_data": 12,
                "partial": True, "required": ["gpu_telemetry", "scheduler"], "view": "metrics.ingest_daily",
                "by_source": {
                    "gpu_telemetry": {"days_with_data": 12, "sources": ["dcgm_parquet"], "required": True, "collected": True},
                    "scheduler": {"days_with_data": 0, "sources": [], "required": True, "collected": False},
                    "audit": {"days_with_data": 0, "sources": [], "required": False, "collected": False},
                    "other": {"days_with_data": 3, "sources": ["custom_feed"], "required": False, "collected": True}}}
    line, kinds = _coverage(coverage)
    assert line == "12 of 30 days with data · 2026-11-01 – 2026-11-30 · metrics.ingest_daily"
    assert kinds.rows() == [  # a kind neither held nor required is left out
        ("GPU telemetry (DCGM)", "12", "✓", "dcgm_parquet"),
        ("Scheduler and allocator events", "not collected", "✓", "–"),
        ("Other sources", "3", "–", "custom_feed"),
    ]
    line_zh, kinds_zh = _coverage(coverage, "zh")
    assert line_zh.startswith("30天中12天有数据") and kinds_zh["days_with_data"][1] == "未采集"


def test_json_readably():
    evidence = _figures({"capacity_gpus": 96, "share": 0.36946, "views": ["a", "b"], "w": {"x": 1}})
    assert dict(evidence.iter_rows()) == {"capacity_gpus": "96", "share": "0.37", "views": "a, b", "w.x": "1"}
    whatif = _whatif(json.dumps({"confirms": True, "wait_p95_min": {"baseline": 10.0, "changed": 2.5}}))
    assert whatif.row(0) == ("wait_p95_min", "10 min", "2 min 30 s", "–")  # minutes of wait as durations
    zh = _whatif(json.dumps({"pool_utilisation_pct": {"baseline": 20.0, "changed": 22.5}}), "zh")
    assert zh.row(0) == ("pool_utilisation_pct", "20%", "22.5%", "–")
    assert _figures({}).is_empty()


def test_the_smallest_change_search_shows_as_its_curve_not_as_a_what_if_row():
    point = {"wait_p95_min": 300.0, "wait_p95_H100_min": 800.0, "pool_utilisation_pct": 22.0,
             "share_of_full_effect": 0.0, "sufficient": False, "replay_seconds": 5.0}
    doc = {"wait_p95_min": {"baseline": 300.0, "changed": 250.0}, "smallest_change": "+1 H100 node",
           "search": {"decided_by": "wait_p95_H100_min", "smallest_change": "+1 H100 node", "curve": [
               {**point, "size": 0, "change": "baseline"},
               {**point, "size": 1, "change": "+1 H100 node", "wait_p95_H100_min": 150.0,
                "share_of_full_effect": 0.82, "sufficient": True}]}}
    assert _whatif(json.dumps(doc))["measure"].to_list() == ["wait_p95_min"]
    search, curve = _search_curve(json.dumps(doc))
    assert search["smallest_change"] == "+1 H100 node"
    assert curve["change"].to_list() == ["baseline", "+1 H100 node"]
    assert curve["sufficient"].to_list() == [False, True]
    assert curve.columns == ["change", "wait_p95_H100_min", "wait_p95_min", "pool_utilisation_pct",
                             "share_of_full_effect", "sufficient"]
    assert _search_curve(json.dumps({"confirms": True})) is None
