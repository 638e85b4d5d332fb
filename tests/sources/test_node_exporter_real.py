"""The node_exporter parser on the real Debian binary's output, against values computed here from
the exposition's raw counters with a separate, plain-Python reading of the text."""
from __future__ import annotations

import datetime as dt
import os
import re
import time

import polars as pl
import pytest
import requests

from pipelines.clock import utc_naive
from pipelines.sources.node_exporter import KEPT_METRICS, parse_node_exporter_text
from tests.node_exporter_daemon import running_node_exporter

pytestmark = pytest.mark.slow  # the real node_exporter binary

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")


def _plain(text: str) -> dict[tuple[str, frozenset], float]:
    """(metric, labels) -> value: this test's own reading of the exposition (no escapes occur in
    the series used here)."""
    out = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and not line.startswith("#"):
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def _cpu(plain: dict, idle_only: bool) -> float:
    return sum(v for (name, labels), v in plain.items()
               if name == "node_cpu_seconds_total" and (not idle_only or ("mode", "idle") in labels))


@pytest.fixture(scope="module")
def two_scrapes() -> tuple[str, str]:
    with running_node_exporter() as url:
        first = requests.get(url, timeout=10).text
        time.sleep(3)
        second = requests.get(url, timeout=10).text
    return first, second


def test_every_kept_metric_of_the_real_exporter_loads_with_the_node_clock(two_scrapes):
    text = two_scrapes[0]
    before = utc_naive()
    result = parse_node_exporter_text(text, "real")  # no scraped_at: node_time_seconds must serve
    rows = result.tables["host_samples"]
    assert result.records_quarantined == 0, result.quarantine.to_dicts()[:3]
    assert result.records_read == result.records_loaded == rows.height
    # every kept metric but the disk ones (a container may have no block device) is always there
    assert set(KEPT_METRICS) - {"node_disk_read_bytes_total", "node_disk_written_bytes_total"} <= set(rows["metric"])
    assert rows["host"].unique().to_list() == [os.uname().nodename]  # node_uname_info's nodename
    plain = _plain(text)
    node_time = plain[("node_time_seconds", frozenset())]
    (sampled_at,) = rows["sampled_at"].unique().to_list()
    assert (sampled_at - dt.datetime(1970, 1, 1)).total_seconds() == pytest.approx(node_time, abs=1e-6)
    assert abs((rows["sampled_at"][0] - before).total_seconds()) < 60
    assert not result.untimed["host_samples"].any()
    # each row's value is the text's, label for label
    for row in rows.iter_rows(named=True):
        labels = {("cpu", row["cpu"]), ("mode", row["mode"]), ("device", row["device"])}
        labels = frozenset(p for p in labels if p[1] is not None)
        assert plain[(row["metric"], labels)] == row["value"], row


def test_cpu_busy_fraction_and_memory_used_match_the_raw_counters(two_scrapes):
    first, second = (parse_node_exporter_text(t, "real").tables["host_samples"] for t in two_scrapes)
    a, b = (_plain(t) for t in two_scrapes)

    def cpu_totals(rows: pl.DataFrame) -> tuple[float, float]:
        cpu = rows.filter(pl.col("metric") == "node_cpu_seconds_total")
        return cpu["value"].sum(), cpu.filter(pl.col("mode") == "idle")["value"].sum()

    (total_a, idle_a), (total_b, idle_b) = cpu_totals(first), cpu_totals(second)
    busy = 1 - (idle_b - idle_a) / (total_b - total_a)
    expected = 1 - (_cpu(b, True) - _cpu(a, True)) / (_cpu(b, False) - _cpu(a, False))
    assert busy == pytest.approx(expected, abs=1e-9)
    assert 0 <= busy <= 1
    # the CPU seconds spent between the scrapes are the CPUs times the node clock's elapsed time
    cpus = first.filter(pl.col("metric") == "node_cpu_seconds_total")["cpu"].n_unique()
    elapsed = (second["sampled_at"][0] - first["sampled_at"][0]).total_seconds()
    assert elapsed == pytest.approx(b[("node_time_seconds", frozenset())] - a[("node_time_seconds", frozenset())],
                                    abs=1e-5)
    assert total_b - total_a == pytest.approx(cpus * elapsed, rel=0.15)

    def memory_used(rows: pl.DataFrame) -> float:
        values = dict(rows.filter(pl.col("metric").str.starts_with("node_memory_")).select("metric", "value").iter_rows())
        return values["node_memory_MemTotal_bytes"] - values["node_memory_MemAvailable_bytes"]

    used = b[("node_memory_MemTotal_bytes", frozenset())] - b[("node_memory_MemAvailable_bytes", frozenset())]
    assert memory_used(second) == used > 0
    # byte counters never go down between scrapes, per device
    for metric in ("node_network_receive_bytes_total", "node_network_transmit_bytes_total"):
        pairs = first.filter(pl.col("metric") == metric).join(
            second.filter(pl.col("metric") == metric), on="device", suffix="_b")
        assert pairs.height > 0 and (pairs["value_b"] >= pairs["value"]).all()
