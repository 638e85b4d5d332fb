"""The Audit page: permission and quota changes, approvals and enforcement, searchable by actor,
action, object and reason; a tenant member sees only the records on their tenant's objects."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb

from dashboards.i18n import STRINGS
from pipelines.lake.reader import search_config
from tests.dashboards.conftest import errors, shown_day, signed_in


def records(at):
    return next(d.value for d in at.dataframe if {"audit_id", "object_namespace"} <= set(d.value.columns))


def count(home: Path, where: str = "true") -> int:
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home))
    try:
        return con.execute(f"select count(*) from metrics.audit_events where {where}").fetchone()[0]
    finally:
        con.close()


def test_operator_sees_counts_chart_and_records(dashboard_env):
    at = signed_in("ops", "audit")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_audit"]["en"]
    labels = {m.label: m.value for m in at.metric}
    assert {"Permission changes", "Enforcement actions"} <= set(labels), labels
    assert len(at.get("vega_lite_chart")) == 1
    rows = records(at)
    assert len(rows) == min(count(dashboard_env), 1000)
    assert len(set(rows["object_namespace"].dropna())) > 1
    assert rows["occurred_at"].is_monotonic_decreasing


def test_tenant_member_sees_only_their_tenants_records(dashboard_env):
    at = signed_in("vic", "audit", tenant="nlp")  # a tenant in the URL cannot widen a member's scope
    assert errors(at) == []
    rows = records(at)
    assert len(rows) == count(dashboard_env, "object_namespace = 'vision'") > 0
    assert set(rows["object_namespace"]) == {"vision"}
    assert at.metric == [] and at.get("vega_lite_chart") == []  # the pool's counts are for operators


def test_search_and_category_in_the_url(dashboard_env):
    at = signed_in("ops", "audit", q="permission", category="permission_change", tenant="nlp")
    assert errors(at) == []
    assert at.text_input(key="f_q").value == "permission"
    rows = records(at)
    assert len(rows) == count(dashboard_env, "category = 'permission_change' and object_namespace = 'nlp'") > 0
    assert set(rows["category"]) == {"Permission changes"} and set(rows["object_namespace"]) == {"nlp"}


def test_typing_a_search_filters_and_keeps_it_in_the_url(dashboard_env):
    at = signed_in("ops", "audit", **{"from": "2026-11-02", "to": "2026-11-02"})
    at.text_input(key="f_q").input("RECLAIM").run()
    assert errors(at) == []
    rows = records(at)
    assert len(rows) == count(dashboard_env, "day = '2026-11-02' and concat_ws(' ', actor, actor_role, action, "
                              "object_kind, object_namespace, object_name, reason, decision, request_id) ilike '%reclaim%'")
    assert len(rows) > 0 and {shown_day(d) for d in rows["occurred_at"]} == {dt.date(2026, 11, 2)}
    assert at.query_params["q"] in ("RECLAIM", ["RECLAIM"])


def test_chinese_and_a_search_with_no_match(dashboard_env):
    at = signed_in("ops", "audit", lang="zh", q="no-such-actor-anywhere")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_audit"]["zh"]
    assert any(STRINGS["a_no_records"]["zh"] in i.value for i in at.info)
    assert "权限变更数" in [m.label for m in at.metric]


def test_empty_warehouse(dashboard_env, built_empty_home, monkeypatch, fresh_cache):
    monkeypatch.setenv("GPUPOOL_HOME", str(built_empty_home))
    at = signed_in("ops", "audit")
    assert errors(at) == []
    assert any(STRINGS["a_no_audit"]["en"] in i.value for i in at.info)
