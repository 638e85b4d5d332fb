"""The node_exporter parsers (text and Parquet) on a captured real exposition and broken input."""
from __future__ import annotations

import datetime as dt
import io
import os
from pathlib import Path

import polars as pl
import pytest

from expectations.validate import validate_frame
from pipelines.contracts import contract
from pipelines.sources.node_exporter import (
    KEPT_METRICS,
    NO_HOST_REASON,
    NO_TIME_REASON,
    host_from_file_name,
    parse_node_exporter_parquet,
    parse_node_exporter_text,
)
from pipelines.sources.registry import SOURCES

# Captured from Debian's prometheus-node-exporter 1.5.0 (curl of /metrics on a 2-CPU VM named "vm").
FIXTURE = Path(__file__).parent / "fixtures" / "node_exporter_1.5.0.prom"
NODE_TIME = dt.datetime(2026, 12, 1, 21, 56, 4, 352532)  # its node_time_seconds 1.7961621643525324e+09
SCRAPED = dt.datetime(2026, 12, 2, 8, 0)


def _fixture() -> str:
    return FIXTURE.read_text()


def test_the_captured_exposition_keeps_the_ten_metrics_with_their_labels():
    result = parse_node_exporter_text(_fixture(), "vm.prom")
    rows = result.tables["host_samples"]
    assert result.quarantine.is_empty()
    assert result.records_read == result.records_loaded == rows.height == 31
    assert set(rows["metric"]) == set(KEPT_METRICS)
    assert result.notes == ["476 sample lines of 275 metrics raw.host_samples does not keep were skipped",
                            "host vm from node_uname_info's nodename"]
    assert rows["host"].unique().to_list() == ["vm"]  # node_uname_info{nodename="vm"}
    assert rows["sampled_at"].unique().to_list() == [NODE_TIME]  # no line has a timestamp: the node clock
    assert not result.untimed["host_samples"].any()
    assert rows.schema == contract("host_samples").schema
    as_rows = {(r["metric"], r["cpu"], r["mode"], r["device"]): r["value"] for r in rows.iter_rows(named=True)}
    assert as_rows[("node_cpu_seconds_total", "1", "user", None)] == 28135.31
    assert as_rows[("node_memory_MemTotal_bytes", None, None, None)] == 2.5276059648e10
    assert as_rows[("node_memory_MemAvailable_bytes", None, None, None)] == 2.4591351808e10
    assert as_rows[("node_network_receive_bytes_total", None, None, "eth0")] == 1.3991197243e10
    assert as_rows[("node_disk_written_bytes_total", None, None, "vda")] == 4.64464257024e11
    assert as_rows[("node_load1", None, None, None)] == 0.39
    assert rows.filter(pl.col("metric") == "node_cpu_seconds_total").height == 16  # 2 CPUs x 8 modes
    assert rows["extra_labels"].null_count() == rows.height
    assert set(rows["source"]) == {"node_exporter"}


def test_a_given_host_wins_over_the_nodename():
    rows = parse_node_exporter_text(_fixture(), "x", host="gpu-node-07").tables["host_samples"]
    assert rows["host"].unique().to_list() == ["gpu-node-07"]


def test_time_is_the_lines_own_then_node_time_then_the_scrape_time():
    text = 'node_load1 1.5 1764547200000\nnode_load15 2\nnode_memory_MemTotal_bytes 100\nnode_time_seconds 1764547260.5\n'
    result = parse_node_exporter_text(text, "x", host="h", scraped_at=SCRAPED)
    rows = result.tables["host_samples"].sort("metric")
    assert rows.select("metric", "sampled_at").rows() == [
        ("node_load1", dt.datetime(2025, 12, 1)),
        ("node_memory_MemTotal_bytes", dt.datetime(2025, 12, 1, 0, 1, 0, 500000)),
        ("node_time_seconds", dt.datetime(2025, 12, 1, 0, 1, 0, 500000)),
    ]
    assert result.notes == ["1 sample lines of 1 metrics raw.host_samples does not keep were skipped"]
    # without node_time_seconds: the scrape time, and the rows are marked untimed
    result = parse_node_exporter_text("node_load1 1.5 1764547200000\nnode_load1{x=\"y\"} 2\n", "x", host="h",
                                      scraped_at=SCRAPED.replace(tzinfo=dt.UTC))
    assert result.tables["host_samples"]["sampled_at"].to_list() == [dt.datetime(2025, 12, 1), SCRAPED]
    assert result.untimed["host_samples"].to_list() == [False, True]
    untimed = parse_node_exporter_text("node_load1 2\nnode_load1 3 1764547200000\n", "x", host="h")
    assert untimed.quarantine["reason"].to_list() == [NO_TIME_REASON]
    assert untimed.records_loaded == 1


def test_a_file_is_timed_by_its_mtime_without_node_time_and_named_by_its_file(tmp_path):
    path = tmp_path / "gpu-node-03.20261201T1030.prom"
    path.write_text("node_load1 4\n")
    os.utime(path, (1764547200, 1764547200))
    result = SOURCES["node_exporter"].parse_file(path)
    assert result.tables["host_samples"].select("host", "sampled_at").rows() == [("gpu-node-03", dt.datetime(2025, 12, 1))]
    assert SOURCES["node_exporter"].parse_bytes(b"node_load1 4 1764547200000\n", str(path)).tables[
        "host_samples"]["host"].to_list() == ["gpu-node-03"]


@pytest.mark.parametrize(("name", "host"), [
    ("node-07.prom", "node-07"), ("node-07.20261201T1030.prom", "node-07"),
    ("node-07.example.com.prom", "node-07"), ("gpu_a-1.metrics", "gpu_a-1"),
])
def test_host_from_file_name(name, host):
    assert host_from_file_name(name) == host


BROKEN = """# HELP node_load1 1m load average.
# TYPE node_load1 gauge
node_load1 abc
node_load1{a="b" 1
node_load1 NaN
node_hwmon_temp_celsius{chip="x",sensor="temp1"} NaN
node_cpu_seconds_total{cpu="0",cpu="1",mode="idle"} 3
node_load1 1 2 3
node_load1 2 1700000000000
node_load1 3 1700000000000
node_memory_MemTotal_bytes +Inf
node_network_receive_bytes_total{device="eth0"} 5 1.5
node_foo{x="y"} zzz
9bad 1
node_boot_time_seconds{foo="bar",x="y"} 7
"""


def test_broken_lines_are_quarantined_with_their_reason_and_other_metrics_skipped():
    result = parse_node_exporter_text(BROKEN, "bad.prom", host="h1", scraped_at=SCRAPED)
    reasons = dict(result.quarantine.select("line_number", "reason").iter_rows())
    assert reasons == {
        3: "value is not a number: 'abc'",
        4: "label block not closed",
        5: "value is NaN",
        7: "duplicate label cpu",
        8: "unexpected text after the timestamp: '3'",
        10: "duplicate sample (same series and timestamp as an earlier record)",
        11: "value is +Inf (not a finite number)",
        12: "timestamp is not an integer (milliseconds): '1.5'",
        13: "value is not a number: 'zzz'",  # malformed whatever its metric
        14: "invalid metric name '9bad'",
    }
    assert result.quarantine["raw"][0] == "node_load1 abc"
    rows = result.tables["host_samples"]
    assert rows.select("metric", "value", "extra_labels").rows() == [
        ("node_boot_time_seconds", 7.0, 'foo="bar",x="y"'), ("node_load1", 2.0, None)]
    # the NaN hwmon line is well formed but not kept: skipped, not a record
    assert result.records_read == result.records_loaded + result.records_quarantined == 12
    assert result.notes == ["1 sample lines of 1 metrics raw.host_samples does not keep were skipped"]


def test_without_a_host_the_kept_lines_are_quarantined():
    result = parse_node_exporter_text("node_load1 1\nnode_time_seconds 1764547200\n", "x")
    assert result.records_loaded == 0
    assert result.quarantine["reason"].to_list() == [NO_HOST_REASON] * 2


# -- Parquet -----------------------------------------------------------------------------------
def _parquet(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


def _host_frame() -> pl.DataFrame:
    return pl.DataFrame({
        "sampled_at": [SCRAPED] * 4, "host": ["h1", "h1", None, "h1"],
        "metric": ["node_cpu_seconds_total", "node_load1", "node_load1", "node_uname_info"],
        "value": [10.0, float("nan"), 1.0, 1.0], "cpu": ["all", None, None, None],
        "mode": ["user", None, None, None],
    })


def test_parquet_rows_load_and_bad_ones_are_quarantined():
    result = parse_node_exporter_parquet(_parquet(_host_frame()), "sim/host.parquet")
    rows = result.tables["host_samples"]
    assert rows.select("host", "metric", "value", "cpu", "mode", "source", "source_file").rows() == [
        ("h1", "node_cpu_seconds_total", 10.0, "all", "user", "node_exporter_parquet", "sim/host.parquet")]
    assert result.quarantine.select("line_number", "reason").rows() == [
        (2, "value is NaN"), (3, "required field is null: host"),
        (4, "metric node_uname_info is not one raw.host_samples keeps")]
    assert result.records_read == 4


def test_parquet_file_missing_a_column_or_unreadable_is_one_quarantined_record():
    missing = parse_node_exporter_parquet(_parquet(_host_frame().drop("host")), "f.parquet")
    assert missing.quarantine["reason"].to_list() == ["missing required columns host"]
    unreadable = parse_node_exporter_parquet(b"not parquet", "f.parquet")
    assert unreadable.quarantine["reason"][0].startswith("not a readable Parquet file")
    assert (unreadable.records_read, unreadable.records_loaded) == (1, 0)


def test_the_suite_rejects_negative_values_unknown_metrics_and_sources():
    rows = parse_node_exporter_text(_fixture(), "vm.prom").tables["host_samples"]
    assert validate_frame("host_samples", rows).success
    broken = rows.with_columns(
        value=pl.when(pl.int_range(pl.len()) == 0).then(-1.0).otherwise("value"),
        metric=pl.when(pl.int_range(pl.len()) == 1).then(pl.lit("node_load5")).otherwise("metric"),
        source=pl.when(pl.int_range(pl.len()) == 2).then(pl.lit("dcgm_text")).otherwise("source"),
    )
    outcome = validate_frame("host_samples", broken)
    assert not outcome.success
    assert outcome.to_metadata()["unexpected_count"] == 3


def test_the_ingest_loads_a_landing_file_into_the_lake_table(warehouse, tmp_path):
    from pipelines.ingest import ingest_partition, stage_files

    (tmp_path / "in").mkdir()
    # the capture's own nodename (vm) names its host; a file without node_uname_info takes its name's
    (tmp_path / "in" / "gpu-node-01.prom").write_text(_fixture() + "node_load1 abc\n")
    without_uname = "".join(line for line in _fixture().splitlines(keepends=True) if "node_uname_info" not in line)
    (tmp_path / "in" / "gpu-node-02.20261201T2156.prom").write_text(without_uname)
    stage_files(warehouse, "node_exporter", tmp_path / "in", NODE_TIME.date())
    report = ingest_partition(warehouse, "node_exporter", NODE_TIME.date())
    assert (report.files_read, report.records_loaded, report.records_quarantined) == (2, 62, 1)
    with warehouse.connect() as con:
        loaded = con.execute("select host, count(*), min(sampled_at), min(partition_date) from raw.host_samples "
                             "group by host order by host").fetchall()
    assert loaded == [("gpu-node-02", 31, NODE_TIME, NODE_TIME.date()), ("vm", 31, NODE_TIME, NODE_TIME.date())]
