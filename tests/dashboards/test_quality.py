"""The Data quality and freshness page: last ingest per source, records loaded and quarantined with
the reasons, asset checks, telemetry gaps and the reconciliation of allocations with telemetry, for
an operator and a tenant member, with filters in the URL, in Chinese, and on an empty warehouse."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from dashboards.i18n import STRINGS
from pipelines.lake.reader import search_config
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home
from tests.dashboards.conftest import errors, shown_day, shown_numbers, signed_in


def frame_with(at, *columns: str):
    """The first dataframe on the page that has these columns (None when none has)."""
    return next((d.value for d in at.dataframe if set(columns) <= set(d.value.columns)), None)


@pytest.fixture
def troubled_home(dashboard_env, tmp_path, monkeypatch, fresh_cache) -> Path:
    """A copy of the demo warehouse with quarantined records, scrape gaps and reconciliation findings on
    two tenants' allocations (the metric views over ops tables read them without a rebuild)."""
    home = copy_home(dashboard_env, tmp_path / "troubled")
    with Warehouse(home).writer() as con:  # published as a release when it closes
        con.execute("""
            insert into ops.quarantine by name
            select * from (values
              ('dcgm_text', 'metrics-1.txt', 12, 'label value not closed', 'parse', 'DCGM_FI_DEV_GPU_UTIL{gpu="0', 'dcgm_text'),
              ('dcgm_text', 'metrics-1.txt', 40, 'value is NaN', 'validate', 'DCGM_FI_DEV_GPU_UTIL{gpu="1"} NaN', 'dcgm_text'),
              ('dcgm_text', 'metrics-2.txt', 7, 'value is NaN', 'validate', 'SECRET-RAW-LINE', 'dcgm_text')
            ) as q(source, source_file, line_number, reason, stage, raw, ingest_source)
            cross join (select date '2026-11-01' as partition_date, timestamp '2026-11-02 00:00' as ingested_at)""")
        con.execute("""
            insert into ops.scrape_gaps values
              ('h100-01:9400', timestamp '2026-11-01 10:00', 'r1', 'timeout', 'read timed out', 2.0, 3),
              ('h100-01:9400', timestamp '2026-11-01 10:01', 'r2', 'timeout', 'read timed out', 2.0, 3),
              ('a100-02:9400', timestamp '2026-11-02 03:00', 'r9', 'down', 'connection refused', 0.01, 1)""")
        con.execute("""
            insert into marts.fct_telemetry_reconciliation by name
            select finding, day, 'h100-01' as host, 0 as gpu, 'H100' as gpu_model, tenant, 'j-x-' || tenant as job_id,
                   'allocator:j-x-' || tenant as allocation_id, 'allocator' as source, 60.0 as minutes,
                   1.0 as gpu_hours, 'no telemetry for this allocation' as detail,
                   timestamp '2026-11-01 01:00' as first_at, timestamp '2026-11-01 02:00' as last_at
            from (values ('allocation_without_telemetry', date '2026-11-01', 'nlp'),
                         ('allocation_without_telemetry', date '2026-11-01', 'vision')) as f(finding, day, tenant)""")
    monkeypatch.setenv("GPUPOOL_HOME", str(home))
    return home


def test_operator_sees_every_section(dashboard_env, fresh_cache):
    at = signed_in("ops", "quality")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_quality"]["en"]
    fresh = frame_with(at, "ingest_source", "last_ingested_at", "hours_since_last_ingest")
    assert fresh is not None and {"dcgm_parquet", "allocator_events", "allocator_audit"} <= set(fresh["ingest_source"])
    assert all(r == lo + q for r, lo, q in zip(*(shown_numbers(fresh[c]) for c in (
        "records_read", "records_loaded", "records_quarantined")), strict=True))
    assert len(at.get("vega_lite_chart")) >= 1  # records loaded per day
    checks = frame_with(at, "check_name", "asset", "passed")
    assert checks is not None and len(checks) > 0 and "metadata_json" in checks.columns
    labels = [m.label for m in at.metric]
    assert "Records loaded" in labels and "Records quarantined" in labels
    assert any(STRINGS["q_no_gaps"]["en"] in i.value for i in at.info)  # the demo reads files: no scrapes
    assert len(at.get("popover")) >= 5  # definitions one click away


def test_filters_in_the_url_and_chinese(dashboard_env, fresh_cache):
    at = signed_in("ops", "quality", lang="zh", **{"from": "2026-11-02", "to": "2026-11-02"})
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_quality"]["zh"]
    con = duckdb.connect(str(dashboard_env / "warehouse.duckdb"), read_only=True, config=search_config(dashboard_env))
    try:
        expected = con.execute("select sum(records_loaded) from metrics.ingest_daily where day = '2026-11-02'").fetchone()[0]
    finally:
        con.close()
    loaded = next(m for m in at.metric if m.label == "已加载记录数")
    assert loaded.value == f"{expected:,}"
    checks = frame_with(at, "check_name", "asset", "passed")
    assert {shown_day(d) for d in checks["day"] if d != "–"} <= {dt.date(2026, 11, 2)}


def test_tenant_member_sees_no_raw_records_and_only_their_findings(troubled_home):
    at = signed_in("vic", "quality", tenant="nlp")  # a tenant in the URL cannot widen a member's scope
    assert errors(at) == []
    reasons = frame_with(at, "reason", "quarantined_rows")
    assert reasons is not None and "example_raw" not in reasons.columns
    findings = frame_with(at, "finding", "gpu_hours", "tenant")
    assert findings is not None and set(findings["tenant"]) == {"vision"}
    checks = frame_with(at, "check_name", "asset", "passed")
    assert "metadata_json" not in checks.columns


def test_quarantine_gaps_and_findings_shown(troubled_home):
    at = signed_in("ops", "quality", **{"from": "2026-11-01", "to": "2026-11-02"})
    assert errors(at) == []
    reasons = frame_with(at, "reason", "quarantined_rows", "example_raw")
    assert dict(zip(reasons["reason"], reasons["quarantined_rows"], strict=True)) == {
        "value is NaN": "2", "label value not closed": "1"}
    gaps = frame_with(at, "target", "error_kind", "gaps")
    assert {(r.target, r.error_kind, r.gaps) for r in gaps.itertuples()} == {
        ("h100-01:9400", "timeout", "2"), ("a100-02:9400", "down", "1")}
    findings = frame_with(at, "finding", "gpu_hours", "tenant")
    assert {"nlp", "vision"} <= set(findings["tenant"].dropna())
    assert len(at.get("vega_lite_chart")) >= 3  # loaded per day, gaps per day, findings per day


def test_empty_warehouse(dashboard_env, built_empty_home, monkeypatch, fresh_cache):
    monkeypatch.setenv("GPUPOOL_HOME", str(built_empty_home))
    at = signed_in("ops", "quality")
    assert errors(at) == []
    assert any(STRINGS["q_no_ingest"]["en"] in i.value for i in at.info)
    assert any(STRINGS["q_no_gaps"]["en"] in i.value for i in at.info)
    assert at.get("vega_lite_chart") == []
