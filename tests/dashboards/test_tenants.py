"""The Tenants and quota page: usage against quota and borrowing, cost attribution adding up to
the pool total, the task-type mix; a tenant member sees only their tenant's rows and pool totals."""
from __future__ import annotations

import pytest

from dashboards.i18n import STRINGS
from tests.dashboards.conftest import errors, frames, shown_number, shown_numbers, signed_in, tenants_shown


def cost_table(at):
    return next(df for df in frames(at) if "total_cost_usd" in df.columns)


def pool_total(at) -> float:
    metric = next(m for m in at.metric if m.value.startswith("$"))  # "$9,562": whole dollars from 1,000 up
    return shown_number(metric.value)


def test_operator_costs_add_up_to_the_pool_total(dashboard_env):
    at = signed_in("ops", "tenants")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_tenants"]["en"]
    for key in ("quota_usage", "quota_fit", "cost_attribution", "task_mix"):
        assert STRINGS[key]["en"] in [s.value for s in at.subheader]
    assert len(at.get("vega_lite_chart")) >= 4  # quota usage, borrowing, quota fit, costs, task mix
    costs = cost_table(at)
    assert costs["month"].nunique() == 1  # the demo's two days are one month
    assert sum(shown_numbers(costs["total_cost_usd"])) == pytest.approx(pool_total(at), rel=1e-3)
    assert len(tenants_shown(at)) > 1


def test_tenant_member_sees_their_costs_and_the_pool_total(dashboard_env):
    at = signed_in("vic", "tenants", tenant="speech")
    assert errors(at) == []
    assert tenants_shown(at) <= {"vision"}
    costs = cost_table(at)
    assert set(costs["tenant"]) == {"vision"}
    assert sum(shown_numbers(costs["total_cost_usd"])) < pool_total(at)  # the pool total is shown, other tenants are not
    assert STRINGS["cost_caption_scoped"]["en"] in [c.value for c in at.caption]
    # the task-type mix: the pool's and the member's own
    assert len(at.tabs) >= 2


def test_filters_in_the_url(dashboard_env):
    at = signed_in("ops", "tenants", tenant="vision", model="H100", **{"from": "2026-11-01", "to": "2026-11-01"})
    assert errors(at) == []
    assert tenants_shown(at) <= {"vision"}
    for df in frames(at):
        if "gpu_model" in df.columns:
            assert set(df["gpu_model"].dropna().unique()) <= {"H100"}


def test_chinese(dashboard_env):
    at = signed_in("ops", "tenants", lang="zh")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_tenants"]["zh"]
    assert STRINGS["cost_attribution"]["zh"] in [s.value for s in at.subheader]
