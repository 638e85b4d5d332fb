"""The Idle and reclaim page: idle allocations with their evidence, governance steps and
enforcement actions, the reclaim ledger and the exemptions (loaded by the model build), for an
operator and a tenant member."""
from __future__ import annotations

import datetime as dt

import polars as pl
import streamlit as st

from dashboards import data
from dashboards.i18n import STRINGS
from pipelines.build_checks import load_exemptions
from pipelines.warehouse import Warehouse
from tests.dashboards.conftest import errors, frames, shown_day, signed_in, tenants_shown


def test_operator_sees_the_pool(dashboard_env):
    at = signed_in("ops", "idle")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_idle"]["en"]
    assert len(at.get("vega_lite_chart")) >= 3  # idle GPU-hours, steps by outcome, ledger per day
    labels = [m.label for m in at.metric]
    assert any("GPU" in label or "recovered" in label.lower() for label in labels), labels
    assert len(tenants_shown(at)) > 1
    # the ongoing idle allocation of the demo is listed with its evidence window and thresholds
    now = frames(at)[0]
    assert {"window_start_at", "idle_minutes", "mean_activity", "activity_threshold", "policy_scope"} <= set(now.columns)
    assert bool(now.shape[0])


def test_tenant_member_sees_only_their_tenant(dashboard_env):
    at = signed_in("vic", "idle", tenant="speech")  # a tenant in the URL cannot widen a member's scope
    assert errors(at) == []
    assert tenants_shown(at) <= {"vision"}
    assert len(at.get("vega_lite_chart")) >= 1
    # the shipped exemption is speech's: a vision member does not see it
    assert any(STRINGS["no_exemptions"]["en"] in i.value for i in at.info)


def test_filters_in_the_url(dashboard_env):
    at = signed_in("ops", "idle", tenant="speech", model="H100", **{"from": "2026-11-02", "to": "2026-11-02"})
    assert errors(at) == []
    assert tenants_shown(at) <= {"speech"}
    for df in frames(at):
        if "gpu_model" in df.columns:
            assert set(df["gpu_model"].unique()) - {"–"} <= {"H100"}
        for column in ("window_start_at", "acted_at", "occurred_at"):
            if column in df.columns and len(df):
                assert {shown_day(d) for d in df[column]} <= {dt.date(2026, 11, 2)}


def test_action_kind_choice_narrows_the_actions(dashboard_env):
    at = signed_in("ops", "idle")
    at.selectbox(key="idle_action_kind").set_value("remind").run()
    assert errors(at) == []
    actions = next(df for df in frames(at) if "decision" in df.columns)
    assert set(actions["action_kind"]) == {"remind"}


def test_chinese(dashboard_env):
    at = signed_in("ops", "idle", lang="zh")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_idle"]["zh"]
    assert any(s.value == STRINGS["reclaim_ledger"]["zh"] for s in at.subheader)


def test_no_warehouse_says_so(dashboard_env, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPOOL_HOME", str(tmp_path))
    st.cache_data.clear()  # a clean slate: nothing cached from the other tests
    at = signed_in("ops", "idle")
    assert [e.value for e in at.exception] == []
    assert any(STRINGS["no_warehouse"]["en"] in w.value for w in at.warning)


def test_exemptions_come_from_the_build_with_their_expiry(dashboard_env, tmp_path, monkeypatch, fresh_cache):
    (tmp_path / "exemptions.yml").write_text(
        "exemptions:\n"
        "  - {tenant: vision, policy: idle-allocation, reason: demo, granted_by: oncall,"
        " expires_at: '2026-12-31T00:00:00Z'}\n"
        "  - {tenant: nlp, reason: old, granted_by: oncall, expires_at: '2026-01-01T00:00:00Z'}\n")
    (tmp_path / "gpupool.yml").write_text("governance:\n  exemptions: exemptions.yml\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "gpupool.yml"))
    wh = Warehouse(dashboard_env)
    try:
        assert load_exemptions(wh) is None
        rows = data.exemptions(dt.datetime(2026, 12, 1))
        assert rows["tenant"].to_list() == ["vision", "nlp"]  # latest expiry first
        assert rows["is_expired"].to_list() == [False, True]
        assert rows["days_left"].to_list() == [30.0, 0.0]
        assert rows.schema["expires_at"] == pl.Datetime("us")
        assert data.exemptions_problem() is None

        # an invalid file keeps the exemptions loaded before, and the page says why
        (tmp_path / "exemptions.yml").write_text("exemptions:\n  - {tenant: vision, reason: x, granted_by: y}\n")
        assert "expires_at" in load_exemptions(wh)
        st.cache_data.clear()
        assert "expires_at" in data.exemptions_problem()
        assert data.exemptions(dt.datetime(2026, 12, 1))["tenant"].to_list() == ["vision", "nlp"]
        at = signed_in("ops", "idle")
        assert errors(at) == []
        assert any(STRINGS["exemptions_unreadable"]["en"] in w.value for w in at.warning)
    finally:
        monkeypatch.delenv("GPUPOOL_CONFIG")
        assert load_exemptions(wh) is None  # the shipped file again, for the other tests
