"""A tenant's review pack for its team lead, from the small demo month: every figure and table is its
metrics query limited to the tenant, page 1's answers carry those figures, the pack lies in the tenant's
folder and ops.review_packs names the tenant; an unknown tenant is refused and a name is never a path."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import traceback
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from pipelines.cli.pack import pack as pack_command
from pipelines.lake.reader import search_config
from pipelines.pack.answers import STATUSES
from pipelines.pack.figures import collect, figure_value, previous_month, table_frame
from pipelines.pack.store import safe_name
from pipelines.pack.tenant import TENANT, TENANT_FIGURES, TENANT_TABLES, tenant_answers, tenants_of_month
from tests.conftest import copy_home
from tests.pack.conftest import keep_only_tenants

pytestmark = pytest.mark.slow
MONTH = dt.date(2026, 11, 1)
TENANT_NAME = "vision"


def _gpupool(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "gpupool"), *args], check=check, capture_output=True,
                          text=True)


def _packs(home: Path) -> list[dict]:
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home))
    try:
        return con.sql("select * from ops.review_packs order by built_at, version").pl().to_dicts()
    finally:
        con.close()


@pytest.fixture(scope="module")
def tenant_home(tmp_path_factory, small_demo_home) -> Path:
    home = copy_home(small_demo_home, tmp_path_factory.mktemp("tenant-pack") / "gpupool")
    _gpupool("pack", "--month", "2026-11", "--tenant", TENANT_NAME, "--home", str(home))
    return home


def test_every_query_is_limited_to_the_tenant():
    for item in (*TENANT_FIGURES, *TENANT_TABLES):
        assert item.sql.startswith("select") and "metrics." in item.sql, item.key
        # the tenant is the last parameter: the SQL's last `?` is the tenant's
        assert item.sql.rstrip().count("?") == len(item.params(MONTH, TENANT_NAME)), item.key
        assert "tenant = ?" in item.sql[item.sql.rindex("where"):], item.key
    for table in TENANT_TABLES:
        assert table.title and table.title["en"] and table.title["zh"], table.key


def test_tenant_pack_numbers_equal_their_queries(tenant_home):
    (pack,) = _packs(tenant_home)
    assert pack["tenant"] == TENANT_NAME and pack["month"] == MONTH
    out = (tenant_home / pack["html_path"]).parent
    assert out.parent == tenant_home / "packs" / "2026-11" / "tenants" / TENANT_NAME
    stored = json.loads((out / "figures.json").read_text())
    assert stored["kind"] == "tenant" and stored["tenant"] == TENANT_NAME
    con = duckdb.connect(str(tenant_home / "warehouse.duckdb"), read_only=True, config=search_config(tenant_home))
    try:
        for f in TENANT_FIGURES:
            assert stored["figures"][f.key]["value"] == pytest.approx(figure_value(con, f, MONTH, TENANT_NAME)), f.key
            assert stored["figures"][f.key]["previous"] == figure_value(con, f, previous_month(MONTH), TENANT_NAME)
        for t in TENANT_TABLES:
            appendix = pl.read_parquet(out / "appendix" / f"{t.key}.parquet")
            assert_frame_equal(appendix, table_frame(con, t, MONTH, TENANT_NAME), check_exact=False)
        # the tenant's own rows, not the pool's: its allocated GPU-hours are its rows of the view
        mine = con.execute("select sum(allocated_gpu_hours) from metrics.tenant_daily where tenant = ?",
                           [TENANT_NAME]).fetchone()[0]
        pool = con.execute("select sum(allocated_gpu_hours) from metrics.tenant_daily").fetchone()[0]
    finally:
        con.close()
    assert stored["figures"]["allocated_gpu_hours"]["value"] == pytest.approx(mine) and 0 < mine < pool
    html = (out / "pack.html").read_text()
    assert "Did we use the GPUs we held?" in html and TENANT_NAME in html
    assert (tenant_home / pack["pdf_path"]).stat().st_size > 10_000


def test_page_one_answers_carry_their_figures(tenant_home):
    con = duckdb.connect(str(tenant_home / "warehouse.duckdb"), read_only=True, config=search_config(tenant_home))
    try:
        figs = collect(con, MONTH, TENANT, TENANT_NAME)
        answers, decisions = tenant_answers(con, figs)
        stored = json.loads(((tenant_home / _packs(tenant_home)[0]["html_path"]).parent / "figures.json").read_text())
        assert [a["key"] for a in stored["answers"]] == [a.key for a in answers] == \
            ["used", "quota", "waits", "actions", "savings"]
        tables = {t.key for t in TENANT_TABLES}
        figures = {f.key: f for f in TENANT_FIGURES}
        for a in answers:
            assert a.status in STATUSES and a.evidence in tables and a.question["zh"] and a.answer["zh"]
            # the answer's number is its first source figure, queried again on the metrics view
            assert a.value == pytest.approx(figure_value(con, figures[a.sources[0]], MONTH, TENANT_NAME)), a.key
        waits = next(a for a in answers if a.key == "waits")
        p95 = con.execute("select quantile_cont(queue_wait_s, 0.95) from metrics.job_summary where tenant = ? "
                          "and first_started_at >= ? and first_started_at < ?",
                          [TENANT_NAME, MONTH, dt.date(2026, 12, 1)]).fetchone()[0]
        assert waits.value == pytest.approx(p95)
    finally:
        con.close()
    for d in decisions:
        assert d.evidence in tables and d.text["en"] and d.text["zh"]


def test_unknown_tenant_is_refused_and_nothing_recorded(tenant_home):
    before = _packs(tenant_home)
    run = _gpupool("pack", "--month", "2026-11", "--tenant", "no-such-team", "--home", str(tenant_home), check=False)
    assert run.returncode != 0
    assert "no-such-team" in run.stderr and "vision" in run.stderr  # names the tenants it knows
    assert _packs(tenant_home) == before
    assert not (tenant_home / "packs" / "2026-11" / "tenants" / "no-such-team").exists()
    con = duckdb.connect(str(tenant_home / "warehouse.duckdb"), read_only=True, config=search_config(tenant_home))
    try:
        assert TENANT_NAME in tenants_of_month(con, MONTH)
    finally:
        con.close()


@pytest.mark.parametrize("name", ["../pool", "a/b", "..", ".", "", "x\\y", "租户"])
def test_a_tenant_name_is_never_a_path(name):
    folder = safe_name(name)
    assert folder not in ("", ".", "..") and "/" not in folder and "\\" not in folder


def test_all_tenants_builds_the_pool_and_every_tenant(tmp_path, small_demo_home, pdf_not_rendered):
    """`gpupool pack --all-tenants` is what the monthly schedule builds: the pool's pack and one per tenant
    of the month; with --tenant it is refused. Two tenants have allocations (the pool's pack and two
    tenants' are three packs; the demo's six tenants would be seven). Which packs are built is the point:
    the command runs in this process, so that their PDFs are not rendered (pdf_not_rendered)."""
    home = copy_home(small_demo_home, tmp_path / "gpupool")
    keep_only_tenants(home, "nlp", TENANT_NAME)
    refused = CliRunner().invoke(pack_command, ["--month", "2026-11", "--all-tenants", "--tenant", TENANT_NAME,
                                                "--home", str(home)])
    assert refused.exit_code == 2 and "choose one" in refused.stderr
    done = CliRunner().invoke(pack_command, ["--month", "2026-11", "--all-tenants", "--home", str(home)])
    assert done.exit_code == 0, done.output + "".join(traceback.format_exception(*done.exc_info))
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home))
    try:
        tenants = tenants_of_month(con, MONTH)
    finally:
        con.close()
    built = [p["tenant"] for p in _packs(home)]
    assert built.count(None) == 1 and sorted(t for t in built if t) == tenants == ["nlp", TENANT_NAME]


def test_tenant_wait_p95_is_over_the_tenants_jobs_of_the_month(tenant_home):
    """metrics.tenant_month's wait p95 is the percentile over the tenant's jobs that first started in the
    month, whatever their queue: recomputed here from the jobs, not from the queues' percentiles."""
    con = duckdb.connect(str(tenant_home / "warehouse.duckdb"), read_only=True, config=search_config(tenant_home))
    try:
        view = con.execute("select queue_wait_p95_s, jobs_started from metrics.tenant_month where month = ? and tenant = ?",
                           [MONTH, TENANT_NAME]).fetchone()
        jobs = con.execute("select quantile_cont(queue_wait_s, 0.95), count(*) from metrics.job_summary "
                           "where first_started_at >= ? and first_started_at < ? and tenant = ?",
                           [MONTH, dt.date(2026, 12, 1), TENANT_NAME]).fetchone()
        queues = con.execute("select count(*) from metrics.queue_month where month = ? and tenant = ?",
                             [MONTH, TENANT_NAME]).fetchone()[0]
        # waiting work: a job waits in one queue, so the tenant's counts are its queues' sums
        waiting = con.execute("select jobs_waiting, cancelled_while_queued from metrics.tenant_month "
                              "where month = ? and tenant = ?", [MONTH, TENANT_NAME]).fetchone()
        by_queue = con.execute("select sum(jobs_waiting), sum(cancelled_while_queued) from metrics.queue_month "
                               "where month = ? and tenant = ?", [MONTH, TENANT_NAME]).fetchone()
    finally:
        con.close()
    assert view[0] == pytest.approx(jobs[0]) and view[1] == jobs[1] > 0 and queues >= 1
    assert waiting == by_queue
