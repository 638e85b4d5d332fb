"""A real Prometheus scrapes the allocator's simulated dcgm-exporter endpoints; the pipeline
backfills from it, and every backfilled number is one the endpoints served.

`gpupool allocator serve` runs on loopback with a temporary database and its tokens in the
environment; three jobs keep GPUs busy (whole H100s, a MIG instance, a time-sliced L40S).
Prometheus (Debian's package, started by scripts/prometheus-up.sh) scrapes each busy node every
second through a small recording proxy, which keeps what it served and when. One scrape job
also relabels like a Kubernetes setup does: the target carries the exporter pod's own `pod` and
`namespace`, and the workload's come in as `exported_pod` / `exported_namespace`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest
import requests

from pipelines.clock import utc_naive
from pipelines.connectors.prometheus import PrometheusConfig
from pipelines.paths import REPO_ROOT
from pipelines.sources.dcgm_text import parse_dcgm_text
from pipelines.warehouse import Warehouse
from tests.allocator.helpers import SHARE_MODE_JOBS
from tests.connectors.conftest import LoopbackServer, backfill_and_ingest, free_port, send

pytestmark = pytest.mark.slow

ADMIN = "admin-token-for-the-live-test"
SECONDS_OF_HISTORY = 8
MISSED_SCRAPES_TOLERATED = 4
KEY = ["host", "gpu", "gpu_instance_id", "metric", "hpc_job"]


def wait_for(what: str, check, timeout_s: float, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            result = check()
            if result:
                return result
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s} s")


@pytest.fixture
def allocator(tmp_path: Path):
    """`gpupool allocator serve` on a loopback port, tokens from the environment."""
    port = free_port()
    log = (tmp_path / "allocator.log").open("wb")
    env = {**os.environ, "GPUPOOL_ALLOCATOR_TOKENS": json.dumps({ADMIN: {"role": "admin", "name": "alice"}})}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "allocator",
            "serve",
            "--db",
            str(tmp_path / "allocator.db"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tick",
            "0.2",
        ],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            "the allocator answering /healthz",
            lambda: process.poll() is None and requests.get(f"{url}/healthz", timeout=1).ok,
            30,
        )
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


class RecordingProxy:
    """Forwards GET /nodes/<host>/metrics to the allocator and records (received_at, path, body)."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.served: list[tuple[dt.datetime, str, bytes]] = []
        self.lock = threading.Lock()
        self.session = requests.Session()
        self.server = LoopbackServer(self.handle)

    def handle(self, request) -> None:
        received_at = utc_naive()
        # as an authorised scraper: the allocator names the jobs on a node's GPUs only to a token
        response = self.session.get(
            f"{self.upstream}{request.path}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=5
        )
        if response.status_code == 200:
            with self.lock:
                self.served.append((received_at, request.path, response.content))
        send(
            request,
            response.status_code,
            response.content,
            response.headers.get("Content-Type", "text/plain"),
        )

    def stop(self) -> None:
        self.server.stop()
        self.session.close()


def prometheus_config(proxy: str, hosts: list[str], relabelled: str) -> str:
    jobs = []
    for host in hosts:
        job = {
            "job_name": f"dcgm-{host}",
            "metrics_path": f"/nodes/{host}/metrics",
            "static_configs": [{"targets": [proxy]}],
        }
        if host == relabelled:
            # the exporter pod's own labels on the target; the workload's renamed to exported_*
            job["static_configs"][0]["labels"] = {"pod": "dcgm-exporter-x2k9f", "namespace": "gpu-operator"}
            job["metric_relabel_configs"] = [
                {
                    "source_labels": ["hpc_job"],
                    "regex": "(.+)",
                    "target_label": "exported_pod",
                    "replacement": "pod-$1",
                },
                {
                    "source_labels": ["hpc_job"],
                    "regex": "(.+)",
                    "target_label": "exported_namespace",
                    "replacement": "team-a",
                },
            ]
        jobs.append(job)
    return json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": jobs})


@contextlib.contextmanager
def running_prometheus(tmp_path: Path, config: str):
    (tmp_path / "prometheus.yml").write_text(config)  # JSON is YAML
    port, pidfile = free_port(), tmp_path / "prometheus.pid"
    up = subprocess.run(
        [
            "bash",
            str(REPO_ROOT / "scripts" / "prometheus-up.sh"),
            str(tmp_path / "prometheus.yml"),
            str(tmp_path / "tsdb"),
            str(port),
            str(pidfile),
            str(tmp_path / "prometheus.log"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert up.returncode == 0, up.stderr
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run(
            ["bash", str(REPO_ROOT / "scripts" / "prometheus-down.sh"), str(pidfile)], check=True, timeout=30
        )
        assert not pidfile.exists()


def served_samples(proxy: RecordingProxy) -> pl.DataFrame:
    """Every sample the proxy served, at the time it served it."""
    with proxy.lock:
        served = list(proxy.served)
    frames = [
        parse_dcgm_text(body, path, received_at).tables["dcgm_samples"] for received_at, path, body in served
    ]
    return pl.concat(frames).rename({"sampled_at": "served_at"})


def keyed(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.col("gpu_instance_id").fill_null(-1), pl.col("hpc_job").fill_null(""))


def test_backfill_from_a_real_prometheus_matches_what_the_exporters_served(
    prometheus_binary, allocator, tmp_path
):
    jobs = []
    for body in SHARE_MODE_JOBS:
        r = requests.post(
            f"{allocator}/v1/jobs", json=body, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=5
        )
        assert r.status_code == 201 and r.json()["state"] == "RUNNING", r.text
        jobs.append(r.json())
    hosts = sorted({job["gpus"][0]["host"] for job in jobs})
    assert len(hosts) == 3
    whole_host = jobs[0]["gpus"][0]["host"]

    proxy = RecordingProxy(allocator)
    try:
        with running_prometheus(
            tmp_path, prometheus_config(proxy.server.url.removeprefix("http://"), hosts, whole_host)
        ) as prom:
            # ready is not data: wait until every node has SECONDS_OF_HISTORY seconds stored
            def history() -> bool:
                r = requests.get(
                    f"{prom}/api/v1/query",
                    params={"query": "count_over_time(DCGM_FI_DEV_FB_USED[1m])"},
                    timeout=2,
                )
                series = r.json()["data"]["result"]
                return {
                    s["metric"]["Hostname"] for s in series if int(s["value"][1]) >= SECONDS_OF_HISTORY
                } == set(hosts)

            wait_for("Prometheus holding history of every node", history, timeout_s=60, interval_s=0.5)
            start = min(t for t, _, _ in proxy.served)
            end = utc_naive()
            warehouse = Warehouse(tmp_path / "gpupool")
            report, ingested = backfill_and_ingest(
                warehouse, start, end, PrometheusConfig(url=prom, scrape_interval_s=1)
            )
            served = served_samples(proxy)
    finally:
        proxy.stop()

    assert report.step_s == 1
    assert report.metrics == sorted(served.get_column("metric").unique().to_list())
    assert sum(r.records_quarantined for r in ingested) == 0
    with warehouse.connect() as con:
        backfilled = con.sql(
            f"select {', '.join(KEY)}, sampled_at, value, k8s_pod, k8s_namespace, extra_labels from raw.dcgm_samples"
        ).pl()

    # every series the endpoints served is in the backfill, and nothing else
    assert (
        keyed(backfilled).select(KEY).unique().sort(KEY).equals(keyed(served).select(KEY).unique().sort(KEY))
    )
    # one point per second per series over the history Prometheus holds (N raw samples span
    # N - 1 seconds, so the 1 s grid may catch one fewer)
    per_series = backfilled.group_by(KEY).len().get_column("len")
    assert per_series.min() >= SECONDS_OF_HISTORY - 1

    # Each backfilled point is the value of the latest scrape at or before its time. Prometheus
    # stamps a sample when its scrape starts, the proxy a few ms later, so the match is the latest
    # scrape the proxy served up to 250 ms after the point, or, where Prometheus missed scrapes
    # (a scrape past its 1 s timeout on a loaded machine), one of the few before it.
    earlier = [pl.col("value").shift(k).over(KEY) for k in range(1, 1 + MISSED_SCRAPES_TOLERATED)]
    recorded = (
        keyed(served)
        .sort([*KEY, "served_at"])
        .with_columns(candidates=pl.concat_list(pl.col("value"), *earlier))
        .select(*KEY, "served_at", "value", "candidates")
    )
    probe = (
        keyed(backfilled)
        .with_columns(probe=pl.col("sampled_at") + pl.duration(milliseconds=250))
        .sort("probe")
    )
    matched = probe.join_asof(
        recorded.sort("served_at"),
        left_on="probe",
        right_on="served_at",
        by=KEY,
        strategy="backward",
        suffix="_served",
        check_sortedness=False,  # sorted by time overall, hence within every series
    )
    assert matched.filter(pl.col("served_at").is_null()).height == 0
    disagree = matched.filter(~pl.col("value").is_in(pl.col("candidates")))
    assert disagree.height == 0, disagree.head(5)
    exact = matched.filter(pl.col("value") == pl.col("value_served")).height
    assert exact >= 0.9 * matched.height  # nearly always the latest scrape itself

    # busy GPUs really were busy, so the comparison is not one of zeros
    busy = backfilled.filter((pl.col("metric") == "DCGM_FI_DEV_FB_USED") & (pl.col("hpc_job").is_not_null()))
    assert busy.height > 0 and busy.get_column("value").min() > 0

    # the relabelled node: the workload's pod and namespace, not the exporter pod's
    on_whole = backfilled.filter((pl.col("host") == whole_host) & pl.col("hpc_job").is_not_null())
    assert set(on_whole.select("k8s_pod", "k8s_namespace").unique().iter_rows()) == {
        (f"pod-{jobs[0]['job_id']}", "team-a")
    }
