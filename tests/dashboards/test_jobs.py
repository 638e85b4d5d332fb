"""The Jobs page: failures by reason, retries and their GPU-hours, jobs past their declared time,
oversized requests, for an operator and a tenant member."""
from __future__ import annotations

import datetime as dt

import streamlit as st

from dashboards.i18n import STRINGS
from tests.dashboards.conftest import errors, frames, signed_in, tenants_shown


def test_operator(dashboard_env):
    at = signed_in("ops", "jobs")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_jobs"]["en"]
    assert len(at.metric) == 4  # failure rate, failed jobs, retries, preemptions of the window
    # failures by reason, their GPU-hours, retry GPU-hours, overrun steps, rightsizable GPU-hours
    assert len(at.get("vega_lite_chart")) >= 4
    late = next(df for df in frames(at) if "expected_runtime_s" in df.columns)
    assert len(late) and (late["run_time_s"] > late["expected_runtime_s"].fillna(late["time_limit_s"])).all()
    assert len(tenants_shown(at)) > 1
    assert any("rightsizable_gpu_hours" in df.columns for df in frames(at))


def test_tenant_member_sees_only_their_jobs(dashboard_env):
    at = signed_in("vic", "jobs", tenant="nlp")
    assert errors(at) == []
    assert tenants_shown(at) == {"vision"}
    assert len(at.get("vega_lite_chart")) >= 3


def test_filters_in_the_url(dashboard_env):
    at = signed_in("ops", "jobs", tenant="research", model="A100", **{"from": "2026-11-01", "to": "2026-11-01"})
    assert errors(at) == []
    assert tenants_shown(at) <= {"research"}
    for df in frames(at):
        if "gpu_model" in df.columns:
            assert set(df["gpu_model"].dropna().unique()) <= {"A100"}
        if "submitted_at" in df.columns and len(df):
            assert {d.date() for d in df["submitted_at"]} == {dt.date(2026, 11, 1)}


def test_chinese(dashboard_env):
    at = signed_in("vic", "jobs", lang="zh")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_jobs"]["zh"]
    assert any(s.value == STRINGS["failures_by_reason"]["zh"] for s in at.subheader)


def test_no_warehouse_says_so(dashboard_env, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPOOL_HOME", str(tmp_path))
    st.cache_data.clear()  # a clean slate: nothing cached from the other tests
    at = signed_in("ops", "jobs")
    assert [e.value for e in at.exception] == []
    assert any(STRINGS["no_warehouse"]["en"] in w.value for w in at.warning)
