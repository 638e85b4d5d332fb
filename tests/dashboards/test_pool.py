"""The Pool overview page and its pooling-stage scorecard (metrics.pooling_scorecard), for an
operator and a tenant member, with filters in the URL and in Chinese."""
from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pytest

from dashboards import data
from dashboards.i18n import STRINGS
from pipelines.lake.reader import search_config
from tests.dashboards.conftest import errors, frames, signed_in

STAGES = ["project_owned", "shared_queues", "elastic_sharing", "resource_operations"]
INPUTS = {
    "project_owned": {"physical_gpus", "reporting_gpus", "gpus_reporting_pct", "allocated_gpu_hours",
                      "idle_visible_share_pct", "idle_allocated_share_pct"},
    "shared_queues": {"queues", "queues_with_rules", "queues_with_rules_pct", "queue_wait_p95_s", "admissions",
                      "preemptions", "requeues", "preempted_attempts_pct"},
    "elastic_sharing": {"shared_gpus", "shared_gpus_pct", "utilisation_of_allocated_pct"},
    "resource_operations": {"catalog_metrics", "capacity_recommendations", "applied_enforcement_actions",
                            "ledger_entries", "ledger_coverage_pct"},
}


@pytest.fixture(scope="module")
def scorecard(demo_home):
    con = duckdb.connect(str(demo_home / "warehouse.duckdb"), read_only=True, config=search_config(demo_home))
    try:
        # one row per month and stage: the demo's latest month
        cursor = con.execute("select * from metrics.pooling_scorecard "
                             "where month = (select max(month) from metrics.pooling_scorecard) order by stage_order")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()


def gpu_table(at):
    return next(df for df in frames(at) if "host" in df.columns)


def test_scorecard_has_the_four_stages_scored_by_their_inputs(scorecard):
    assert [r["stage"] for r in scorecard] == STAGES
    assert [r["stage_order"] for r in scorecard] == [1, 2, 3, 4]
    every_input = set().union(*INPUTS.values())
    for row in scorecard:
        assert 0 <= row["score_pct"] <= 100, row
        assert row["score_rule"].endswith("mean")
        present = {k for k in every_input if row[k] is not None}
        assert present <= INPUTS[row["stage"]], (row["stage"], present - INPUTS[row["stage"]])
    owned, queues, sharing, operations = scorecard
    # the demo sends telemetry from every GPU of its inventory and splits some by MIG or time-slicing
    assert owned["physical_gpus"] >= 32 and owned["gpus_reporting_pct"] == pytest.approx(100.0)
    assert 0 < sharing["shared_gpus"] < owned["physical_gpus"]
    assert queues["queues_with_rules"] <= queues["queues"]
    # the catalog exists and the demo enforced with a ledger: one catalog + ledger coverage
    assert operations["catalog_metrics"] > 0
    assert operations["ledger_coverage_pct"] == pytest.approx(100.0)


def test_scorecard_rule_on_one_stage(scorecard):
    """elastic sharing = mean of the straight-line scores of its two inputs (thresholds in the SQL)."""
    row = scorecard[2]
    shared = min(100.0, max(0.0, 100 * row["shared_gpus_pct"] / 25))
    utilisation = min(100.0, max(0.0, 100 * (row["utilisation_of_allocated_pct"] - 20) / 50))
    assert row["score_pct"] == pytest.approx((shared + utilisation) / 2, abs=0.05)


def test_operator_sees_the_pool(dashboard_env):
    at = signed_in("ops", "pool")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_pool"]["en"]
    assert len(at.metric) == 4
    assert len(at.get("vega_lite_chart")) >= 3  # allocation rate, utilisation, scorecard
    gpus = gpu_table(at)
    assert len(gpus) >= 32
    assert gpus["tenant"].notna().any()
    assert len(at.expander) == 4  # one per stage, with its inputs and rule
    assert any(s.value == STRINGS["scorecard"]["en"] for s in at.subheader)


def test_tenant_member_sees_pool_figures_but_only_their_holders(dashboard_env):
    at = signed_in("vic", "pool")
    assert errors(at) == []
    assert len(at.metric) == 4
    gpus = gpu_table(at)
    assert len(gpus) >= 32  # every GPU: the pool is pool-level
    assert set(gpus["tenant"].unique()) - {"–"} <= {"vision"}  # – : nothing shown
    assert (gpus.loc[(gpus["tenant"] == "–") & (gpus["is_allocated"] == "✓"), "job_id"] == "–").all()


def test_model_filter_in_the_url(dashboard_env):
    at = signed_in("ops", "pool", model="H100", **{"from": "2026-11-02", "to": "2026-11-02"})
    assert errors(at) == []
    assert set(gpu_table(at)["gpu_model"]) == {"H100"}
    assert any("H100" in c.value for c in at.caption)


def test_chinese(dashboard_env):
    at = signed_in("ops", "pool", lang="zh")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_pool"]["zh"]
    assert any(s.value == STRINGS["scorecard"]["zh"] for s in at.subheader)
    assert any(STRINGS["stage_shared_queues"]["zh"] in e.label for e in at.expander)


# -- the pool's targets: one home, the scorecard's thresholds (models/metrics/pooling_scorecard.sql) --------
def _bands(at) -> list[dict]:
    """The "what good looks like" marks of the page's charts (ui.good_marks: a band or line from a data set of
    `at`, `to`, `label`; on a heatmap the colour scale's midpoint, named in the subtitle): value and label."""
    found = []
    for chart in at.get("vega_lite_chart"):
        for d in chart.proto.datasets:
            rows = pa.ipc.open_stream(d.data.data).read_all().to_pylist()
            found += [{"at": r["at"], "label": r["label"]} for r in rows if set(r) == {"at", "to", "label"}]
        spec = json.loads(chart.proto.spec)
        mid = spec.get("encoding", {}).get("color", {}).get("scale", {}).get("domainMid")
        if mid is not None:
            found.append({"at": mid, "label": spec.get("title", {}).get("subtitle", "")})
    return found


def test_targets_are_the_scorecards_thresholds(dashboard_env, scorecard, fresh_cache):
    targets = data.targets()
    _, queues, sharing, _ = scorecard
    assert targets.utilisation_pct == sharing["utilisation_target_pct"]
    assert targets.wait_p95_s == queues["wait_p95_target_s"]
    assert targets.wait_p95_min == pytest.approx(queues["wait_p95_target_s"] / 60)
    # the thresholds at which the scorecard's inputs score 100, as its rule states them
    assert f"{targets.utilisation_pct:g}% -> 100" in sharing["score_rule"]
    assert f"{targets.wait_p95_s:g} s -> 100" in queues["score_rule"]
    # carried on their stage's rows only
    assert all(r["utilisation_target_pct"] is None for r in scorecard if r["stage"] != "elastic_sharing")
    assert all(r["wait_p95_target_s"] is None for r in scorecard if r["stage"] != "shared_queues")


def test_the_bands_follow_the_targets(dashboard_env, monkeypatch, fresh_cache):
    model = data.targets()
    pool = _bands(signed_in("ops", "pool"))
    assert {"at": model.utilisation_pct, "label": STRINGS["good_util"]["en"].format(pct=model.utilisation_pct)} in pool
    waits = [b for b in _bands(signed_in("ops", "queues")) if "target" in b["label"]]
    assert waits and all(b["at"] == pytest.approx(model.wait_p95_min) for b in waits)
    # another target in the warehouse: the bands move with it
    monkeypatch.setattr(data, "targets", lambda: data.Targets(utilisation_pct=55.0, wait_p95_s=600.0))
    assert 55.0 in [b["at"] for b in _bands(signed_in("ops", "pool"))]
    assert 10.0 in [b["at"] for b in _bands(signed_in("ops", "queues"))]


def test_no_scored_month_draws_without_a_band(dashboard_env, monkeypatch, fresh_cache):
    monkeypatch.setattr(data, "targets", lambda: data.Targets(utilisation_pct=None, wait_p95_s=None))
    for page in ("pool", "queues"):
        at = signed_in("ops", page)
        assert errors(at) == []
        assert at.get("vega_lite_chart")
        assert [b for b in _bands(at) if "target" in b["label"]] == []
        notes = json.dumps([json.loads(c.proto.spec).get("title") for c in at.get("vega_lite_chart")])
        assert STRINGS["no_target"]["en"] in notes, page


def test_targets_of_an_empty_warehouse_are_none(monkeypatch, built_empty_home, fresh_cache):
    monkeypatch.setenv("GPUPOOL_HOME", str(built_empty_home))
    assert data.targets() == data.Targets(utilisation_pct=None, wait_p95_s=None)
