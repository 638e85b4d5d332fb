"""Job-level policies: run past declared time, oversized request, retry storm, template breach.

These judge a job attempt as a whole (its run time, what it used over its life, its failures, its
declared fields) rather than minute by minute; the thresholds come from the catalog like the idle
ones. Recommendations name a right size in the units the scheduler takes (GPUs or a MIG profile).
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from allocator.model import MIG_PROFILES
from pipelines.policies.catalog import CatalogError, PolicyCatalog
from pipelines.policies.inputs import (
    ALLOCATION_SCHEMA,
    ATTEMPT_KEY,
    TS,
    PolicyInputs,
    findings,
    held,
    with_rules,
)

_NUMERIC = (pl.Int64, pl.Float64)


def _per_attempt(allocs: pl.DataFrame, inputs: PolicyInputs, now: dt.datetime, columns: list[str]) -> pl.DataFrame:
    """held() rows for the attempts in `allocs`, with the first value of `columns` per attempt."""
    key = list(ATTEMPT_KEY)
    firsts = allocs.group_by(key).agg(pl.col(columns).first())
    return held(inputs.allocations, now).join(firsts, on=key)


def overrun(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime) -> pl.DataFrame:
    """Attempts running past expected_runtime_factor x their declared expected run time, or past
    their queue's max run time (when use_queue_max_runtime). The finding's window is the time past
    the limit; evidence.runtime_cap_s is the cap a cap_runtime step sets (seconds from the attempt's
    start): cap_factor x the declared time, never beyond the queue's max."""
    rule = catalog.rule(policy)
    params = ["expected_runtime_factor", "cap_factor", "use_queue_max_runtime"]
    allocs = with_rules(inputs.allocations, catalog, policy, params)
    a = _per_attempt(allocs, inputs, now, ["scope", *params, "expected_runtime_s", "max_runtime_s"])
    queue_max = pl.when(pl.col("use_queue_max_runtime")).then(pl.col("max_runtime_s").cast(pl.Float64))
    out = (
        a.with_columns(
            by_expected=pl.col("expected_runtime_s") * pl.col("expected_runtime_factor"),
            by_queue=queue_max,
            runtime_s=(pl.col("end_at") - pl.col("started_at")).dt.total_seconds().cast(pl.Float64),
        )
        .with_columns(threshold=pl.min_horizontal("by_expected", "by_queue"))
        .filter(pl.col("runtime_s") > pl.col("threshold"))
        .with_columns(
            limit=pl.when(pl.col("by_expected") == pl.col("threshold"))
            .then(pl.lit("expected_runtime")).otherwise(pl.lit("queue_max_runtime")),
            runtime_cap_s=pl.min_horizontal(
                (pl.col("expected_runtime_s") * pl.col("cap_factor")).ceil(), pl.col("by_queue")
            ).cast(pl.Int64),
            queue_max_runtime_s=pl.col("by_queue").cast(pl.Int64),
            window_start_at=pl.col("started_at") + pl.duration(seconds=pl.col("threshold")),
        )
        .with_columns(
            window_end_at=pl.col("end_at"),
            detected_at=pl.col("window_start_at"),
            gpus_flagged=pl.col("gpus_held"),
            gpu_hours=(pl.col("runtime_s") - pl.col("threshold")) / 3600 * pl.col("fraction_held"),
            metric=pl.lit("runtime_s"),
            observed=pl.col("runtime_s"),
            is_ongoing=pl.col("is_running"),
            recommendation=pl.format("cap the run time at {} s", pl.col("runtime_cap_s")),
            evidence=pl.struct(
                "limit", "runtime_s", "expected_runtime_s", "expected_runtime_factor", "queue_max_runtime_s",
                "cap_factor", "runtime_cap_s",
            ).struct.json_encode(),
        )
    )
    return findings(out, rule)


def _mig_profiles() -> pl.DataFrame:
    """The allocator's MIG profiles: the sizes a right-size recommendation may name."""
    rows = [
        (model, profile, slices, memory, max(s for s, _ in profiles.values()))
        for model, profiles in MIG_PROFILES.items()
        for profile, (slices, memory) in profiles.items()
    ]
    return pl.DataFrame(rows, schema={"gpu_model": pl.String, "profile": pl.String, "slices": pl.Int64,
                                      "profile_memory_mib": pl.Int64, "model_slices": pl.Int64}, orient="row")


def oversized(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime) -> pl.DataFrame:
    """Attempts that held more than they used over the minutes seen (at least min_runtime_minutes,
    every allocation with telemetry: unreported GPUs are not judged). A GPU is used when its
    busy_quantile activity reaches busy_threshold. Recommends the used count of GPUs, or, when at
    most one whole MIG-capable GPU is used, the smallest MIG profile whose slices cover that
    activity and whose memory covers peak use x (1 + memory_headroom)."""
    rule = catalog.rule(policy)
    key = list(ATTEMPT_KEY)
    params = ["busy_threshold", "busy_quantile", "min_runtime_minutes", "memory_headroom"]
    allocs = with_rules(inputs.allocations, catalog, policy, params)
    per_gpu = (
        inputs.minutes.filter(pl.col("minute_at") < now)
        .join(allocs.select("allocation_id", *key, "busy_quantile"), on="allocation_id")
        .group_by("allocation_id", *key)
        .agg(
            telemetry_minutes=pl.len(),
            activity_at_quantile=pl.col("activity").sort().get(
                ((pl.len() - 1) * pl.col("busy_quantile").first()).round().cast(pl.Int64)
            ),
            peak_fb_used_mib=pl.col("fb_used_mib").max(),
        )
    )
    a = (
        _per_attempt(allocs, inputs, now, ["scope", *params, "gpu_instance_profile"])
        .with_columns(runtime_minutes=(pl.col("end_at") - pl.col("started_at")).dt.total_seconds() / 60)
        .filter(pl.col("runtime_minutes") >= pl.col("min_runtime_minutes"))
    )
    used = (
        per_gpu.join(a.select(*key, "busy_threshold"), on=key)
        .sort("allocation_id")
        .group_by(key)
        .agg(
            gpus_seen=pl.len(),
            gpus_used=(pl.col("activity_at_quantile") >= pl.col("busy_threshold")).sum().cast(pl.Int64),
            top_activity=pl.col("activity_at_quantile").max(),
            peak_fb_used_mib=pl.col("peak_fb_used_mib").max(),
            gpus=pl.struct("allocation_id", "telemetry_minutes", "activity_at_quantile", "peak_fb_used_mib"),
        )
    )
    a = a.join(used, on=key).filter(pl.col("gpus_seen") == pl.col("gpus_held"))
    profiles = _mig_profiles()
    fitting = (
        a.filter((pl.col("gpus_used") <= 1) & (pl.col("fraction_held") == pl.col("gpus_held").cast(pl.Float64)))
        .select(*key, "gpu_model", "top_activity", "peak_fb_used_mib", "memory_headroom")
        .join(profiles, on="gpu_model")
        .filter(
            (pl.col("slices") < pl.col("model_slices"))
            & (pl.col("slices") >= (pl.col("top_activity") * pl.col("model_slices")).ceil())
            & (pl.col("profile_memory_mib") >= pl.col("peak_fb_used_mib") * (1 + pl.col("memory_headroom")))
        )
        .sort("slices", "profile_memory_mib")
        .group_by(key)
        .agg(pl.col("profile").first(), profile_fraction=(pl.col("slices") / pl.col("model_slices")).first())
    )
    unit = pl.coalesce("gpu_instance_profile", "gpu_model")
    right_count = pl.max_horizontal(pl.col("gpus_used"), pl.lit(1))
    out = (
        a.join(fitting, on=key, how="left")
        .filter(pl.col("profile").is_not_null() | (pl.col("gpus_used") < pl.col("gpus_held")))
        .with_columns(
            recommended_fraction=pl.coalesce(
                "profile_fraction", right_count * pl.col("fraction_held") / pl.col("gpus_held")
            ),
            recommendation=pl.when(pl.col("profile").is_not_null())
            .then(pl.format("1 x {} instead of {} x {}", pl.col("profile"), pl.col("gpus_held"), unit))
            .otherwise(pl.format("{} x {} instead of {} x {}", right_count, unit, pl.col("gpus_held"), unit)),
            memory_needed_mib=(pl.col("peak_fb_used_mib") * (1 + pl.col("memory_headroom"))).ceil(),
        )
        .with_columns(
            window_start_at=pl.col("started_at"),
            window_end_at=pl.col("end_at"),
            detected_at=pl.col("started_at") + pl.duration(minutes=pl.col("min_runtime_minutes")),
            gpus_flagged=pl.col("gpus_held") - pl.col("gpus_used"),
            gpu_hours=pl.col("runtime_minutes") / 60 * (pl.col("fraction_held") - pl.col("recommended_fraction")),
            metric=pl.lit("gpus_used"),
            observed=pl.col("gpus_used"),
            threshold=pl.col("gpus_held"),
            is_ongoing=pl.col("is_running"),
            recommended_profile=pl.col("profile"),
        )
        .with_columns(
            evidence=pl.struct(
                "busy_threshold", "busy_quantile", "gpus_used", "gpus_held", "top_activity", "peak_fb_used_mib",
                "memory_needed_mib", "recommended_profile", "gpus",
            ).struct.json_encode()
        )
    )
    return findings(out, rule)


def retry_storm(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime) -> pl.DataFrame:
    """Jobs with min_failed_attempts failed attempts (end_state in failed_states) within
    window_hours. One finding per storm, keyed on the attempt whose failure completed it (stable
    as further attempts fail); observed counts every failure since the storm began, gpu_hours is
    what those attempts held; is_ongoing while the job is not finished (it keeps using quota)."""
    rule = catalog.rule(policy)
    job = ["source", "job_id"]
    failed_states = [s.upper() for s in rule.params["failed_states"]]
    attempts = with_rules(inputs.attempts, catalog, policy, ["min_failed_attempts", "window_hours"])
    failed = (
        attempts.filter(pl.col("ended_at").is_not_null() & pl.col("end_state").str.to_uppercase().is_in(failed_states))
        .sort(*job, "ended_at", "attempt")
        .with_columns(rank=pl.col("attempt").cum_count().over(job))
    )
    first = failed.select(*job, rank=pl.col("rank"), streak_start_at=pl.coalesce("started_at", "ended_at"),
                          streak_first_end_at=pl.col("ended_at"))
    storms = (
        failed.with_columns(rank=pl.col("rank") - pl.col("min_failed_attempts").cast(pl.UInt32) + 1)
        .join(first, on=[*job, "rank"])
        .filter(pl.col("ended_at") - pl.col("streak_first_end_at") <= pl.duration(hours=pl.col("window_hours")))
        .sort("ended_at")
        .group_by(job)
        .first()
        .select(*job, "attempt", "tenant", "queue", "template", "user_name", "gpu_model", "scope",
                "min_failed_attempts", "window_hours", "streak_start_at", "ended_at")
    )
    state = attempts.group_by(job).agg(
        job_running=pl.col("is_running").any() | (~pl.col("is_job_finished").fill_null(True)).any(),
        last_ended_at=pl.col("ended_at").max(),
    )
    counted = (
        failed.join(storms.select(*job, "streak_start_at"), on=job)
        .filter(pl.col("ended_at") >= pl.col("streak_start_at"))
        .sort("ended_at")
        .group_by(job)
        .agg(
            observed=pl.len().cast(pl.Float64),
            gpu_hours=pl.col("gpu_hours").fill_null(0).sum(),
            failures=pl.struct("attempt", "end_state", ended_at=pl.col("ended_at").dt.strftime("%Y-%m-%dT%H:%M:%SZ")),
        )
    )
    holdings = held(inputs.allocations, now).select(*ATTEMPT_KEY, "gpus_held")
    out = (
        storms.join(counted, on=job).join(state, on=job)
        .join(holdings, on=list(ATTEMPT_KEY), how="left")
        .with_columns(
            window_start_at=pl.col("streak_start_at"),
            window_end_at=pl.when("job_running").then(pl.lit(now, TS)).otherwise("last_ended_at"),
            detected_at=pl.col("ended_at"),
            gpus_held=pl.col("gpus_held").fill_null(0),
            gpus_flagged=pl.col("gpus_held").fill_null(0),
            metric=pl.lit("failed_attempts"),
            threshold=pl.col("min_failed_attempts"),
            is_ongoing=pl.col("job_running"),
            recommendation=pl.lit(None, pl.String),
            failed_states=pl.lit(failed_states, pl.List(pl.String)),
        )
        .with_columns(
            evidence=pl.struct("min_failed_attempts", "window_hours", "failed_states", "failures").struct.json_encode()
        )
    )
    return findings(out, rule)


def _present(field: str, absent_values: list[str], policy: str) -> pl.Expr:
    """Whether a template field is declared. A flag that is null (unknown) counts as declared:
    without evidence of a breach there is no finding."""
    dtype = ALLOCATION_SCHEMA.get(field)
    col = pl.col(field)
    if dtype is None:
        raise CatalogError(f"policy {policy}: params.required names {field!r}, which is not an allocation "
                           f"column; use one of {sorted(ALLOCATION_SCHEMA)}")
    if dtype == pl.Boolean:
        return col.fill_null(True)
    if dtype in _NUMERIC:
        return col.is_not_null() & (col > 0)
    return col.is_not_null() & ~col.str.strip_chars().str.to_lowercase().is_in(absent_values)


def template_breach(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime) -> pl.DataFrame:
    """Attempts whose template's required fields (params.required; "a|b": either) are not declared.
    evidence.missing lists them; the finding spans the attempt."""
    rule = catalog.rule(policy)
    absent = [v.strip().lower() for v in rule.params["absent_values"]]
    fields = sorted({f for reqs in rule.params["required"].values() for req in reqs for f in req.split("|")})
    allocs = with_rules(inputs.allocations, catalog, policy, [])
    a = _per_attempt(allocs, inputs, now, ["scope", *fields])
    checks = [
        pl.when((pl.col("template") == template) & ~pl.any_horizontal(_present(f, absent, policy)
                                                                         for f in req.split("|")))
        .then(pl.lit(req))
        for template, reqs in rule.params["required"].items()
        for req in reqs
    ]
    if not checks:
        return findings(a.clear(), rule)
    out = (
        a.with_columns(missing=pl.concat_list(checks).list.drop_nulls())
        .filter(pl.col("missing").list.len() > 0)
        .with_columns(
            window_start_at=pl.col("started_at"),
            window_end_at=pl.col("end_at"),
            detected_at=pl.col("started_at"),
            gpus_flagged=pl.col("gpus_held"),
            gpu_hours=(pl.col("end_at") - pl.col("started_at")).dt.total_seconds() / 3600 * pl.col("fraction_held"),
            metric=pl.lit("missing_fields"),
            observed=pl.col("missing").list.len().cast(pl.Float64),
            threshold=pl.lit(0.0),
            is_ongoing=pl.col("is_running"),
            recommendation=pl.format("declare {}", pl.col("missing").list.join(", ")),
        )
        .with_columns(evidence=pl.struct("template", "missing").struct.json_encode())
    )
    return findings(out, rule)
