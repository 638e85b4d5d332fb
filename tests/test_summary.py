"""The summary `gpupool demo` prints reads the metrics views and only formats: each figure a plain
read of view columns."""
from __future__ import annotations

import json
import re

import pytest

from pipelines.dictionary import SNAPSHOT_PATH
from pipelines.summary import POLICY_FIGURES, READS, Read, policy_comparison, print_summary
from pipelines.warehouse import Warehouse

AGGREGATES = re.compile(r"\b(sum|count|avg|min|max|arg_max|arg_min|quantile_cont|quantile|median)\s*\(")


def test_every_read_is_plain_columns_of_one_metrics_view():
    for read in [*READS.values(), *(read for _, read, _, _ in POLICY_FIGURES)]:
        sql = read.sql()
        assert re.fullmatch(r"select [a-z0-9_, ]+ from metrics\.[a-z_]+( where .+?)?( order by .+)?", sql), sql
        assert not AGGREGATES.search(sql), sql
    with pytest.raises(ValueError, match="not plain view or column names"):
        Read("pool_period", ("sum(active_gpu_hours)",))


def test_every_read_names_columns_the_metrics_views_have():
    # models/metrics_schema.json freezes the views' columns for this catalog version
    views = json.loads(SNAPSHOT_PATH.read_text())["views"]
    for read in [*READS.values(), *(read for _, read, _, _ in POLICY_FIGURES)]:
        columns = views.get(f"metrics.{read.view}")
        assert columns is not None, read.view
        assert set(read.columns) <= set(columns), (read.view, sorted(set(read.columns) - set(columns)))


def test_the_summary_of_a_warehouse_with_no_data_says_so(built_empty_home, capsys):
    print_summary(Warehouse(built_empty_home))
    assert capsys.readouterr().out.strip() == "No data in the warehouse yet."


@pytest.mark.slow
def test_the_summary_of_the_small_demo_prints_each_section(small_demo_home, capsys):
    print_summary(Warehouse(small_demo_home))
    out = capsys.readouterr().out
    for expected in ("Pool 2026-", "  all ", "hosts (node_exporter):", "Jobs", "failed attempts (top causes",
                     "not the user's fault", "finished training jobs' artifacts:", "Waste and data quality",
                     "idle allocation windows", "Idle-reclaim (metrics.governance_period", "metric catalog version"):
        assert expected in out, (expected, out)
    assert "n/a jobs" not in out


@pytest.mark.slow
def test_the_policy_comparison_reads_the_same_columns_in_both_warehouses(small_demo_home):
    rows = policy_comparison(Warehouse(small_demo_home), Warehouse(small_demo_home))
    assert [name for name, *_ in rows] == [name for name, *_ in POLICY_FIGURES]
    for name, on, off, _unit in rows:
        # DuckDB sums doubles in parallel, in no fixed order: a read again may differ in the last bit
        assert on == pytest.approx(off, rel=1e-12), name
