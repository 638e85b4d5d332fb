"""The prometheus_pull sensor against a real Prometheus: its pulls chain by their cursor, each asks for
the ingest of the days it touched, and what lands is every sample the exporter served, once.

The exporter serves a fixed sequence of timestamped bodies (tests/governance/test_prometheus_telemetry_live.py),
so Prometheus holds exactly those samples whenever it scrapes them; here body k only once its time has
come, so that the second pull finds samples the first could not.
"""
from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest
import requests

from pipelines.assets.scrape import PullCursor, build_prometheus_pull_sensor
from pipelines.clock import utc_naive
from pipelines.config import section
from pipelines.connectors.prometheus import LANDING_SOURCE, PrometheusConfig
from pipelines.ingest import ingest_partition
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse
from tests.connectors.conftest import backfill_and_ingest, prometheus_binary, send  # noqa: F401 - the fixture
from tests.connectors.test_prometheus_live import running_prometheus, wait_for
from tests.governance.test_prometheus_telemetry_live import Exporter

pytestmark = pytest.mark.slow

STEP_S = 2  # the bodies' spacing, and the scrape interval the pulls' step follows
BODIES = 28  # from 14 s before the test to 40 s after its start
PAST = 8  # the bodies due when the test starts; Prometheus holds every due one before the first pull


class DueExporter(Exporter):
    """Body k on a path's k-th request, but never a body whose time has not come yet."""

    def __init__(self, stamps: list[dt.datetime]):
        super().__init__(stamps)
        self.stamps = stamps

    def handle(self, request) -> None:
        with self.lock:
            due = sum(1 for t in self.stamps if t <= utc_naive()) - 1
            k = min(self.served.get(request.path, 0), due)
            self.served[request.path] = k + 1
        send(request, 200, self.bodies[max(k, 0)])


def pull(sensor: dg.SensorDefinition, home, cursor: str | None) -> dg.SensorResult:
    context = dg.build_sensor_context(cursor=cursor, resources={"warehouse": WarehouseResource(home=str(home))})
    return sensor(context)


def ingest(wh: Warehouse, result: dg.SensorResult) -> None:
    for run in result.run_requests:
        assert run.tags["gpupool/trigger"] == "prometheus_pull"
        report = ingest_partition(wh, LANDING_SOURCE, dt.date.fromisoformat(run.partition_key))
        assert report.records_loaded > 0  # (the bodies' GPU utilisations above 100 % are quarantined)


def framebuffer(wh: Warehouse) -> list[tuple[dt.datetime, float]]:
    """node-a GPU 0's framebuffer samples as ingested: (time, value), in time order."""
    with wh.connect(read_only=True) as con:
        return con.execute("select sampled_at, value from raw.dcgm_samples where host = 'node-a' and gpu = 0 "
                           "and metric = 'DCGM_FI_DEV_FB_USED' order by sampled_at").fetchall()


@pytest.mark.usefixtures("prometheus_binary")  # skipped (failed in CI) where Prometheus is not installed
def test_pulls_chain_and_land_every_served_sample_once(tmp_path, monkeypatch):
    # bodies every STEP_S from PAST steps ago, the last ones still to come
    t0 = utc_naive().replace(microsecond=417_000) - dt.timedelta(seconds=STEP_S * (PAST - 1))
    stamps = [t0 + dt.timedelta(seconds=STEP_S * k) for k in range(BODIES)]
    exporter = DueExporter(stamps)
    config = tmp_path / "gpupool.yml"
    monkeypatch.setenv("GPUPOOL_CONFIG", str(config))
    sensor = build_prometheus_pull_sensor()
    home = tmp_path / "home"
    assert "no Prometheus to pull" in pull(sensor, home, None).skip_reason.skip_message  # no prometheus section yet
    try:
        address = exporter.server.url.removeprefix("http://")
        with running_prometheus(tmp_path, '{"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, '
                                          '"scrape_configs": [{"job_name": "dcgm-exporter", "static_configs": '
                                          f'[{{"targets": ["{address}"]}}]}}]}}') as prom:
            def stored(bodies: int) -> bool:
                r = requests.get(f"{prom}/api/v1/query", timeout=2, params={"query": '{__name__=~"DCGM_FI_.*"}[15m]'})
                counts = [len(s["values"]) for s in r.json()["data"]["result"]]
                return len(counts) == 9 and min(counts) >= bodies

            def caught_up() -> bool:
                """Prometheus holds every body due a step ago (its 1 s scrapes catch up on the past ones)."""
                due = sum(1 for t in stamps if t <= utc_naive() - dt.timedelta(seconds=STEP_S))
                return due >= PAST and stored(due)

            wait_for("Prometheus holding the past bodies", caught_up, timeout_s=90, interval_s=0.5)
            config.write_text(f"prometheus:\n  url: {prom}\n  selector: 'job=\"dcgm-exporter\"'\n  retries: 0\n"
                              f"  settle_s: 5\n  pull_first_window_s: 900\n  scrape_interval_s: {STEP_S}\n")
            wh = Warehouse(home)
            first = pull(sensor, home, None)
            cursor = PullCursor.parse(first.cursor)
            assert cursor.pulls == 1 and cursor.files > 0, first
            first_end = dt.datetime.fromisoformat(cursor.until)
            assert utc_naive() - dt.timedelta(seconds=5) >= first_end > utc_naive() - dt.timedelta(seconds=60)
            days = {run.partition_key for run in first.run_requests}
            assert {t0.date().isoformat(), first_end.date().isoformat()} <= days
            ingest(wh, first)
            landed = framebuffer(wh)
            # the bodies due by the first pull's end, each at one step time or more (a step repeats the latest)
            served = {20000 + 37 * k for k, t in enumerate(stamps) if t < first_end}
            assert served and {v for _, v in landed} <= served and len(served - {v for _, v in landed}) <= 1
            assert len({t for t, _ in landed}) == len(landed)

            wait_for("every body stored and settled", lambda: stored(BODIES) and utc_naive() - dt.timedelta(
                seconds=5) > stamps[-1] + dt.timedelta(seconds=STEP_S), timeout_s=120, interval_s=0.5)
            second = pull(sensor, home, first.cursor)
            after = PullCursor.parse(second.cursor)
            assert after.pulls == 2 and dt.datetime.fromisoformat(after.until) > first_end
            assert f"step {STEP_S} s" in after.last
            keys = {run.run_key for run in second.run_requests}
            assert keys and not keys & {run.run_key for run in first.run_requests}  # a new run per pull
            ingest(wh, second)
            again = framebuffer(wh)
            assert len({t for t, _ in again}) == len(again) and again[0] == landed[0]  # nothing twice
            assert {v for _, v in again} == {20000 + 37 * k for k in range(BODIES)}  # every body, in the end
            # the pulls end equal to one backfill of their whole span: a step the first pull answered before
            # a sample at or before it was stored (here the catching-up scrapes) is answered again
            one = Warehouse(tmp_path / "one")
            span = (first_end - dt.timedelta(seconds=900), dt.datetime.fromisoformat(after.until))
            backfill_and_ingest(one, *span, section("prometheus", PrometheusConfig), now=span[1])
            assert framebuffer(one) == again
    finally:
        exporter.server.stop()
