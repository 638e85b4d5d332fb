"""The Jobs page: failures by reason, retries and their GPU-hours, jobs past their declared time,
oversized requests, checkpoints and artifacts, for an operator and a tenant member."""
from __future__ import annotations

import datetime as dt

import duckdb
import pytest
import streamlit as st

from dashboards.i18n import STRINGS
from pipelines.lake.reader import search_config
from tests.dashboards.conftest import errors, frames, shown_day, shown_numbers, signed_in, tenants_shown


def test_operator(dashboard_env):
    at = signed_in("ops", "jobs")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_jobs"]["en"]
    # failure rate, failed jobs, retries, preemptions of the window; breach rate, breaches, work lost,
    # failed attempts without a checkpoint of the months
    assert len(at.metric) == 8
    # failures by reason, their GPU-hours, retry GPU-hours, overrun steps, rightsizable GPU-hours
    assert len(at.get("vega_lite_chart")) >= 4
    late = next(df for df in frames(at) if "expected_runtime_s" in df.columns)
    # durations as shown ("1 h 5 min": to the minute past an hour, so the comparison is not strict)
    declared = [e if e is not None else t for e, t in zip(shown_numbers(late["expected_runtime_s"]),
                                                            shown_numbers(late["time_limit_s"]), strict=True)]
    assert len(late) and all(r >= d for r, d in zip(shown_numbers(late["run_time_s"]), declared, strict=True))
    assert len(tenants_shown(at)) > 1
    assert any("rightsizable_gpu_hours" in df.columns for df in frames(at))


def _one(home, sql: str):
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home))
    try:
        return con.execute(sql).fetchone()
    finally:
        con.close()


def test_checkpoints_and_artifacts_are_the_views_figures(dashboard_env):
    """The demo month's checkpoint figures on the page equal the views' (pool level: the tenants' rows
    summed; the rate: breaches over the attempts judged), with words, not raw keys, for readers."""
    at = signed_in("ops", "jobs")
    assert errors(at) == []
    shown = {m.label: m.value for m in at.metric}
    breaches, judged, lost, without = _one(dashboard_env, "select sum(policy_breaches), sum(attempts_with_time_policy), "
                                           "(select sum(work_lost_gpu_hours) from metrics.work_lost), "
                                           "(select sum(attempts_without_checkpoint) from metrics.work_lost) "
                                           "from metrics.checkpoint_policy_breaches")
    assert lost > 0 and breaches > 0
    assert shown["Checkpoint policy breaches"] == f"{breaches:,}"
    assert shown["Checkpoint policy breach rate"] == f"{100 * breaches / judged:,.1f} %"
    assert shown["Work lost at interruptions"] == f"{lost:,.1f}"
    assert shown["No checkpoint (failed)"] == f"{without:,}"  # a short label; the catalog's in the help
    offenders = next(df for df in frames(at) if "policy_breaches" in df.columns)
    counts = shown_numbers(offenders["policy_breaches"])
    assert sum(counts) == breaches and all(c > 0 for c in counts)
    stale = next(df for df in frames(at) if "checkpoint_age_s" in df.columns)
    ages = shown_numbers(stale["checkpoint_age_s"])  # durations, to the minute (the hour past two days)
    running = _one(dashboard_env, "select count(distinct (source, job_id, attempt)), max(checkpoint_age_s) "
                                  "from metrics.checkpoint_age where is_running")
    assert len(stale) == min(running[0], 30) and ages[0] == pytest.approx(running[1], abs=3600)
    assert ages == sorted(ages, reverse=True) and "None" not in set(stale["last_ok_checkpoint_at"])
    assert any(s.value == STRINGS["checkpoints"]["en"] for s in at.subheader)
    assert any(s.value == "Checkpoint / model-artifact status" for s in at.subheader)
    specs = [str(c.proto) for c in at.get("vega_lite_chart")]  # spec and data
    assert any("Registered model" in s and "No artifact" in s for s in specs)  # status words, not keys
    assert any("since the last checkpoint" in s and "Preempted" in s for s in specs)


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
            assert {shown_day(d) for d in df["submitted_at"]} == {dt.date(2026, 11, 1)}


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
