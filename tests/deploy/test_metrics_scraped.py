"""The real Prometheus scrapes the allocator's `/metrics` and `gpupool metrics serve`: both targets
are up and their series are queryable, as a site's Prometheus would see them (docs/operators.md,
"Metrics and alerts")."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from pipelines.paths import REPO_ROOT
from pipelines.sources.base import empty_quarantine
from pipelines.warehouse import Warehouse
from tests.allocator.server import free_port, running_server
from tests.components import require_component
from tests.connectors.test_prometheus_live import running_prometheus, wait_for

pytestmark = pytest.mark.slow  # three real processes


@contextlib.contextmanager
def metrics_exporter(home: Path, tmp_path: Path) -> Iterator[str]:
    """`gpupool metrics serve` on a free loopback port; its URL is yielded at once (it starts while the
    allocator and Prometheus do, and Prometheus finds it up once it answers)."""
    port = free_port()
    log = (tmp_path / "exporter.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "metrics", "serve", "--home", str(home),
         "--outbox", str(tmp_path / "outbox.db"), "--port", str(port)],
        cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def query(prometheus: str, promql: str) -> list[dict]:
    r = requests.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=2)
    return r.json()["data"]["result"]


def test_prometheus_scrapes_the_allocator_and_the_pipeline_exporter(tmp_path: Path) -> None:
    require_component("prometheus", shutil.which("prometheus") is not None,
                      "apt-get install -y --no-install-recommends prometheus, or scripts/prometheus-up.sh as root")
    home = Warehouse(tmp_path / "home")
    home.replace_partition("allocator_events", dt.date(2026, 11, 2), {}, empty_quarantine(), files_read=1,
                           records_read=3, records_loaded=2, records_quarantined=1)
    with (
        metrics_exporter(home.home, tmp_path) as exporter,
        running_server(tmp_path / "allocator.db", tmp_path) as allocator,
    ):
        targets = {"allocator": allocator.url, "gpupool": exporter}
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [url.removeprefix("http://")]}]}
                               for job, url in targets.items()],
        }
        with running_prometheus(tmp_path, json.dumps(config)) as prometheus:
            up = wait_for("both targets up",
                          lambda: {r["metric"]["job"]: r["value"][1] for r in query(prometheus, "up")}
                          if len(query(prometheus, "up == 1")) == 2 else None, 40, 0.5)
            assert up == {"allocator": "1", "gpupool": "1"}
            health = query(prometheus, 'allocator_http_requests_total{route="/healthz",status="200"}')
            assert health and float(health[0]["value"][1]) >= 1
            assert query(prometheus, "allocator_queue_pending_jobs")  # one series per queue of the pool
            [loaded] = query(prometheus, "gpupool_ingest_records_loaded_total")
            assert loaded["metric"]["source"] == "allocator_events" and loaded["value"][1] == "2"
            [outbox] = query(prometheus, 'gpupool_exporter_part_up{part="outbox"}')
            assert outbox["value"][1] == "0"  # no tick yet: the exporter says so instead of failing
