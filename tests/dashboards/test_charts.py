"""The dashboards' charts read at a glance (issue 18): the top-N reshape keeps totals and caps the colours,
and every chart of every page carries a title in the page's language and axis titles."""
from __future__ import annotations

import json

import polars as pl
import pytest

from dashboards import ui
from tests.dashboards.conftest import errors, signed_in

pytestmark = pytest.mark.slow  # renders every chart of the demo warehouse

PAGES = ["pool", "queues", "tenants", "idle", "jobs", "health", "capacity", "quality", "audit"]


def test_top_n_keeps_each_days_total_and_caps_the_series():
    days = ["2026-11-01", "2026-11-02"]
    frame = pl.DataFrame([{"day": d, "tenant": f"t{i:02d}", "gpu_hours": float(i + 1)}
                          for d in days for i in range(12)])
    shown = ui.top_n(frame, "tenant:N", "gpu_hours:Q", ["day:T"])
    assert shown["tenant"].n_unique() == ui.MAX_SERIES
    assert "others" in shown["tenant"].to_list()
    # the largest seven kept by name, the other five summed (1+2+3+4+5 GPU-hours a day)
    assert set(shown["tenant"]) - {"others"} == {f"t{i:02d}" for i in range(5, 12)}
    assert shown.filter(pl.col("tenant") == "others")["gpu_hours"].to_list() == [15.0, 15.0]
    totals = lambda f: f.group_by("day").agg(pl.col("gpu_hours").sum()).sort("day")
    assert totals(shown).equals(totals(frame))
    assert ui.series_order(shown, "tenant", "gpu_hours")[-1] == "others"


def test_top_n_leaves_few_series_alone():
    frame = pl.DataFrame({"day": ["d"] * 3, "tenant": ["a", "b", "c"], "gpu_hours": [1.0, 2.0, 3.0]})
    assert ui.top_n(frame, "tenant", "gpu_hours", ["day"]).equals(frame)


def _specs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def _axis_titles(spec: dict) -> list[str]:
    """Every axis title an encoding (of the chart, its layers or its facet's inner chart) declares."""
    found = []
    for part in [spec, *spec.get("layer", []), spec.get("spec", {})]:
        for channel in ("x", "y"):
            title = part.get("encoding", {}).get(channel, {}).get("title")
            if title:
                found.append(title)
    return found


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("page", PAGES)
def test_every_chart_has_a_title_and_axis_titles(dashboard_env, page, lang):
    at = signed_in("ops", page, lang=lang)
    assert errors(at) == []
    for spec in _specs(at):
        title = spec.get("title", {})
        text = title.get("text") if isinstance(title, dict) else title
        assert text, f"{page}: a chart without a title: {json.dumps(spec)[:300]}"
        assert not (lang == "zh" and text.isascii()), f"{page}: chart title {text!r} is not in Chinese"
        assert _axis_titles(spec), f"{page}: chart {text!r} has no axis title"


def test_quota_usage_is_a_heatmap_turning_at_the_quota(dashboard_env):
    at = signed_in("ops", "tenants")
    usage = [s for s in _specs(at) if s.get("title", {}).get("text", "").startswith("Quota usage")]
    assert usage, "no quota usage chart"
    spec = usage[0]
    assert spec["mark"]["type"] == "rect"
    assert spec["encoding"]["color"]["scale"]["domainMid"] == 100
    assert "at quota" in spec["title"]["subtitle"]
