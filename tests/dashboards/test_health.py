"""The Health and failures page: failures and GPU-hours lost by cause, the bad GPUs, MTBF per model,
the hosts' CPU/memory/network/disk and the drains, for an operator and a tenant member; its figures
are the metrics views' rows."""
from __future__ import annotations

import duckdb
import pytest
import streamlit as st

from dashboards.i18n import STRINGS
from pipelines.lake.reader import search_config
from tests.dashboards.conftest import errors, frames, shown_number, signed_in


def _causes_table(at):
    return next(df for df in frames(at) if "not_user_fault_pct" in df.columns and "tenant" not in df.columns)


def test_operator(dashboard_env):
    at = signed_in("ops", "health")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_health"]["en"]
    # failures and GPU-hours lost by cause, share per tenant, MTBF, host heatmap
    assert len(at.get("vega_lite_chart")) >= 4
    labels = [m.label for m in at.metric]
    assert "Failures not the user's fault" in " ".join(labels), labels  # catalog labels, not column names
    causes = _causes_table(at)
    shown = set(causes["cause"])
    assert STRINGS["cause_all"]["en"] in shown and STRINGS["cause_user_code"]["en"] in shown
    assert not shown & {"user_code", "out_of_memory", "all"}  # words, never the view's keys
    # the pool's row equals the view's rows summed (counts) and its definition (rates) over the tenants
    con = duckdb.connect(str(dashboard_env / "warehouse.duckdb"), read_only=True, config=search_config(dashboard_env))
    try:
        attempts, failures, lost, not_user = con.execute(
            "select sum(attempts), sum(failures), sum(gpu_hours_lost), "
            "100.0 * sum(failures) filter (where cause not in ('user_code', 'out_of_memory', 'all')) "
            "/ sum(failures) filter (where cause = 'all') from metrics.failure_causes where tenant <> 'all'").fetchone()
        faulty = con.execute("select count(*) from metrics.gpu_faults").fetchone()[0]
        hosts = con.execute("select count(distinct host) from metrics.host_daily").fetchone()[0]
    finally:
        con.close()
    pool = causes[causes["cause"] == STRINGS["cause_all"]["en"]].iloc[0]
    figures = {c: shown_number(pool[c]) for c in ("attempts", "failures", "gpu_hours_lost", "not_user_fault_pct")}
    assert figures["attempts"] * 2 == attempts and figures["failures"] * 2 == failures  # 'all' rows: half the sum
    assert figures["gpu_hours_lost"] * 2 == pytest.approx(lost, abs=0.1)  # as shown: to 0.1 GPU-h
    assert figures["not_user_fault_pct"] == pytest.approx(float(not_user), abs=0.05)
    history = next(df for df in frames(at) if "xids_seen" in df.columns)
    assert len(history) == faulty > 0 and {"is_repeat_offender", "application_xids"} <= set(history.columns)
    assert any("mtbf_gpu_hours" in df.columns for df in frames(at))
    assert any(STRINGS["h_hosts_caption"]["en"].split(":")[0] in c.value for c in at.caption)
    assert hosts > 0


def test_tenant_member_sees_their_failures(dashboard_env):
    at = signed_in("vic", "health", tenant="nlp")  # a tenant in the URL cannot widen a member's scope
    assert errors(at) == []
    per_tenant = next(df for df in frames(at) if "tenant" in df.columns and "cause" in df.columns)
    assert set(per_tenant["tenant"]) == {"vision"}


def test_chinese_and_host_measure(dashboard_env):
    at = signed_in("ops", "health", lang="zh")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_health"]["zh"]
    assert STRINGS["cause_user_code"]["zh"] in set(_causes_table(at)["cause"])
    measure = at.selectbox(key="h_measure")
    assert "存储读取速率" in measure.options  # the catalog's Chinese label of disk_read_bytes_per_s_mean
    measure.select_index(measure.options.index("存储读取速率")).run()
    assert errors(at) == []
    assert at.selectbox(key="h_measure").value == "disk_read_bytes_per_s_mean"


def test_no_warehouse_says_so(dashboard_env, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPOOL_HOME", str(tmp_path))
    st.cache_data.clear()
    at = signed_in("ops", "health")
    assert [e.value for e in at.exception] == []
    assert any(STRINGS["no_warehouse"]["en"] in w.value for w in at.warning)
