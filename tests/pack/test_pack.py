"""The monthly review pack for a small demo month: every number equals the same query on the
metrics views, HTML/PDF/appendix exist, PDF pages render to PNG, a second build keeps the first."""
from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipelines.catalog import load_catalog
from pipelines.lake.reader import search_config
from pipelines.pack.figures import FIGURES, TABLES, figure_value, previous_month, table_frame
from tests.components import require_component

pytestmark = pytest.mark.slow
MONTH = dt.date(2026, 11, 1)


def _packs(home: Path) -> list[dict]:
    """The month's packs as ops.review_packs lists them, oldest first."""
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home))
    try:
        return con.sql("select * from ops.review_packs where month = ? order by built_at, version",
                       params=[MONTH]).pl().to_dicts()
    finally:
        con.close()


def test_every_number_equals_its_metrics_query(packed_demo_home):
    out = (packed_demo_home / _packs(packed_demo_home)[0]["html_path"]).parent
    stored = json.loads((out / "figures.json").read_text())
    assert stored["catalog_version"] == load_catalog().version
    con = duckdb.connect(str(packed_demo_home / "warehouse.duckdb"), read_only=True, config=search_config(packed_demo_home))
    try:
        for f in FIGURES:
            assert f.sql.startswith("select") and "metrics." in f.sql
            assert stored["figures"][f.key]["value"] == pytest.approx(figure_value(con, f, MONTH)), f.key
            assert stored["figures"][f.key]["previous"] == figure_value(con, f, previous_month(MONTH))
        assert stored["figures"]["submissions"]["value"] > 0
        catalog = {r[0] for r in con.sql("select metric_name from metrics.catalog").fetchall()}
        assert {f.metric for f in FIGURES} <= catalog
        for t in TABLES:
            appendix = pl.read_parquet(out / "appendix" / f"{t.key}.parquet")
            # float sums may differ in the last bits between runs (parallel aggregation)
            assert_frame_equal(appendix, table_frame(con, t, MONTH), check_exact=False)
            assert (out / "appendix" / f"{t.key}.csv").exists()
    finally:
        con.close()
    for a in stored["answers"]:  # page 1: each answer names the table backing it, a table of this pack
        assert a["evidence"] in stored["tables"] and a["status"] in ("on_track", "watch", "act")
    assert [a["key"] for a in stored["answers"]] == ["q1", "q2", "q3", "q4", "q5"]
    html = (out / "pack.html").read_text()
    # the demo holds November only: the previous month's column says so, and so does question 1
    assert load_catalog().version in html and "no data" in html and "gpupool recommend --month 2026-10" in html


def test_pdf_pages_render(packed_demo_home, tmp_path):
    out = packed_demo_home / _packs(packed_demo_home)[0]["pdf_path"]
    assert out.stat().st_size > 10_000
    require_component("pdftoppm (poppler-utils)", shutil.which("pdftoppm") is not None, "scripts/components.sh")
    subprocess.run(["pdftoppm", "-r", "40", "-png", str(out), str(tmp_path / "page")], check=True)
    pages = sorted(tmp_path.glob("page-*.png"))
    assert len(pages) >= 2 and all(p.stat().st_size > 1000 for p in pages)


def test_second_build_keeps_the_first_and_chinese(packed_demo_home, packed_twice_demo_home):
    """packed_twice_demo_home is packed_demo_home after `gpupool pack --month 2026-11 --lang zh`."""
    first = _packs(packed_demo_home)
    after = _packs(packed_twice_demo_home)
    assert len(after) == len(first) + 1
    for entry in after:
        assert (packed_twice_demo_home / entry["pdf_path"]).exists()
    assert after[-1]["lang"] == "zh" and after[-1]["catalog_version"] == load_catalog().version
    assert "GPU资源池月度报告" in (packed_twice_demo_home / after[-1]["html_path"]).read_text()


def test_failures_by_cause_and_hosts(packed_demo_home):
    """The pool's failures by cause are the view's pool rows (tenant all): the tenants' rows summed
    (rates: the view's definition over the sums); the host table covers every host with node_exporter data."""
    out = (packed_demo_home / _packs(packed_demo_home)[0]["html_path"]).parent
    causes = pl.read_parquet(out / "appendix" / "failures_by_cause.parquet")
    hosts = pl.read_parquet(out / "appendix" / "hosts.parquet")
    con = duckdb.connect(str(packed_demo_home / "warehouse.duckdb"), read_only=True, config=search_config(packed_demo_home))
    try:
        rows = con.sql("select * from metrics.failure_causes where month = ? and tenant <> 'all'", params=[MONTH]).pl()
        host_count = con.execute("select count(distinct host) from metrics.host_daily").fetchone()[0]
    finally:
        con.close()
    pool = causes.filter(pl.col("cause") == "all").row(0, named=True)
    every = rows.filter(pl.col("cause") == "all")
    assert pool["attempts"] == every["attempts"].sum() and pool["failures"] == every["failures"].sum() > 0
    assert pool["failure_rate_pct"] == pytest.approx(100 * every["failures"].sum() / every["attempts"].sum())
    not_user = rows.filter(~pl.col("cause").is_in(["all", "user_code", "out_of_memory"]))["failures"].sum()
    assert pool["not_user_fault_pct"] == pytest.approx(100 * not_user / every["failures"].sum())
    assert set(causes["cause"]) - {"all"} == set(rows.filter((pl.col("failures") > 0) & (pl.col("cause") != "all"))["cause"])
    assert causes.filter(pl.col("cause") != "all")["failures"].sum() == pool["failures"]
    assert hosts.height == host_count > 0 and hosts["cpu_busy_pct_mean"].is_between(0, 100).all()
    html = (out / "pack.html").read_text()
    assert "failures_by_cause" in html and "repeat_offender_gpus" in html and "charts/hosts.png" in html


def test_checkpoints_and_artifact_status(packed_demo_home):
    """The task part's artifact status is the view's finished training jobs summed over tenants and
    templates, with shares of the month's total; work lost by cause and the breaches are the view's rows."""
    out = (packed_demo_home / _packs(packed_demo_home)[0]["html_path"]).parent
    status = pl.read_parquet(out / "appendix" / "artifact_status.parquet")
    lost = pl.read_parquet(out / "appendix" / "work_lost_by_cause.parquet")
    breaches = pl.read_parquet(out / "appendix" / "checkpoint_policy_breaches.parquet")
    stored = json.loads((out / "figures.json").read_text())["figures"]
    con = duckdb.connect(str(packed_demo_home / "warehouse.duckdb"), read_only=True, config=search_config(packed_demo_home))
    try:
        artifacts = con.sql("select * from metrics.artifact_status where month = ?", params=[MONTH]).pl()
        work = con.sql("select * from metrics.work_lost where month = ?", params=[MONTH]).pl()
        tenants = con.sql("select * from metrics.checkpoint_policy_breaches where month = ?", params=[MONTH]).pl()
    finally:
        con.close()
    assert status["artifact_status"].to_list() == ["registered", "logged_only", "none"]
    assert status["jobs"].sum() == artifacts["jobs"].sum() > 0
    for row in status.iter_rows(named=True):
        jobs = artifacts.filter(pl.col("artifact_status") == row["artifact_status"])["jobs"].sum()
        assert row["jobs"] == jobs and row["jobs_share_pct"] == pytest.approx(100 * jobs / artifacts["jobs"].sum())
    assert status["jobs_share_pct"].sum() == pytest.approx(100)
    assert set(lost["cause"]) == set(work["cause"]) and "preempted" in set(lost["cause"])
    assert lost["work_lost_gpu_hours"].sum() == pytest.approx(work["work_lost_gpu_hours"].sum())
    assert stored["work_lost_gpu_hours"]["value"] == pytest.approx(work["work_lost_gpu_hours"].sum())
    assert (lost["work_lost_with_checkpoint_gpu_hours"] + lost["work_lost_without_checkpoint_gpu_hours"]
            - lost["work_lost_gpu_hours"]).abs().max() < 1e-6
    assert breaches.height == tenants.height and stored["checkpoint_policy_breaches"]["value"] == \
        tenants["policy_breaches"].sum() > 0
    assert stored["checkpoint_policy_breach_rate"]["value"] == pytest.approx(
        100 * tenants["policy_breaches"].sum() / tenants["attempts_with_time_policy"].sum())
    html = (out / "pack.html").read_text()
    assert "charts/artifact_status.png" in html and "charts/work_lost_by_cause.png" in html
