"""The sensor's live minutes (pipelines/governance/live.py) equal the warehouse's (marts.fct_allocation_activity).

The same DCGM samples go through live.gpu_minutes -> allocation_minutes and, as raw rows, through the
model build; an allocation's minutes must match: activity (GR engine active, else GPU util / 100,
clipped to 0..1, the minute's mean) and framebuffer use (the minute's maximum).
"""
from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from pipelines.governance.live import allocation_minutes, allocations_from_jobs, gpu_minutes
from tests.models.builders import at, build, gpu, load, quota, simple_job

GR, UTIL, FB = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"
START = at("10:00")
MINUTES = 20


def _samples() -> list[dict]:
    """Four scrapes a minute: GPU 0 reports GR (busy, then idle with a spike) and FB; GPU 1 only
    GPU util (the coalesce path), once above 100 % (clipped)."""
    rows = []
    for m in range(MINUTES):
        for k, second in enumerate((0, 15, 30, 45)):
            t = START + dt.timedelta(minutes=m, seconds=second)
            gr = 0.8 - 0.1 * k if m < 8 else (0.3 if (m == 12 and k == 0) else 0.01 * k)
            util = 120.0 if (m == 3 and k == 1) else float(10 * ((m + k) % 7))
            rows += [
                {"sampled_at": t, "host": "a100-01", "gpu": 0, "metric": GR, "value": gr},
                {"sampled_at": t, "host": "a100-01", "gpu": 0, "metric": FB, "value": 1000.0 + 100 * k + m},
                {"sampled_at": t, "host": "a100-01", "gpu": 1, "metric": UTIL, "value": util},
                {"sampled_at": t, "host": "a100-01", "gpu": 1, "metric": FB, "value": 500.0 - k},
            ]
    return [r | {"source": "dcgm_text", "source_file": "metrics.prom"} for r in rows]


def test_live_minutes_equal_the_warehouse_minutes(warehouse):
    events, gpus = simple_job("j-1", "a100-01", 0, START, None,
                              spec={"expected_runtime_s": 86400, "checkpoint_policy": "hourly"})
    gpus.append(gpus[0] | {"gpu": 1})
    samples = _samples()
    load(warehouse, gpu_inventory=[gpu("a100-01", i) for i in range(2)],
         queue_quotas=[quota("vision-train", "vision", "A100", 2.0)], job_events=events, job_gpus=gpus,
         dcgm_samples=samples)
    with build(warehouse) as con:
        built = con.sql("""
            select a.gpu, m.minute_at, m.activity, m.fb_used_mib
            from marts.fct_allocation_activity m join marts.fct_allocations a using (allocation_id)
            where a.job_id = 'j-1' order by a.gpu, m.minute_at""").pl()

    job = {"job_id": "j-1", "attempt": 1, "tenant": "vision", "queue": "vision-train", "state": "RUNNING",
           "started_at": "2026-11-01T10:00:00Z",
           "gpus": [{"host": "a100-01", "gpu": 0, "fraction": 1.0}, {"host": "a100-01", "gpu": 1, "fraction": 1.0}],
           "spec": {"template": "training", "gpu_model": "A100", "share_mode": "whole"}}
    allocations = allocations_from_jobs([job])
    frame = pl.DataFrame(samples).select("sampled_at", "host", "gpu", pl.lit(None, pl.Int64).alias("gpu_instance_id"),
                                         "metric", "value")
    live = (
        allocation_minutes(allocations, gpu_minutes(frame))
        .join(allocations.select("allocation_id", "gpu"), on="allocation_id")
        .select("gpu", "minute_at", "activity", "fb_used_mib")
        .sort("gpu", "minute_at")
    )
    assert live.height == built.height == 2 * MINUTES
    assert live["minute_at"].to_list() == built["minute_at"].to_list()
    assert live["gpu"].to_list() == built["gpu"].cast(pl.Int64).to_list()
    assert live["activity"].to_list() == pytest.approx(built["activity"].to_list())
    assert live["fb_used_mib"].to_list() == pytest.approx(built["fb_used_mib"].to_list())
    assert live["activity"].max() <= 1.0 and live.filter(gpu=1, minute_at=at("10:03"))["activity"].item() > 0.3
