"""node_exporter scraping: the real binary scraped by the shared scrape code, landed as Parquet in the
raw.host_samples contract and ingested by node_exporter_parquet; the sensor's tick."""
from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from pipelines.assets.scrape import build_node_exporter_sensor
from pipelines.connectors.scrape import (
    NODE_EXPORTER,
    NodeExporterConfig,
    Scraper,
    Target,
    round_path,
    target_host,
    write_round,
)
from pipelines.ingest import ingest_partition
from pipelines.resources.warehouse import WarehouseResource
from tests.connectors.conftest import LoopbackServer, send
from tests.node_exporter_daemon import running_node_exporter

ROUND_AT = dt.datetime(2026, 3, 2, 10, 30, 15)
FAST = {"connect_timeout_s": 0.5, "read_timeout_s": 2.0, "interval_s": 5.0, "retries": 0}
FIXTURE = Path(__file__).parents[1] / "sources" / "fixtures" / "node_exporter_1.5.0.prom"


@pytest.mark.parametrize(("url", "host"), [
    ("http://gpu-node-07:9100/metrics", "gpu-node-07"), ("http://gpu-node-07.example.com:9100/metrics",
                                                          "gpu-node-07.example.com"),
    ("http://127.0.0.1:9100/metrics", None), ("http://[::1]:9100/metrics", None),
    ("http://localhost:9100/metrics", None),
])
def test_target_host_names_the_node_unless_it_is_an_address(url, host):
    assert target_host(Target(url)) == host


def test_a_round_of_the_real_exporter_lands_and_the_ingest_reads_it(warehouse):
    with running_node_exporter() as url:
        scraper = Scraper(NodeExporterConfig(targets=[url], **FAST), NODE_EXPORTER)
        scrape = scraper.scrape_round(ROUND_AT)
        scraper.close()
    assert (scrape.targets, scrape.targets_ok, scrape.records_quarantined) == (1, 1, 0), scrape.summary()
    samples = scrape.samples
    assert samples["host"].unique().to_list() == [os.uname().nodename]  # 127.0.0.1: the nodename
    assert samples.filter(pl.col("metric") == "node_cpu_seconds_total").height >= 8
    path = write_round(warehouse.landing, scrape)
    assert path == round_path(warehouse.landing, scrape)
    assert path.parent == warehouse.landing / "node_exporter_parquet" / "2026-03-02"
    # the node's own clock times the samples (now), not the round's (2026-03-02): they go to today
    report = ingest_partition(warehouse, "node_exporter_parquet", ROUND_AT.date())
    assert (report.records_loaded, report.records_quarantined) == (samples.height, 0)
    with warehouse.connect() as con:
        loaded = con.execute("select count(*), any_value(source), any_value(host) from raw.host_samples").fetchall()
    assert loaded == [(samples.height, "node_exporter_parquet", os.uname().nodename)]


def test_the_sensor_scrapes_the_node_exporter_section(tmp_path, warehouse, monkeypatch):
    body = FIXTURE.read_bytes()
    ok = LoopbackServer(lambda request: send(request, 200, body))
    garbage = LoopbackServer(lambda request: send(request, 200, b"not metrics at all\n"))
    config = tmp_path / "gpupool.yml"
    config.write_text(
        "node_exporter:\n  targets:\n"
        f"    - {ok.url}/metrics\n    - {garbage.url}/metrics\n"
        "  connect_timeout_s: 0.5\n  read_timeout_s: 1\n  retries: 0\n  ingest_every_rounds: 1\n"
    )
    monkeypatch.setenv("GPUPOOL_CONFIG", str(config))
    try:
        sensor = build_node_exporter_sensor()
        resources = {"warehouse": WarehouseResource(home=str(warehouse.home))}
        result = sensor(dg.build_sensor_context(resources=resources))
    finally:
        ok.stop()
        garbage.stop()
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert [(r.partition_key, r.run_key) for r in result.run_requests] == [
        (today, f"node_exporter_parquet:{today}:1")]
    assert json.loads(result.cursor)["samples"] == 31
    (landed,) = (warehouse.landing / "node_exporter_parquet" / today).glob("scrape-*.parquet")
    assert pl.read_parquet(landed)["host"].unique().to_list() == ["vm"]  # the fixture's nodename
    with warehouse.connect() as con:
        gaps = con.execute("select error_kind, error from ops.scrape_gaps").fetchall()
    assert gaps == [("garbage", "all sample lines quarantined (1); first: line 1: unexpected text after the timestamp: 'all'")]


def test_the_sensor_skips_without_targets(tmp_path, warehouse, monkeypatch):
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "absent.yml"))
    sensor = build_node_exporter_sensor()
    result = sensor(dg.build_sensor_context(resources={"warehouse": WarehouseResource(home=str(warehouse.home))}))
    assert "no node_exporter targets" in result.skip_reason.skip_message
