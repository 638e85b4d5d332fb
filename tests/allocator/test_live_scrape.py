"""Scrape the running allocator's per-node exporter over HTTP and parse it with the pipeline's own parser."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import requests

from pipelines.clock import utc_naive
from pipelines.sources.dcgm_text import parse_dcgm_text
from tests.allocator.helpers import ADMIN, SHARE_MODE_JOBS, auth
from tests.allocator.server import running_server


@pytest.mark.slow
def test_scraped_metrics_parse_clean_and_carry_the_running_job(tmp_path: Path):
    with running_server(tmp_path / "allocator.db", tmp_path) as server:
        jobs = []
        for body in SHARE_MODE_JOBS:
            r = requests.post(f"{server.url}/v1/jobs", json=body, headers=auth(ADMIN), timeout=5)
            assert r.status_code == 201, r.text
            assert r.json()["state"] == "RUNNING"
            jobs.append(r.json())

        for job in jobs:
            placement = job["gpus"]
            host = placement[0]["host"]
            url = f"{server.url}/nodes/{host}/metrics"
            scraped_at = utc_naive()
            # without a token the GPUs' values are there but no job is named (docs/allocator.md)
            anonymous = requests.get(url, timeout=5)
            assert anonymous.status_code == 200 and "hpc_job" not in anonymous.text
            r = requests.get(url, headers=auth(ADMIN), timeout=5)
            assert r.status_code == 200
            assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            parsed = parse_dcgm_text(r.text, source_file=url, scraped_at=scraped_at)
            assert parsed.quarantine.height == 0, parsed.quarantine
            assert parsed.records_loaded == parsed.records_read > 0
            samples = parsed.tables["dcgm_samples"]
            assert samples.get_column("host").unique().to_list() == [host]
            assert samples.get_column("source_file").unique().to_list() == [url]

            held = pl.DataFrame(
                {
                    "gpu": [p["gpu"] for p in placement],
                    "gpu_instance_id": [p.get("gpu_instance_id") for p in placement],
                },
                schema={"gpu": pl.Int32, "gpu_instance_id": pl.Int32},
            )
            on_job = samples.filter(pl.col("hpc_job") == job["job_id"])
            # every GPU (or MIG instance) of the placement reports the job, and only those do
            got = on_job.select(
                pl.col("gpu").cast(pl.Int32), pl.col("gpu_instance_id").cast(pl.Int32)
            ).unique()
            if job["spec"]["share_mode"] == "timeslice":
                got = got.with_columns(gpu_instance_id=pl.lit(None, pl.Int32))
                held = held.with_columns(gpu_instance_id=pl.lit(None, pl.Int32))
            assert got.sort("gpu").to_dicts() == held.sort("gpu").to_dicts()
            assert set(on_job.get_column("metric")) >= {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"}
            assert on_job.filter(pl.col("metric") == "DCGM_FI_DEV_FB_USED").get_column("value").min() > 0
            # GPUs nobody holds carry no job and read no activity
            free = samples.filter(
                pl.col("hpc_job").is_null()
                & pl.col("metric").is_in(["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"])
            )
            assert free.height > 0 and free.get_column("value").max() == 0

        assert requests.get(f"{server.url}/nodes/nope-99/metrics", timeout=5).status_code == 404
