"""A Kueue pool whose telemetry is Prometheus reads which pod holds each GPU from Prometheus: a real
Prometheus and the dcgm_scrape connector scrape the same dcgm-exporter text, and `PrometheusPods`
names the same holders as the rounds (`live.pod_gpus`), before and after pods end and GPUs change
hands. The exporter's text carries no timestamps, so Prometheus marks a series stale when it leaves
the text, as it does when a pod ends on a real node."""
from __future__ import annotations

import datetime as dt
import threading

import polars as pl
import pytest
import requests
from polars.testing import assert_frame_equal

from pipelines.clock import utc_naive
from pipelines.connectors.prometheus import PrometheusConfig
from pipelines.connectors.scrape import DcgmConfig, Scraper, write_round
from pipelines.governance.live import pod_gpus
from pipelines.governance.running_kueue import PrometheusPods
from tests.connectors.conftest import LoopbackServer, prometheus_binary, send  # noqa: F401 - the fixture
from tests.connectors.test_prometheus_live import running_prometheus, wait_for

pytestmark = pytest.mark.slow

GPU = 'gpu="{gpu}",UUID="GPU-{host}-{gpu}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="{host}"'
EXPORTER_OWN = 'container="dcgm-exporter",pod="dcgm-exporter-7x2kq",namespace="gpu-operator"'


def line(metric: str, host: str, gpu: int, value: str, labels: str = "") -> str:
    return f"{metric}{{{GPU.format(host=host, gpu=gpu)}{',' + labels if labels else ''}}} {value}"


# Before: node-a GPU 0 held by team-a/train-0 (renamed exported_* as behind service discovery),
# GPU 1 idle with the exporter's own pod labels; node-b GPU 0 time-sliced by two pods (GPU util only),
# GPU 1's MIG instance 2 held by team-b/infer-1, instance 1 free (framebuffer only).
BEFORE = [
    line("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "node-a", 0, "0.4", 'exported_pod="train-0",exported_namespace="team-a",'
         + EXPORTER_OWN),
    line("DCGM_FI_DEV_FB_USED", "node-a", 0, "20000", 'exported_pod="train-0",exported_namespace="team-a",'
         + EXPORTER_OWN),
    line("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "node-a", 1, "0", EXPORTER_OWN),
    line("DCGM_FI_DEV_GPU_UTIL", "node-b", 0, "31", 'pod="notebook-a",namespace="team-b"'),
    line("DCGM_FI_DEV_GPU_UTIL", "node-b", 0, "31", 'pod="notebook-b",namespace="team-b"'),
    line("DCGM_FI_DEV_FB_USED", "node-b", 1, "512", 'GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"'),
    line("DCGM_FI_DEV_FB_USED", "node-b", 1, "9000", 'GPU_I_ID="2",GPU_I_PROFILE="3g.40gb",pod="infer-1",'
         'namespace="team-b"'),
]
# After: train-0 ended (GPU 0 idle) and train-1 runs on GPU 1; notebook-b ended; infer-1 moved to
# instance 1.
AFTER = [
    line("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "node-a", 0, "0", EXPORTER_OWN),
    line("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "node-a", 1, "0.9", 'exported_pod="train-1",exported_namespace="team-a",'
         + EXPORTER_OWN),
    line("DCGM_FI_DEV_GPU_UTIL", "node-b", 0, "12", 'pod="notebook-a",namespace="team-b"'),
    line("DCGM_FI_DEV_FB_USED", "node-b", 1, "9100", 'GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",pod="infer-1",'
         'namespace="team-b"'),
    line("DCGM_FI_DEV_FB_USED", "node-b", 1, "512", 'GPU_I_ID="2",GPU_I_PROFILE="3g.40gb"'),
]


class Exporter:
    """Serves the current text to every scrape; `show` switches it."""

    def __init__(self) -> None:
        self.text = b""
        self.lock = threading.Lock()
        self.server = LoopbackServer(self.handle)

    def show(self, lines: list[str]) -> None:
        with self.lock:
            self.text = ("\n".join(lines) + "\n").encode()

    def handle(self, request) -> None:
        with self.lock:
            text = self.text
        send(request, 200, text)


def held(frame: pl.DataFrame) -> list[tuple]:
    return sorted(frame.select("namespace", "pod", "host", "gpu", "gpu_instance_id").iter_rows(),
                  key=repr)


@pytest.mark.usefixtures("prometheus_binary")  # skipped (failed in CI) where Prometheus is not installed
def test_prometheus_names_the_same_pods_on_each_gpu_as_the_scrape_rounds(tmp_path):
    exporter = Exporter()
    scraper = Scraper(DcgmConfig(targets=[f"{exporter.server.url}/metrics"], retries=0))
    landing = tmp_path / "landing"
    address = exporter.server.url.removeprefix("http://")
    config = ('{"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": '
              f'[{{"job_name": "dcgm-exporter", "static_configs": [{{"targets": ["{address}"]}}]}}]}}')
    lookback = dt.timedelta(minutes=5)
    try:
        exporter.show(BEFORE)  # served from Prometheus' first scrape on
        with running_prometheus(tmp_path, config) as prom:
            reader = PrometheusPods(PrometheusConfig(url=prom, selector='job="dcgm-exporter"', retries=0))

            def series_now(count: int):
                def check() -> bool:
                    r = requests.get(f"{prom}/api/v1/query", timeout=2, params={"query": '{job="dcgm-exporter",'
                                                                                 '__name__=~"DCGM_FI_.*"}'})
                    return len(r.json()["data"]["result"]) == count
                return check

            def holders_after(lines: list[str]) -> list[tuple]:
                """Prometheus' and the rounds' holders once Prometheus serves exactly `lines`: equal."""
                exporter.show(lines)
                wait_for("Prometheus holding the text's series, the others marked stale", series_now(len(lines)),
                         timeout_s=90, interval_s=0.5)
                write_round(landing, scraper.scrape_round(utc_naive()))
                now = utc_naive()
                got = reader.read(now, lookback)
                assert_frame_equal(got, pod_gpus(landing, now + dt.timedelta(seconds=1), lookback))
                return held(got)

            assert holders_after(BEFORE) == sorted([
                ("team-a", "train-0", "node-a", 0, None),
                ("team-b", "infer-1", "node-b", 1, 2),
                ("team-b", "notebook-a", "node-b", 0, None),
                ("team-b", "notebook-b", "node-b", 0, None),
            ], key=repr)
            assert holders_after(AFTER) == sorted([
                ("team-a", "train-1", "node-a", 1, None),
                ("team-b", "infer-1", "node-b", 1, 1),
                ("team-b", "notebook-a", "node-b", 0, None),
            ], key=repr)
            now = utc_naive()
            # a lookback that ends before every sample names no pod, as the rounds' does
            assert reader.read(now - lookback, dt.timedelta(seconds=1)).is_empty()
            reader.close()
    finally:
        scraper.close()
        exporter.server.stop()
