"""scripts/compare_metrics.py tells the truth: each known difference between two relations is reported
(NULL against a value, a shifted start time, a missing row, a float beyond the tolerance), equal
relations report nothing, and only the columns that record when the pipeline ran are left out."""
from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path

import duckdb
import polars as pl
import pytest

from pipelines.paths import REPO_ROOT


def _load_tool():
    spec = importlib.util.spec_from_file_location("compare_metrics", REPO_ROOT / "scripts" / "compare_metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cm = _load_tool()
T0 = dt.datetime(2026, 11, 2, 4, 46)


def attempts() -> pl.DataFrame:
    """A mart-like relation: keys, times of the data, floats, a NULL float, a list."""
    return pl.DataFrame({
        "allocation_id": ["a", "b", "c"],
        "started_at": [T0, T0 + dt.timedelta(hours=1), T0 + dt.timedelta(hours=2)],
        "duration_s": [60.0, 120.0, None],
        "minutes": [1, 2, 3],
        "activity": [0.5, 0.25, None],
        "k8s_pods": [["p1"], [], ["p2", "p3"]],
        "ingested_at": [T0, T0, T0],  # when the pipeline ran: never compared
    })


def test_equal_relations_report_nothing_whatever_the_row_order_or_the_pipeline_run_times():
    a = attempts()
    b = a.reverse().with_columns(pl.col("ingested_at") + dt.timedelta(days=3))
    assert cm.differences(a, b, "marts.fct_job_attempts") == []
    # floats within the tolerance (parallel sums): equal
    c = a.with_columns(pl.col("activity") * (1 + 1e-12))
    assert cm.differences(a, c, "marts.fct_job_attempts") == []


@pytest.mark.parametrize(("change", "column"), [
    (lambda f: f.with_columns(pl.when(pl.col("allocation_id") == "a").then(None).otherwise(pl.col("activity"))
                              .alias("activity")), "activity"),  # a value against NULL
    (lambda f: f.with_columns(pl.when(pl.col("allocation_id") == "c").then(0.0).otherwise(pl.col("activity"))
                              .alias("activity")), "activity"),  # NULL against a value
    (lambda f: f.with_columns(pl.when(pl.col("allocation_id") == "b").then(pl.col("started_at") + dt.timedelta(
        minutes=1)).otherwise(pl.col("started_at")).alias("started_at")), "started_at"),  # a shifted start
    (lambda f: f.with_columns(pl.when(pl.col("allocation_id") == "b").then(121.0).otherwise(pl.col("duration_s"))
                              .alias("duration_s")), "duration_s"),  # an attempt's length is data
    (lambda f: f.with_columns(pl.col("activity") + 1e-6), "activity"),  # a float beyond the tolerance
    (lambda f: f.with_columns(pl.when(pl.col("allocation_id") == "a").then(None).otherwise(pl.col("minutes"))
                              .alias("minutes")), "minutes"),  # NULL against a value, not a float
    (lambda f: f.with_columns(pl.when(pl.col("allocation_id") == "c").then(pl.lit(["p2"]))
                              .otherwise(pl.col("k8s_pods")).alias("k8s_pods")), "k8s_pods"),
])
def test_each_known_difference_is_reported_on_its_column(change, column):
    a = attempts()
    found = cm.differences(a, change(a), "marts.fct_job_attempts")
    assert found and any(f.startswith(f"{column}: ") for f in found), found
    assert cm.differences(change(a), a, "marts.fct_job_attempts"), "reported both ways"


def test_a_missing_row_is_reported_with_an_example():
    a = attempts()
    found = cm.differences(a, a.filter(pl.col("allocation_id") != "b"), "marts.fct_job_attempts")
    assert len(found) == 1 and found[0].startswith("3 rows vs 2") and "'allocation_id': 'b'" in found[0], found


def test_a_different_schema_is_reported():
    a = attempts()
    assert cm.differences(a, a.drop("minutes"), "marts.x")[0].startswith("schema ")


def test_only_the_columns_that_record_when_the_pipeline_ran_are_left_out():
    assert cm.ignored("metrics.ingest_daily", "ingested_at") and cm.ignored("marts.anything", "ingested_at")
    assert cm.ignored("metrics.ingest_daily", "started_at") and cm.ignored("metrics.ingest_daily", "duration_s")
    assert not cm.ignored("marts.fct_job_attempts", "started_at")
    assert not cm.ignored("marts.fct_pool_free_segments", "duration_s")
    a = pl.DataFrame({"day": [dt.date(2026, 11, 1)], "started_at": [T0], "duration_s": [1.5]})
    b = a.with_columns(pl.col("started_at") + dt.timedelta(hours=1), pl.col("duration_s") * 2)
    assert cm.differences(a, b, "metrics.ingest_daily") == []
    assert len(cm.differences(a, b, "marts.fct_job_attempts")) == 2


def test_two_homes_are_compared_relation_by_relation(tmp_path: Path):
    homes = [tmp_path / "a", tmp_path / "b"]
    for i, home in enumerate(homes):
        home.mkdir()
        with duckdb.connect(str(home / "warehouse.duckdb")) as con:
            con.execute("create schema marts; create schema metrics")
            con.execute("create table marts.fct_host_activity as select * from (values "
                        "('h1', timestamp '2026-11-03 00:00', 0.5), ('h1', timestamp '2026-11-03 00:01', 0.25)) "
                        "t(host, minute_at, cpu_busy_fraction)")
            con.execute(f"create table metrics.only_{i} (x integer)")
            if i:  # the first minute of the day without its rate
                con.execute("update marts.fct_host_activity set cpu_busy_fraction = null "
                            "where minute_at = timestamp '2026-11-03 00:00'")
    compared, problems = cm.compare_homes(*homes, ["marts", "metrics"])
    assert compared == 1
    assert sorted(p.split(":")[0] for p in problems) == ["marts.fct_host_activity", "metrics.only_0",
                                                         "metrics.only_1"]
