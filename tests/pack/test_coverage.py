"""Coverage is a figure: the days with data against the days in the period, per kind of source
(pipelines/coverage.py); a partial month says so on page 1 and in each answer, and no status is better
than "watch" on it; capacity advice carries it in its evidence."""
from __future__ import annotations

import datetime as dt
import html
import json
import re
from pathlib import Path

import duckdb
import pytest

from pipelines.capacity.recommend import recommend
from pipelines.coverage import KINDS, REQUIRED, read_coverage
from pipelines.pack.answers import PARTIAL_EVIDENCE_BEST_STATUS, STATUSES, Answer, capped, on_coverage
from pipelines.pack.build import build_pack
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home

MONTH = dt.date(2026, 11, 1)
DECEMBER = dt.date(2026, 12, 1)


def _ingest_daily(rows: list[tuple[str, str, int]]) -> duckdb.DuckDBPyConnection:
    """A connection whose metrics.ingest_daily holds (source, day, records_loaded) rows."""
    con = duckdb.connect()
    con.execute("create schema metrics")
    con.execute("create table metrics.ingest_daily (ingest_source varchar, day date, records_loaded bigint)")
    if rows:
        con.executemany("insert into metrics.ingest_daily values (?, ?, ?)", rows)
    return con


def test_every_ingest_source_is_in_exactly_one_kind():
    assert sorted(s for _, sources in KINDS.values() for s in sources) == sorted(SOURCES)
    assert set(REQUIRED) <= set(KINDS)
    for label, _ in KINDS.values():
        assert label["en"] and label["zh"]


def test_a_day_counts_when_every_required_kind_the_release_holds_has_data():
    con = _ingest_daily([
        # GPU telemetry on the 1st to the 3rd, the scheduler on the 2nd to the 4th: two days of both
        *[("dcgm_parquet", f"2026-11-0{d}", 100) for d in (1, 2, 3)],
        *[("allocator_events", f"2026-11-0{d}", 10) for d in (2, 3, 4)],
        ("slurm_sacct", "2026-11-01", 5),  # a second scheduler source: the 1st has scheduler data too
        ("node_exporter", "2026-11-01", 7),  # host telemetry on one day only: never makes a day partial
        ("allocator_audit", "2026-11-05", 0),  # a run that loaded nothing is no data
        ("dcgm_text", "2026-10-31", 9),  # another month
    ])
    cov = read_coverage(con, MONTH, DECEMBER)
    assert cov.days_in_period == 30 and cov.days_with_data == 3 and cov.partial
    kinds = {k.kind: k for k in cov.kinds}
    assert kinds["gpu_telemetry"].days_with_data == 3 and kinds["gpu_telemetry"].sources == ("dcgm_parquet",)
    assert kinds["scheduler"].days_with_data == 4
    assert kinds["scheduler"].sources == ("allocator_events", "slurm_sacct")
    assert kinds["host_telemetry"].days_with_data == 1 and kinds["audit"].days_with_data == 0
    assert not kinds["audit"].collected and kinds["gpu_telemetry"].required
    assert cov.phrase("en") == "3 of 30 days with data" and cov.phrase("zh") == "30天中3天有数据"
    stored = cov.as_dict()
    assert stored["by_source"]["scheduler"]["days_with_data"] == 4 and stored["partial"] is True
    assert json.loads(json.dumps(stored)) == stored


def test_a_full_month_is_complete_and_a_kind_never_collected_does_not_make_it_partial():
    # no GPU telemetry anywhere in the release (a site without a DCGM exporter): the scheduler decides
    con = _ingest_daily([("allocator_events", (MONTH + dt.timedelta(days=d)).isoformat(), 1) for d in range(30)])
    cov = read_coverage(con, MONTH, DECEMBER)
    assert cov.days_with_data == 30 and not cov.partial
    assert not {k.kind: k for k in cov.kinds}["gpu_telemetry"].collected
    assert read_coverage(_ingest_daily([]), MONTH, DECEMBER).days_with_data == 0


def test_partial_evidence_caps_every_status_at_watch():
    assert PARTIAL_EVIDENCE_BEST_STATUS == "watch"
    assert [capped(s, True) for s in STATUSES] == ["watch", "watch", "act"]
    assert [capped(s, False) for s in STATUSES] == list(STATUSES)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _page1_text(doc: str) -> str:
    """Page 1 of the pack as text: from the title to the contents (the first part's heading)."""
    page = doc[doc.index("<h1>"):doc.index('<h2 class="toc"')]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


@pytest.mark.usefixtures("pdf_not_rendered")
def test_a_three_day_month_is_marked_partial_on_page_1_and_capped_at_watch(advised_demo_home, tmp_path):
    """The small demo holds 3 days of November: page 1 says "3 of 30 days" in its coverage line and in
    every answer, in English and Chinese; no answer is "on track"; figures.json records the coverage."""
    home = copy_home(advised_demo_home, tmp_path / "gpupool")
    for lang, phrase, prefix in (("en", "3 of 30 days with data", "Partial month, 3 of 30 days with data: "),
                                 ("zh", "30天中3天有数据", "数据不完整（30天中3天有数据）：")):
        out = build_pack(Warehouse(home), MONTH, lang)
        page = _read(out / "pack.html")
        page1 = _page1_text(page)
        assert ("Partial month: 3 of 30 days with data" if lang == "en" else "数据不完整：30天中3天有数据") in page1
        assert page1.count(phrase) >= 1 + 5  # the coverage line and each of the five answers
        stored = json.loads(_read(out / "figures.json"))
        assert stored["coverage"]["days_with_data"] == 3 and stored["coverage"]["days_in_period"] == 30
        assert stored["coverage"]["partial"] is True
        assert stored["coverage"]["by_source"]["gpu_telemetry"]["days_with_data"] == 3
        assert len(stored["answers"]) == 5
        for a in stored["answers"]:
            assert a["status"] in ("watch", "act") and a["answer"].startswith(prefix)
        assert 'class="badge on_track"' not in page
        # each part's headline figures say what they cover
        covers = "These figures cover 3 of 30 days with data." if lang == "en" else "以下数字覆盖30天中3天有数据。"
        assert page.count(covers) == 3  # resources, tasks, governance: the parts with headline figures


def test_on_coverage_leaves_a_complete_month_alone():
    a = Answer("q", {"en": "Q?", "zh": "问？"}, {"en": "All good.", "zh": "很好。"}, "on_track", "t")
    assert on_coverage([a], None) == [a]


def test_recommendations_carry_the_months_coverage(advised_demo_home):
    con = Warehouse(advised_demo_home).analyst_connect()
    try:
        found = recommend(con, MONTH)
    finally:
        con.close()
    assert found
    for rec in found:
        cov = rec.evidence["coverage"]
        assert cov["days_with_data"] == 3 and cov["days_in_period"] == 30 and cov["partial"] is True
        assert cov["by_source"]["scheduler"]["days_with_data"] == 3


# the sections of the Chinese pack that must be Chinese but for names: page 1, failures and capacity
CHINESE_SECTIONS = ("failures_by_cause", "failure_reasons", "work_lost_by_cause", "wait_causes",
                    "capacity_recommendations", "advice_outcome")
ENGLISH_RUN = re.compile(r"[A-Za-z][A-Za-z'’-]*(?:[\s,:;()]+[A-Za-z][A-Za-z'’-]*){2,}")


def _names(out: Path) -> set[str]:
    """Every value of the pack's tables that is a name, not a category key (pipelines/labels.py VALUE_LABELS):
    tenants, queues, GPU models, hosts, policies, targets, and the programs' own error messages as logged."""
    import polars as pl

    from pipelines.labels import VALUE_LABELS

    found = set()
    for path in (out / "appendix").glob("*.parquet"):
        frame = pl.read_parquet(path)
        for column, dtype in frame.schema.items():
            if dtype == pl.String and column not in VALUE_LABELS and not column.startswith("recommendation"):
                found.update(v for v in frame[column].to_list() if v)
    return found


def _section(doc: str, key: str) -> str:
    start = doc.index(f'<h3 id="{key}">')
    ends = [i for i in (doc.find("<h3 ", start + 1), doc.find("<h2", start + 1)) if i > 0]
    return doc[start:min(ends)]


def _english_runs(doc: str, names: set[str]) -> list[str]:
    text = re.sub(r'<p class="fn">.*?</p>', " ", doc, flags=re.DOTALL)  # sources: metrics views and appendix files
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = re.sub(r"`[^`]*`", " ", text)  # commands to run
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(name, " ")
    return ENGLISH_RUN.findall(text)


@pytest.mark.usefixtures("pdf_not_rendered")
def test_the_chinese_pack_is_chinese_but_for_names(advised_demo_home, tmp_path):
    """Page 1, the failure pages and the capacity pages of the Chinese pack: no run of three English words
    but in names (GPU models, tenants, queues, policies, a program's error message as logged). Category
    keys (causes, final states, advice kinds, units, confidence) read in Chinese; the appendix keeps them."""
    home = copy_home(advised_demo_home, tmp_path / "gpupool")
    out = build_pack(Warehouse(home), MONTH, "zh")
    page = _read(out / "pack.html")
    names = _names(out)
    page1 = page[page.index("<h1>"):page.index('<h2 class="toc"')]
    assert _english_runs(page1, names) == []
    for key in CHINESE_SECTIONS:
        assert _english_runs(_section(page, key), names) == [], key
    failures = _section(page, "failures_by_cause") + _section(page, "failure_reasons")
    assert "用户代码" in failures and "user_code" not in failures and "异常退出" in failures
    assert "retry budget" not in page and "run time cap" not in page
    advice = _section(page, "capacity_recommendations")
    assert "增加节点" in advice and "add_nodes" not in advice and "quota GPUs" not in advice
    import polars as pl

    assert "user_code" in pl.read_parquet(out / "appendix" / "failures_by_cause.parquet")["cause"].to_list()
