"""Fresh inputs for the every-minute policy tick: the last hours of scraped telemetry and the
allocator's running jobs, in the shapes `pipelines.policies.inputs` defines for the warehouse.

The warehouse computes the same minutes in SQL (marts.fct_gpu_activity, fct_allocation_activity);
waiting for a model build would make a reclaim minutes late, so the tick reads the scrape rounds the
`dcgm_scrape` sensor lands and applies the same rules here: a minute's activity is the mean of
DCGM_FI_PROF_GR_ENGINE_ACTIVE, else DCGM_FI_DEV_GPU_UTIL / 100, clipped to 0..1; framebuffer use is
the minute's maximum; a MIG allocation reads its instance's series, whole and time-sliced ones the
GPU's. tests/governance/test_live_inputs.py checks both give the same minutes.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl

ACTIVITY_METRICS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
SCRAPE_SOURCE = "dcgm_parquet"


def recent_samples(landing: Path, now: dt.datetime, lookback: dt.timedelta) -> pl.DataFrame:
    """Samples in [now - lookback, now) from the day folders of the scrape landing zone."""
    since = now - lookback
    days = sorted({since.date(), now.date()})
    files = [p for d in days for p in sorted((Path(landing) / SCRAPE_SOURCE / d.isoformat()).glob("*.parquet"))]
    columns = ["sampled_at", "host", "gpu", "gpu_instance_id", "metric", "value"]
    if not files:
        return pl.DataFrame(schema={"sampled_at": pl.Datetime("us"), "host": pl.String, "gpu": pl.Int64,
                                    "gpu_instance_id": pl.Int64, "metric": pl.String, "value": pl.Float64})
    return (
        pl.scan_parquet(files, missing_columns="insert", extra_columns="ignore")
        .select(columns)
        .filter(pl.col("metric").is_in(ACTIVITY_METRICS), pl.col("sampled_at") >= since, pl.col("sampled_at") < now)
        .with_columns(pl.col("sampled_at").cast(pl.Datetime("us")), pl.col("gpu").cast(pl.Int64),
                      pl.col("gpu_instance_id").cast(pl.Int64), pl.col("value").cast(pl.Float64),
                      pl.col("host").cast(pl.String), pl.col("metric").cast(pl.String))
        .collect()
    )


def gpu_minutes(samples: pl.DataFrame) -> pl.DataFrame:
    """One row per (host, gpu, gpu_instance_id, minute_at): activity 0..1, fb_used_mib and when the
    minute's first and last samples were taken."""
    per_minute = (
        samples.with_columns(pl.col("sampled_at").dt.truncate("1m").alias("minute_at"))
        .group_by("host", "gpu", "gpu_instance_id", "minute_at")
        .agg(
            pl.col("value").filter(pl.col("metric") == "DCGM_FI_PROF_GR_ENGINE_ACTIVE").mean().alias("gr"),
            pl.col("value").filter(pl.col("metric") == "DCGM_FI_DEV_GPU_UTIL").mean().alias("util"),
            pl.col("value").filter(pl.col("metric") == "DCGM_FI_DEV_FB_USED").max().alias("fb_used_mib"),
            pl.col("sampled_at").min().alias("first_sampled_at"),
            pl.col("sampled_at").max().alias("last_sampled_at"),
        )
    )
    return per_minute.select(
        "host", "gpu", "gpu_instance_id", "minute_at", "first_sampled_at", "last_sampled_at",
        pl.coalesce("gr", pl.col("util") / 100.0).clip(0.0, 1.0).alias("activity"),
        "fb_used_mib",
    ).filter(pl.col("activity").is_not_null())


def _ts(value: str | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(value.rstrip("Z")).replace(tzinfo=None)


def allocations_from_jobs(jobs: list[dict], queues: dict[str, dict] | None = None,
                          source: str = "allocator") -> pl.DataFrame:
    """The allocations frame (pipelines.policies.inputs.ALLOCATION_SCHEMA) of running jobs as the
    allocator's API lists them (`job_view`: GET /v1/jobs?state=RUNNING); `queues` by name as
    GET /v1/queues gives them (max_runtime_s, low_priority). One row per placed GPU, slice or share."""
    queues = queues or {}
    rows = []
    for job in jobs:
        spec = job.get("spec") or {}
        queue = queues.get(job["queue"], {})
        for gpu in job.get("gpus") or []:
            instance = gpu.get("gpu_instance_id")
            rows.append({
                "allocation_id": f"{source}:{job['job_id']}:{job['attempt']}:{gpu['host']}/{gpu['gpu']}"
                                 + ("" if instance is None else f"/{instance}"),
                "source": source, "job_id": job["job_id"], "attempt": job["attempt"], "tenant": job["tenant"],
                "queue": job["queue"], "template": spec.get("template"), "user_name": job.get("user"),
                "host": gpu["host"], "gpu": gpu["gpu"], "gpu_instance_id": instance,
                "gpu_instance_profile": gpu.get("gpu_instance_profile"), "share_mode": spec.get("share_mode"),
                "gpu_model": spec.get("gpu_model"), "fraction": gpu.get("fraction", 1.0),
                "started_at": _ts(job.get("started_at")), "ended_at": _ts(job.get("ended_at")),
                "is_running": job.get("state") == "RUNNING",
                "expected_runtime_s": spec.get("expected_runtime_s"), "max_runtime_s": queue.get("max_runtime_s"),
                "idle_reminder_s": spec.get("idle_reminder_s"), "checkpoint_policy": spec.get("checkpoint_policy"),
                "min_replicas": spec.get("min_replicas"), "rollback": spec.get("rollback"),
                "reservation": spec.get("reservation"), "queue_low_priority": queue.get("low_priority"),
            })
    schema = {"allocation_id": pl.String, "source": pl.String, "job_id": pl.String, "attempt": pl.Int64,
              "tenant": pl.String, "queue": pl.String, "template": pl.String, "user_name": pl.String,
              "host": pl.String, "gpu": pl.Int64, "gpu_instance_id": pl.Int64, "gpu_instance_profile": pl.String,
              "share_mode": pl.String, "gpu_model": pl.String, "fraction": pl.Float64,
              "started_at": pl.Datetime("us"), "ended_at": pl.Datetime("us"), "is_running": pl.Boolean,
              "expected_runtime_s": pl.Int64, "max_runtime_s": pl.Int64, "idle_reminder_s": pl.Int64,
              "checkpoint_policy": pl.String, "min_replicas": pl.Int64, "rollback": pl.String,
              "reservation": pl.String, "queue_low_priority": pl.Boolean}
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def allocation_minutes(allocations: pl.DataFrame, minutes: pl.DataFrame) -> pl.DataFrame:
    """The minutes frame (MINUTE_SCHEMA): each allocation's GPU minutes whose samples were all taken
    at or after its start (and before its end, when it ended), as marts.fct_allocation_activity. A
    MIG allocation reads its instance's series; whole GPUs and time-sliced shares the GPU's."""
    keyed = allocations.select(
        "allocation_id", "host", "gpu", "started_at", "ended_at",
        pl.when(pl.col("share_mode") == "mig").then(pl.col("gpu_instance_id")).alias("series_instance"),
    )
    return (
        keyed.join(minutes, left_on=["host", "gpu", "series_instance"],
                   right_on=["host", "gpu", "gpu_instance_id"], nulls_equal=True)
        .filter(
            (pl.col("first_sampled_at") >= pl.col("started_at"))
            & (pl.col("ended_at").is_null() | (pl.col("last_sampled_at") < pl.col("ended_at")))
        )
        .select("allocation_id", "minute_at", "activity", "fb_used_mib")
        .sort("allocation_id", "minute_at")
    )
