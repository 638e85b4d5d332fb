"""The sensor's live minutes (pipelines/governance/live.py) equal the warehouse's (marts.fct_allocation_activity).

The same DCGM samples go through live.gpu_minutes -> allocation_minutes and, as raw rows, through the
model build; an allocation's minutes must match: activity (GR engine active, else GPU util / 100,
clipped to 0..1, the minute's mean) and framebuffer use (the minute's maximum).
"""
from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipelines.governance import live
from pipelines.governance.live import (
    SAMPLE_SCHEMA,
    SCRAPE_SOURCE,
    SUMMARY_FOLDER,
    allocation_minutes,
    allocations_from_jobs,
    gpu_minutes,
    read_rounds,
    recent_gpu_minutes,
)
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


# --- the kept minutes (live.recent_gpu_minutes) against every sample read afresh -------------------


def _at(hhmmss: str) -> dt.datetime:
    return dt.datetime.combine(START.date(), dt.time.fromisoformat(hhmmss))


def _land_round(landing, round_at: dt.datetime, rows: list[dict]) -> Path:
    """One scrape round file as the dcgm_scrape sensor names it."""
    folder = landing / SCRAPE_SOURCE / round_at.date().isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"scrape-{round_at:%H%M%S}-r{round_at:%H%M%S}.parquet"
    pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row").write_parquet(path)
    return path


def _land_rounds(landing, minutes: int = 12, scale: float = 1.0) -> None:
    """Rounds every 15 s from 10:00 on two GPUs; the 10:03:45 round also carries a sample stamped
    10:04:05 (own timestamp), so minute 10:04 is split across two groups of rounds."""
    for r in range(minutes * 4):
        t = START + dt.timedelta(seconds=15 * r)
        rows = [(t, "a100-01", 0, None, GR, scale * ((r % 5) / 10)), (t, "a100-01", 0, None, FB, 100.0 + r),
                (t, "a100-01", 1, None, UTIL, scale * 7.0 * (r % 3)), (t, "a100-01", 1, None, "DCGM_FI_DEV_POWER", 1.0)]
        if t == _at("10:03:45"):
            rows.append((_at("10:04:05"), "a100-01", 0, None, GR, 0.9))
        _land_round(landing, t, rows)


def _afresh(landing, now, lookback) -> pl.DataFrame:
    files = sorted((landing / SCRAPE_SOURCE).glob("*/*.parquet"))
    samples = read_rounds(files).filter(pl.col("sampled_at") >= now - lookback, pl.col("sampled_at") < now).collect()
    return gpu_minutes(samples).sort("host", "gpu", "minute_at")


def _kept(landing, now, lookback) -> pl.DataFrame:
    return recent_gpu_minutes(landing, now, lookback).with_columns(pl.col("host").cast(pl.String)).sort(
        "host", "gpu", "minute_at")


@pytest.mark.parametrize("now", [_at("10:12"), _at("10:11:20"), _at("10:09:40")])
def test_kept_minutes_equal_every_sample_read_afresh(tmp_path, now):
    _land_rounds(tmp_path)
    lookback = dt.timedelta(minutes=8, seconds=10)  # the window starts inside a minute
    expected = _afresh(tmp_path, now, lookback)
    split = expected.filter(minute_at=_at("10:04"), gpu=0)  # its samples in two groups of rounds
    assert expected.height > 10 and split["activity"].item() == pytest.approx((0.1 + 0.2 + 0.3 + 0.4 + 0.9) / 5)
    for _ in range(2):  # the second call reads the kept summaries
        assert_frame_equal(_kept(tmp_path, now, lookback), expected)


def test_the_kept_summaries_are_rebuilt_when_deleted_and_survive_a_restart(tmp_path):
    _land_rounds(tmp_path)
    now, lookback = _at("10:12"), dt.timedelta(minutes=10)
    expected = _kept(tmp_path, now, lookback)
    kept = tmp_path / SCRAPE_SOURCE / START.date().isoformat() / SUMMARY_FOLDER
    summaries = sorted(p.name for p in kept.iterdir())
    assert len(summaries) >= 10  # one per minute of rounds
    live._KEPT.clear()  # a fresh process: read back from disk
    assert_frame_equal(_kept(tmp_path, now, lookback), expected)
    shutil.rmtree(kept)
    live._KEPT.clear()
    assert_frame_equal(_kept(tmp_path, now, lookback), expected)
    assert sorted(p.name for p in kept.iterdir()) == summaries


def test_a_changed_or_added_round_gives_new_minutes(tmp_path):
    _land_rounds(tmp_path, minutes=6)
    now, lookback = _at("10:12"), dt.timedelta(minutes=30)
    before = _kept(tmp_path, now, lookback)
    # the 10:02:15 round rewritten (GPU 0 idle then), and rounds of three more minutes landed
    _land_round(tmp_path, _at("10:02:15"), [(_at("10:02:15"), "a100-01", 0, None, GR, 0.0)])
    for r in range(6 * 4, 9 * 4):
        t = START + dt.timedelta(seconds=15 * r)
        _land_round(tmp_path, t, [(t, "a100-01", 0, None, GR, 0.5)])
    after = _kept(tmp_path, now, lookback)
    assert_frame_equal(after, _afresh(tmp_path, now, lookback))
    assert after.height == before.height + 3
    assert after.filter(minute_at=_at("10:02"), gpu=0)["activity"].item() != pytest.approx(
        before.filter(minute_at=_at("10:02"), gpu=0)["activity"].item())
    folder = tmp_path / SCRAPE_SOURCE / START.date().isoformat() / SUMMARY_FOLDER
    assert len(list(folder.glob("1002-*.parquet"))) == 1  # the group's older summary removed
