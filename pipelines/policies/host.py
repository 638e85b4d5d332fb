"""Host-bound work: GPUs held but underused because their host is saturated (a data-loader-bound job).

The GPUs wait on the host's CPUs or storage, so taking them away recovers nothing the job could
have used and stops its work: the remedy is more CPUs or faster storage. This policy only ever
recommends (the catalog refuses other steps for it). Its evidence comes from
metrics.job_host_usage: host-saturated minutes (host CPU busy >= 0.9 while the attempt's GPUs there
average under 0.3 activity, thresholds of marts.fct_attempt_host_share), over its observed minutes.
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from pipelines.policies.catalog import PolicyCatalog
from pipelines.policies.inputs import ATTEMPT_KEY, TS, PolicyInputs, findings, with_rules

RECOMMENDATION = "more CPUs or faster storage (the GPUs wait on the data loader)"


def host_bound(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime) -> pl.DataFrame:
    """Attempts (ended or running) with at least min_saturated_minutes host-saturated minutes that are
    at least min_saturated_share of their observed minutes (host and GPU telemetry both present).
    The finding spans the attempt; gpu_hours is what its GPUs held during the saturated minutes."""
    rule = catalog.rule(policy)
    key = list(ATTEMPT_KEY)
    params = ["min_saturated_minutes", "min_saturated_share"]
    usage = with_rules(inputs.host_usage.filter(pl.col("started_at") < now), catalog, policy, params)
    users = inputs.allocations.group_by(key).agg(pl.col("user_name").first())
    out = (
        usage.filter(pl.col("observed_minutes") > 0)
        .with_columns(
            share=pl.col("host_saturated_minutes") / pl.col("observed_minutes"),
            minutes=pl.col("host_saturated_minutes").cast(pl.Float64),
        )
        .filter((pl.col("minutes") >= pl.col("min_saturated_minutes"))
                & (pl.col("share") >= pl.col("min_saturated_share")))
        .join(users, on=key, how="left")
        .with_columns(
            window_start_at=pl.col("started_at"),
            window_end_at=pl.when(pl.col("is_running")).then(pl.lit(now, TS)).otherwise(pl.col("ended_at")),
            # the earliest the count could have been reached: the minutes come as a total
            detected_at=pl.col("started_at") + pl.duration(minutes=pl.col("min_saturated_minutes").cast(pl.Int64)),
            gpus_held=pl.col("allocations"),
            gpus_flagged=pl.col("allocations"),  # every GPU waits on the same host
            gpu_hours=pl.col("host_saturated_gpu_hours"),
            metric=pl.lit("host_saturated_share"),
            observed=pl.col("share"),
            threshold=pl.col("min_saturated_share"),
            is_ongoing=pl.col("is_running"),
            recommendation=pl.lit(RECOMMENDATION),
        )
        .with_columns(
            evidence=pl.struct(
                host=pl.col("saturated_host"),
                cpu_busy_fraction=pl.col("saturated_cpu_busy_fraction_mean"),
                disk_read_bytes_per_s=pl.col("saturated_disk_read_bytes_per_s_mean"),
                gpu_activity=pl.col("saturated_gpu_activity_mean"),
                gpu_activity_overall=pl.col("gpu_activity_mean"),
                host_saturated_minutes=pl.col("host_saturated_minutes"),
                observed_minutes=pl.col("observed_minutes"),
                min_saturated_minutes=pl.col("min_saturated_minutes"),
                min_saturated_share=pl.col("min_saturated_share"),
            ).struct.json_encode()
        )
    )
    return findings(out, rule)
