"""The packs read as a document: every column of every table of the pool's and the tenant's pack has a
human label in English and Chinese (never its raw key), every table a title; the HTML has page 1, a
table of contents with page numbers, a page footer, the glossary and the catalog version."""
from __future__ import annotations

import datetime as dt
import re

import duckdb
import pytest
from markupsafe import escape

from pipelines.catalog import load_catalog
from pipelines.lake.reader import search_config
from pipelines.pack.figures import POOL, collect
from pipelines.pack.labels import column_label
from pipelines.pack.questions import pool_answers
from pipelines.pack.render import duration, fmt
from pipelines.pack.tenant import TENANT, tenants_of_month
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow
MONTH = dt.date(2026, 11, 1)


@pytest.fixture(scope="module")
def collected(small_demo_home):
    con = Warehouse(small_demo_home).analyst_connect()
    try:
        pool = collect(con, MONTH)
        pool.answers, pool.decisions = pool_answers(con, pool)
        tenant = collect(con, MONTH, TENANT, tenants_of_month(con, MONTH)[0])
    finally:
        con.close()
    return pool, tenant


def test_every_column_has_a_label_in_both_languages(collected):
    for figs in collected:
        for tb in figs.spec.tables:
            assert figs.spec.kind == "tenant" or tb.title and tb.title["en"] and tb.title["zh"], tb.key
            for column in figs.tables[tb.key].columns:
                labels = {lang: column_label(tb.view, column, lang, figs.catalog) for lang in ("en", "zh")}
                assert all(labels.values()) and column not in labels.values(), (tb.key, column, labels)
                assert re.search(r"[\u4e00-\u9fff]", labels["zh"]) or labels["zh"].isupper(), (tb.key, column)


def test_unknown_column_says_what_to_do():
    with pytest.raises(KeyError, match="COLUMN_LABELS"):
        column_label("pool_daily", "no_such_column", "en", {})


def test_values_read_as_units():
    assert duration(45) == "45 s" and duration(720) == "12 min" and duration(3 * 3600 + 300) == "3 h 05 min"
    assert fmt(12.345, "percent") == "12.3%" and fmt(None, "", "zh") == "无数据" and fmt(True, "", "zh") == "是"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_html_reads_as_a_document(collected, packed_twice_demo_home, lang):
    """The pool's packs that `gpupool pack` rendered in both languages (built once per test run)."""
    pool, _ = collected
    con = duckdb.connect(str(packed_twice_demo_home / "warehouse.duckdb"), read_only=True, config=search_config(packed_twice_demo_home))
    try:
        ((html_path,),) = con.execute("select html_path from ops.review_packs where tenant is null and lang = ?",
                                      [lang]).fetchall()
    finally:
        con.close()
    out = (packed_twice_demo_home / html_path).parent
    html = (out / "pack.html").read_text()
    first_page = html[:html.index('<h2 class="toc"')]
    assert len(re.findall(r'<div class="q">', first_page)) == 5 and 'href="#advice_outcome"' in first_page
    assert "target-counter(attr(href), page)" in html and "counter(pages)" in html
    for tb in POOL.tables:
        assert f'id="{tb.key}"' in html and f'href="#{tb.key}"' in html and escape(tb.title[lang]) in html
    assert 'id="glossary"' in html and load_catalog().version in html[html.index('id="glossary"'):]
    for name in POOL.metrics():
        assert escape(pool.catalog[name][f"label_{lang}"]) in html  # the HTML is autoescaped
    assert "2026-11" in html[html.index('id="part-scorecard"'):][:200]
    assert "capacity_gpu_hours</th>" not in html and ">pool_by_day<" not in html
    assert (out / "pack.pdf").stat().st_size > 10_000


def test_users_text_is_escaped_and_the_pdf_reads_only_the_packs_files(tmp_path):
    """Job names, failure reasons and tenant names are users' text: the HTML escapes them, and the PDF
    renderer fetches nothing but the pack's own charts (an <img> smuggled in would read a local file)."""
    from pipelines.pack.render import TEMPLATE, TEXT, local_fetcher

    hostile = "<img src='file:///etc/passwd'>"
    html = TEMPLATE.render(t={k: v["en"] for k, v in TEXT.items()}, title=hostile, parts=["p"],
                           part_titles={"p": "Part"}, headlines={"p": []}, titles={},
                           tables={"p": [{"key": "k", "title": "T", "view": "v", "chart": None, "columns": ["c"],
                                          "rows": [[(hostile, False)]], "notes": ""}]},
                           answers=[{"question": "Q", "answer": hostile, "status": "watch", "evidence": "k"}])
    assert hostile not in html and "&lt;img src=" in html
    assert '"Page " counter(page)' in html  # the page footer's CSS is not escaped
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "c.png").write_bytes(b"\x89PNG")
    fetch = local_fetcher(tmp_path)
    assert fetch.fetch((tmp_path / "charts" / "c.png").resolve().as_uri()).read() == b"\x89PNG"
    for url in ("file:///etc/passwd", (tmp_path / "charts").resolve().as_uri() + "/../../etc/passwd",
                "http://169.254.169.254/latest/meta-data/"):
        with pytest.raises(ValueError, match="refusing to fetch"):
            fetch.fetch(url)


def test_a_column_takes_another_views_metric_label_only_when_no_dimension_names_it():
    """`jobs` in metrics.artifact_status is the artifact-status metric; `jobs` elsewhere is just jobs."""
    catalog = {"artifact_status": {"view_name": "metrics.artifact_status", "column_name": "jobs", "also_in": "",
                                   "label_en": "Checkpoint / model-artifact status", "label_zh": "检查点/模型产物状态"},
               "retry_gpu_hours": {"view_name": "metrics.task_daily", "column_name": "retry_gpu_hours", "also_in": "",
                                   "label_en": "GPU-hours burned by retries", "label_zh": "重试消耗GPU小时"}}
    assert column_label("artifact_status", "jobs", "en", catalog) == "Checkpoint / model-artifact status"
    assert column_label("job_summary", "jobs", "en", catalog) == "Jobs"
    assert column_label("job_summary", "jobs", "zh", catalog) == "作业数"
    assert column_label("job_summary", "retry_gpu_hours", "en", catalog) == "GPU-hours burned by retries"
