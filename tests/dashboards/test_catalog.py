"""The Metric catalog page: every metric's definition, formula, unit, grain, view and column and its
English and Chinese labels, grouped and searchable, the search and group kept in the URL."""
from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st

from dashboards.i18n import STRINGS
from pipelines.catalog import load_catalog
from tests.dashboards.conftest import errors, labelled, signed_in

CATALOG = load_catalog()


def tables(at):
    """The tables with their headings as shown (the page's language)."""
    return [labelled(d) for d in at.dataframe]


def names(at) -> set[str]:
    return {n for d in at.dataframe for n in d.value["name"]}


@pytest.mark.parametrize("who", ["ops", "vic"])
def test_every_metric_grouped_with_both_labels(dashboard_env, who):
    at = signed_in(who, "catalog")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_catalog"]["en"]
    assert names(at) == {m.name for m in CATALOG.metrics}
    assert [s.value.split(" (")[0] for s in at.subheader] == ["Resource", "Task", "Governance"]
    first = tables(at)[0]
    assert {"English", "Chinese", "Unit", "Grain", "View.column", "Formula", "Definition"} <= set(first.columns)
    row = first[first["Name"] == "allocated_gpu_hours"].iloc[0]
    assert (row["English"], row["Chinese"], row["View.column"]) == (
        "Allocated GPU-hours", "已分配GPU小时", "metrics.pool_daily.allocated_gpu_hours")
    assert any(f"Catalog version {CATALOG.version}" in c.value for c in at.caption)


def test_search_and_group_in_the_url(dashboard_env):
    at = signed_in("ops", "catalog", q="quarantine", group="governance")
    assert errors(at) == []
    assert at.text_input(key="f_q").value == "quarantine"
    found = names(at)
    assert {"records_quarantined", "quarantined_share", "quarantined_rows_by_reason"} <= found
    assert all(CATALOG.metric(n).group == "governance" for n in found)
    assert len(at.subheader) == 1


def test_search_in_chinese_shows_chinese_columns(dashboard_env):
    at = signed_in("ops", "catalog", lang="zh", q="隔离")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_catalog"]["zh"]
    assert names(at) == {m.name for m in CATALOG.metrics if "隔离" in m.label_zh + m.description + m.description_zh}
    assert list(tables(at)[0].columns)[:3] == ["指标", "英文", "中文"]


def test_the_definitions_in_chinese(dashboard_env):
    """In Chinese the table's and the card's definitions are the catalog's description_zh."""
    at = signed_in("ops", "catalog", lang="zh", group="governance", metric="hours_since_last_ingest")
    assert errors(at) == []
    metric = CATALOG.metric("hours_since_last_ingest")
    row = tables(at)[0].set_index("名称").loc["hours_since_last_ingest"]
    assert row["定义"] == metric.description_zh
    assert any(metric.description_zh in m.value for m in at.markdown)
    assert not any(metric.description in m.value for m in at.markdown)


def test_a_metric_definition_from_the_url(dashboard_env):
    at = signed_in("ops", "catalog", metric="hours_since_last_ingest")
    assert errors(at) == []
    assert at.selectbox(key="c_metric").value == "hours_since_last_ingest"
    assert any("Hours since last ingest" in m.value and "距上次摄取小时数" in m.value for m in at.markdown)
    assert any("max(finished_at)" in c.value for c in at.code)


def test_typing_a_search_with_no_match(dashboard_env):
    at = signed_in("ops", "catalog")
    at.text_input(key="f_q").input("nothing-like-this").run()
    assert errors(at) == []
    assert any(STRINGS["c_no_match"]["en"] in i.value for i in at.info)
    assert at.dataframe == []


def test_no_warehouse(dashboard_env, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("GPUPOOL_HOME", str(tmp_path / "nothing"))
    st.cache_data.clear()
    try:
        at = signed_in("ops", "catalog")
        assert errors(at) == []
        assert any(STRINGS["no_warehouse"]["en"] in w.value for w in at.warning)
    finally:
        st.cache_data.clear()
