"""Idle policies over telemetry minutes: idle allocation, zombie job, idle interactive session.

All three start from the same per-GPU idle windows (`idle_windows`): gaps and islands over an
allocation's minutes, where a short busy or unreported run (at most spike_max_minutes) between idle
minutes does not break the run, because keep-alive pings and scrape hiccups would otherwise let any
job dodge the policy. Missing telemetry is never evidence of idleness: a window needs min_coverage
of its minutes reported, and a longer gap breaks it. `evaluate` finds the windows of all three in one
pass over the minutes (`shared_candidates`), an allocation judged once per distinct rule it is given. Idle allocation then groups a job attempt's
overlapping GPU windows into one finding (so 7 idle GPUs of 8 are one finding, not seven); zombie
and idle interactive need every GPU of the attempt idle at once (`all_idle_spans`).

A zombie is also a training job that stopped checkpointing: every GPU idle for `STALE_IDLE_MINUTES`
while its last ok checkpoint (or its start, without one) is older than its declared interval x
`CHECKPOINT_TOLERANCE` (`checkpoint_interval_s`: hourly, every N s/min/h; step and epoch policies have
no time interval and are not judged), the definition of an overdue checkpoint marts.fct_attempt_checkpoints uses.

The idle rule (threshold, memory floor, spike bridging, coverage, window) has one home, the catalog's
idle_allocation policy (models/policies/policies.yml): `idle_rule_rows` resolves it per queue and
template for the warehouse, whose marts.dim_idle_rules and marts.fct_idle_windows apply the same
definition in SQL as `idle_windows` does here (tests/models/test_idle_rule_agreement.py holds them equal).
"""
from __future__ import annotations

import datetime as dt
import re

import numpy as np
import polars as pl

from pipelines.contracts import PolicyKind
from pipelines.policies.catalog import PolicyCatalog
from pipelines.policies.inputs import (
    ATTEMPT_KEY,
    TS,
    PolicyInputs,
    findings,
    has_own_moments,
    held,
    with_rules,
)

IDLE_PARAMS = ("activity_threshold", "memory_floor_mib", "spike_max_minutes", "min_coverage")
WINDOW_SCHEMA: dict[str, pl.DataType] = {
    "allocation_id": pl.String, "window_start_at": TS, "window_end_at": TS, "span_minutes": pl.Float64,
    "telemetry_minutes": pl.Int64, "idle_minutes": pl.Int64, "busy_minutes": pl.Int64, "spikes": pl.Int64,
    "missing_minutes": pl.Int64, "mean_activity": pl.Float64, "peak_fb_used_mib": pl.Float64,
    "reaches_end": pl.Boolean,
}
_MINUTE = dt.timedelta(minutes=1)
CHECKPOINT_TOLERANCE = 1.5  # overdue past the declared interval x this (fct_attempt_checkpoints' gap_tolerance)
STALE_IDLE_MINUTES = 20  # every GPU idle this long, with an overdue checkpoint, is a zombie (before idle-allocation's 30)
_EVERY = re.compile(r"every\s*([0-9]+(?:\.[0-9]+)?)?\s*(s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)")


def idle_rule_rows(catalog: PolicyCatalog) -> list[dict]:
    """The catalog's idle rule resolved for every combination of its queue and template overrides (None:
    any other), as the warehouse reads it (var idle_rules -> marts.dim_idle_rules): queue, template,
    scope, enabled and the rule's parameters. The most specific row matching an allocation is the rule
    `catalog.rule` gives it. Raises ValueError when the catalog has no idle_allocation policy."""
    names = catalog.policies_of(PolicyKind.IDLE_ALLOCATION)
    if not names:
        raise ValueError("the policy catalog has no idle_allocation policy: the warehouse's idle windows "
                         "(marts.fct_idle_windows) take their rule from it; add one (models/policies/policies.yml)")
    policy = names[0]
    scopes = [s.split(":", 1) for s in catalog.scopes(policy) if s != "default"]
    queues = [None, *(value for kind, value in scopes if kind == "queue")]
    templates = [None, *(value for kind, value in scopes if kind == "template")]
    rows = []
    for queue in queues:
        for template in templates:
            rule = catalog.rule(policy, queue=queue, template=template)
            rows.append({"queue": queue, "template": template, "policy": policy, "scope": rule.scope,
                         "enabled": bool(rule.params.get("enabled", True)), "window_minutes": rule.params["window_minutes"],
                         **{p: rule.params.get(p) for p in IDLE_PARAMS}})
    return rows


def checkpoint_interval_s(policy: str | None) -> float | None:
    """A declared checkpoint policy's interval in seconds ("hourly", "every 30 min", "every 2 h"); None for
    a policy without a time interval (steps, epochs, none), as marts.fct_attempt_checkpoints reads it."""
    text = (policy or "").strip().lower()
    if text == "hourly":
        return 3600.0
    match = _EVERY.fullmatch(text)
    if match is None:
        return None
    unit = 3600 if match[2].startswith("h") else 60 if match[2].startswith("m") else 1
    return float(match[1] or 1) * unit


def idle_windows(minutes: pl.DataFrame, params: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """Idle windows per allocation (WINDOW_SCHEMA).

    `minutes`: MINUTE_SCHEMA rows; `params`: one row per allocation with allocation_id,
    activity_threshold, memory_floor_mib (null: memory not considered), spike_max_minutes,
    min_coverage and window_minutes, and optionally started_at and ended_at (the allocation's
    bounds: a window is clipped to them, since a minute bucket can begin before the allocation
    did or end after it). A minute is idle when activity < threshold and, with a memory
    floor, framebuffer use is known and below it. A window runs from an idle minute to an idle
    minute; busy or missing runs of at most spike_max_minutes inside it are bridged (and counted
    in its mean activity); it is kept when it spans at least window_minutes of elapsed time (not
    a count of sampled minutes; span_minutes is the clipped window's length) and at least
    min_coverage of its minutes have telemetry. `reaches_end`: the window is the allocation's
    last telemetry and ends within spike_max_minutes of `now`, i.e. the GPU is idle at the data's end.
    """
    windows = candidate_windows(minutes, params, now)
    lengths = params.select("window_minutes").with_row_index("params_row")
    return (
        windows.join(lengths, on="params_row")
        .filter(pl.col("span_minutes") >= pl.col("window_minutes"))
        .select(list(WINDOW_SCHEMA))
        .sort("allocation_id", "window_start_at")
    )


def candidate_windows(minutes: pl.DataFrame, params: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """The idle windows of each row of `params` before the length rule (window_minutes): WINDOW_SCHEMA
    plus params_row, the row's index in `params`, unsorted. An allocation may have several rows,
    one per parameter set (`shared_candidates`), each judged on its own; `params` needs allocation_id
    and IDLE_PARAMS, started_at and ended_at optional (see `idle_windows`).

    The rows are sorted by parameter row and minute once, so the per-row runs are found by whole-frame
    shifts, fills and cumulative sums that stop at a row's first minute, not by a window per row."""
    for bound in ("started_at", "ended_at", "evaluated_at"):
        if bound not in params.columns:
            params = params.with_columns(pl.lit(None, TS).alias(bound))
    params = params.with_columns(now_at=pl.coalesce("evaluated_at", pl.lit(now, TS)))
    row = pl.col("params_row")
    idle_row = pl.when("is_idle").then(row)
    # only what each minute is judged by travels with the minutes; a row's other columns join its windows
    per_row = params.select("allocation_id", "min_coverage", "started_at", "ended_at", "now_at").with_row_index("params_row")
    m = _minutes_by_row(minutes.filter(pl.col("minute_at") < now),
                        params.select("allocation_id", "activity_threshold", "memory_floor_mib", "spike_max_minutes",
                                      "now_at"))
    if has_own_moments(params):  # attempts evaluated before `now`
        m = m.filter(pl.col("minute_at") < pl.col("now_at"))
    m = (
        m.with_columns(
            first=(row != row.shift(1)).fill_null(True),
            last_minute_at=pl.when((row != row.shift(-1)).fill_null(True)).then("minute_at").backward_fill(),
            is_idle=(pl.col("activity") < pl.col("activity_threshold"))
            & (pl.col("memory_floor_mib").is_null() | (pl.col("fb_used_mib") < pl.col("memory_floor_mib")))
            .fill_null(False),
        )
        .with_columns(
            # the last idle minute before this one in the same row: fills carry the row along
            previous_idle_at=pl.when(idle_row.shift(1).forward_fill() == row)
            .then(pl.when("is_idle").then("minute_at").shift(1).forward_fill()),
            # (a row's first minute follows another row's last: it is never inside a window unless idle)
            spike_starts=(~pl.col("is_idle") & pl.col("is_idle").shift(1)).fill_null(False),
        )
        .with_columns(
            breaks=pl.col("is_idle")
            & (
                pl.col("previous_idle_at").is_null()
                | ((pl.col("minute_at") - pl.col("previous_idle_at")).dt.total_minutes() - 1
                   > pl.col("spike_max_minutes"))
            )
        )
        # run: the idle run's number in the whole frame (counted in a row's first minutes, each row's
        # first idle minute breaks, so an idle minute is always in a run); null where breaks is
        .with_columns(run=pl.col("breaks").fill_null(False).cum_sum())
        .with_columns(
            run=pl.when(pl.col("breaks").is_not_null() & (pl.col("run") > pl.when("first").then(
                pl.col("run") - pl.col("breaks").fill_null(False)).forward_fill())).then("run")
        )
        # a run ends at its last idle minute: the next idle minute at or after a kept minute is its run's
        .filter(pl.col("run").is_not_null() & (pl.when("is_idle").then("run").backward_fill() == pl.col("run")))
    )
    windows = (
        m.group_by("run")
        .agg(
            pl.col("params_row", "spike_max_minutes", "last_minute_at").first(),
            window_start_at=pl.col("minute_at").min(),
            run_last_at=pl.col("minute_at").max(),
            telemetry_minutes=pl.len(),
            idle_minutes=pl.col("is_idle").sum(),
            spikes=pl.col("spike_starts").sum(),
            mean_activity=pl.col("activity").mean(),
            peak_fb_used_mib=pl.col("fb_used_mib").max(),
        )
        .join(per_row, on="params_row")
    )
    return windows.with_columns(
        bucket_minutes=(pl.col("run_last_at") - pl.col("window_start_at")).dt.total_minutes() + 1,
        window_start_at=pl.max_horizontal("window_start_at", "started_at"),
        window_end_at=pl.min_horizontal(pl.col("run_last_at") + _MINUTE, "ended_at"),
    ).with_columns(
        span_minutes=(pl.col("window_end_at") - pl.col("window_start_at")).dt.total_seconds(fractional=True) / 60,
        busy_minutes=pl.col("telemetry_minutes") - pl.col("idle_minutes"),
        missing_minutes=pl.col("bucket_minutes") - pl.col("telemetry_minutes"),
        reaches_end=(pl.col("run_last_at") == pl.col("last_minute_at"))
        & ((pl.col("now_at") - pl.col("window_end_at")).dt.total_minutes() <= pl.col("spike_max_minutes")),
    ).filter(
        pl.col("telemetry_minutes") >= pl.col("min_coverage") * pl.col("bucket_minutes")
    ).select("params_row", *(pl.col(c).cast(t) for c, t in WINDOW_SCHEMA.items()))


def _minutes_by_row(minutes: pl.DataFrame, params: pl.DataFrame) -> pl.DataFrame:
    """The minutes of each row of `params`, with its columns (allocation_id aside) and params_row (its index), in the order of
    the rows and then of minute_at: an allocation's minutes repeated for each of its rows, gathered by
    position rather than joined and sorted (a sort of the repeated rows cost more than the rest)."""
    minutes = minutes.sort("allocation_id", "minute_at")
    starts = (pl.col("allocation_id") != pl.col("allocation_id").shift(1)).fill_null(True).arg_true()
    slices = minutes.select(pl.col("allocation_id").gather(starts), start=starts).with_columns(
        length=pl.col("start").shift(-1, fill_value=minutes.height) - pl.col("start"))
    rows = params.with_row_index("params_row").join(slices, on="allocation_id", how="inner", maintain_order="left")
    lengths = rows["length"].to_numpy().astype(np.int64)
    begins = np.cumsum(lengths) - lengths  # where each row's minutes begin in the output
    index = np.repeat(rows["start"].to_numpy().astype(np.int64) - begins, lengths) + np.arange(lengths.sum())
    return pl.concat([
        minutes.drop("allocation_id")[index],
        rows.drop("start", "length", "allocation_id")[np.repeat(np.arange(rows.height), lengths)],
    ], how="horizontal")


def all_idle_spans(windows: pl.DataFrame, holdings: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """Per attempt, the spans during which every GPU it holds is inside an idle window.

    `windows`: idle windows with the attempt key columns; `holdings`: `held()` rows (gpus_held).
    A sweep over window starts (+1) and ends (-1): spans where the count equals gpus_held. A window
    that reaches the data's end is open: a span made of open windows ends at the attempt's now_at (`now`
    unless it is evaluated earlier), is_ongoing_span.
    """
    key = list(ATTEMPT_KEY)
    open_end = pl.lit(now + dt.timedelta(days=1), TS)  # after every now_at
    w = windows.with_columns(end=pl.when("reaches_end").then(open_end).otherwise("window_end_at"))
    events = (
        pl.concat([
            w.select(*key, t=pl.col("window_start_at"), d=pl.lit(1)),
            w.select(*key, t=pl.col("end"), d=pl.lit(-1)),
        ])
        .group_by(*key, "t")
        .agg(pl.col("d").sum())
        .sort(*key, "t")
        .with_columns(active=pl.col("d").cum_sum().over(key), next_t=pl.col("t").shift(-1).over(key))
        .join(holdings.select(*key, "gpus_held", "now_at"), on=key)
        .filter(pl.col("active") >= pl.col("gpus_held"))
        .with_columns(new=(pl.col("t") != pl.col("next_t").shift(1).over(key)).fill_null(True))
        .with_columns(span=pl.col("new").cum_sum().over(key))
    )
    return (
        events.group_by(*key, "span")
        .agg(span_start_at=pl.col("t").min(), span_end_at=pl.col("next_t").max(), now_at=pl.col("now_at").first())
        .with_columns(is_ongoing_span=pl.col("span_end_at") == open_end)
        .with_columns(span_end_at=pl.when("is_ongoing_span").then("now_at").otherwise("span_end_at"))
        .drop("span", "now_at")
    )


def _gpu_evidence() -> pl.Expr:
    """Per GPU: its idle time (window length, bridged minutes included), mean activity, the busy
    minutes and spikes bridged, the minutes without telemetry, peak memory, idle at the data's end."""
    return pl.struct(
        "allocation_id", "host", "gpu", "mean_activity", "busy_minutes", "spikes", "missing_minutes",
        "peak_fb_used_mib", idle_minutes=pl.col("span_minutes"), ongoing=pl.col("reaches_end"),
    )


IDLE_KINDS = (PolicyKind.IDLE_ALLOCATION, PolicyKind.ZOMBIE, PolicyKind.IDLE_INTERACTIVE)


def _rule_params(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, params: tuple[str, ...] = ()) -> pl.DataFrame:
    """The allocations the policy is enabled for, with its rule's idle parameters and `params` as
    columns (memory not considered where the policy has no memory floor)."""
    allocs = with_rules(inputs.allocations, catalog, policy, (*IDLE_PARAMS, *params))
    if "memory_floor_mib" not in catalog.policy(policy).params:
        allocs = allocs.with_columns(memory_floor_mib=pl.lit(None, pl.Float64))
    return allocs


def rule_candidates(minutes: pl.DataFrame, params: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """`candidate_windows` of each distinct (allocation, idle parameters) of `params`, with the
    parameters as columns: what a policy joins its own allocations' rules to (`_windows_for`)."""
    distinct = params.select("allocation_id", *IDLE_PARAMS, "started_at", "ended_at", "evaluated_at").unique(
        maintain_order=True)
    return candidate_windows(minutes, distinct, now).join(
        distinct.select(*IDLE_PARAMS).with_row_index("params_row"), on="params_row").drop("params_row")


def shared_candidates(inputs: PolicyInputs, catalog: PolicyCatalog, policies: list[str], now: dt.datetime) -> pl.DataFrame:
    """The candidate windows of every idle policy named, found in one pass over the minutes: an
    allocation is judged once per distinct set of idle parameters its policies give it (evaluate's)."""
    return rule_candidates(inputs.minutes, pl.concat([_rule_params(inputs, catalog, p) for p in policies]), now)


def _windows_for(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime,
                 window_param: str, shortest: float | None = None, candidates: pl.DataFrame | None = None) -> pl.DataFrame:
    """Idle windows of the allocations the policy is enabled for, with their parameters and attempt;
    `shortest`: keep windows this long when the parameter asks for longer ones (the caller filters);
    `candidates`: `rule_candidates` covering the policy's rules (found here when not given)."""
    allocs = _rule_params(inputs, catalog, policy, (window_param,))
    if window_param == "remind_after_minutes":  # an interactive job's own idle_reminder_s wins
        allocs = allocs.with_columns(
            pl.coalesce((pl.col("idle_reminder_s") / 60).ceil(), pl.col(window_param)).alias(window_param)
        )
    window = pl.col(window_param) if shortest is None else pl.min_horizontal(window_param, pl.lit(float(shortest)))
    allocs = allocs.with_columns(window_minutes=window)
    if candidates is None:
        candidates = rule_candidates(inputs.minutes, allocs, now)
    windows = (
        candidates.join(allocs.select("allocation_id", *IDLE_PARAMS, "window_minutes"),
                        on=["allocation_id", *IDLE_PARAMS], nulls_equal=True)
        .filter(pl.col("span_minutes") >= pl.col("window_minutes"))
        .select(list(WINDOW_SCHEMA))
        .sort("allocation_id", "window_start_at")
    )
    return windows.join(
        allocs.select("allocation_id", *ATTEMPT_KEY, "host", "gpu", "fraction", "scope", *IDLE_PARAMS,
                      "window_minutes"),
        on="allocation_id",
    )


def idle_allocation(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime,
                    candidates: pl.DataFrame | None = None) -> pl.DataFrame:
    """One finding per job attempt per group of overlapping GPU idle windows.

    gpus_flagged of gpus_held: the attempt's GPUs with a window in the group; gpu_hours: the
    windows' duration x fraction; observed: mean activity over the windows' minutes (bridged
    spikes included); detected_at: the earliest moment a GPU's window reached window_minutes;
    is_ongoing: the attempt runs and every flagged GPU is idle at the data's end. A busy start
    does not hide later idleness: every qualifying window is a finding, the trailing one included.
    """
    rule = catalog.rule(policy)
    windows = _windows_for(inputs, catalog, policy, now, "window_minutes", candidates=candidates)
    if windows.is_empty():
        return findings(windows, rule)
    key = list(ATTEMPT_KEY)
    per_gpu = (
        windows.sort(*key, "window_start_at")
        .with_columns(
            cluster=(pl.col("window_start_at") > pl.col("window_end_at").cum_max().shift(1))
            .fill_null(True).cum_sum().over(key),
            detected_at=pl.col("window_start_at") + pl.duration(minutes=pl.col("window_minutes")),
            gpu_hours=pl.col("span_minutes") / 60 * pl.col("fraction"),
            activity_minutes=pl.col("mean_activity") * pl.col("telemetry_minutes"),
        )
        .group_by(*key, "cluster", "allocation_id")
        .agg(
            pl.col("host", "gpu", "scope", *IDLE_PARAMS, "window_minutes").first(),
            pl.col("window_start_at", "detected_at").min(),
            pl.col("window_end_at").max(),
            pl.col("reaches_end").sort_by("window_end_at").last(),
            pl.col("span_minutes", "telemetry_minutes", "idle_minutes", "busy_minutes", "spikes",
                   "missing_minutes", "gpu_hours", "activity_minutes").sum(),
            pl.col("peak_fb_used_mib").max(),
        )
        .with_columns(mean_activity=pl.col("activity_minutes") / pl.col("telemetry_minutes"))
    )
    grouped = per_gpu.sort("allocation_id").group_by(*key, "cluster").agg(
        pl.col("scope", *IDLE_PARAMS, "window_minutes").first(),
        pl.col("window_start_at", "detected_at").min(),
        pl.col("window_end_at").max(),
        gpus_flagged=pl.len(),
        gpu_hours=pl.col("gpu_hours").sum(),
        observed=pl.col("activity_minutes").sum() / pl.col("telemetry_minutes").sum(),
        all_idle_at_end=pl.col("reaches_end").all(),
        spikes_ignored=pl.col("spikes").sum(),
        gpus=_gpu_evidence(),
    )
    out = grouped.join(held(inputs.allocations, now), on=key).with_columns(
        metric=pl.lit("activity"),
        threshold=pl.col("activity_threshold"),
        is_ongoing=pl.col("is_running") & pl.col("all_idle_at_end"),
        recommendation=pl.when(pl.col("gpus_flagged") < pl.col("gpus_held")).then(pl.format(
            "{} of {} GPUs idle: ask for {} GPUs", pl.col("gpus_flagged"), pl.col("gpus_held"),
            pl.col("gpus_held") - pl.col("gpus_flagged"),
        )),
        evidence=pl.struct(
            "activity_threshold", "window_minutes", "memory_floor_mib", "spike_max_minutes", "min_coverage",
            "spikes_ignored", "gpus",
        ).struct.json_encode(),
    )
    return findings(out, rule)


def _span_findings(inputs: PolicyInputs, windows: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """Every-GPU-idle spans of the attempts with windows, with their holdings and per-GPU evidence."""
    key = list(ATTEMPT_KEY)
    holdings = held(inputs.allocations, now)
    spans = all_idle_spans(windows, holdings, now)
    evidence = (
        windows.join(spans, on=key)
        .filter((pl.col("window_start_at") < pl.col("span_end_at")) & (pl.col("window_end_at") > pl.col("span_start_at")))
        .sort("allocation_id")
        .group_by(*key, "span_start_at")
        .agg(
            pl.col("scope", *IDLE_PARAMS, "window_minutes").first(),
            observed_activity=(pl.col("mean_activity") * pl.col("telemetry_minutes")).sum()
            / pl.col("telemetry_minutes").sum(),
            gpus=_gpu_evidence(),
        )
    )
    return spans.join(evidence, on=[*key, "span_start_at"]).join(holdings, on=key)


def zombie(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime,
           candidates: pl.DataFrame | None = None) -> pl.DataFrame:
    """Attempts whose GPUs are all idle (below the zombie threshold) and that show no sign of progress:
    no progress signal for limit_minutes, or (a training job with a declared time interval) every GPU
    idle for STALE_IDLE_MINUTES while its checkpoint is overdue (module docstring). The quiet period
    starts at the later of the all-idle span's start and the last progress signal inside it (a checkpoint
    report is one); window_start_at is that start, detected_at the first moment either condition held.
    An attempt without an ok checkpoint in `inputs.progress` counts from its start: the frame must reach
    back the interval x tolerance (the tick's and the warehouse's do)."""
    rule = catalog.rule(policy)
    windows = _windows_for(inputs, catalog, policy, now, "limit_minutes", shortest=STALE_IDLE_MINUTES,
                           candidates=candidates)
    if windows.is_empty():
        return findings(windows, rule)
    key = list(ATTEMPT_KEY)
    spans = _span_findings(inputs, windows, now)
    last_progress = (
        spans.select(*key, "span_start_at", "span_end_at")
        .join(inputs.progress, on=["job_id", "attempt"])
        .filter((pl.col("at") >= pl.col("span_start_at")) & (pl.col("at") < pl.col("span_end_at")))
        .group_by(*key, "span_start_at")
        .agg(last_progress_at=pl.col("at").max())
    )
    last_checkpoint = (
        inputs.progress.join(spans.select("job_id", "attempt", "now_at").unique(), on=["job_id", "attempt"])
        .filter(pl.col("is_checkpoint").fill_null(False) & (pl.col("at") < pl.col("now_at")))
        .group_by("job_id", "attempt").agg(last_checkpoint_at=pl.col("at").max())
    )
    declared = with_rules(inputs.allocations, catalog, policy, ("limit_minutes",)).group_by(key).agg(
        pl.col("limit_minutes", "checkpoint_policy").first())
    intervals = {p: checkpoint_interval_s(p) for p in declared["checkpoint_policy"].unique().to_list() if p}
    stale_idle = pl.duration(minutes=STALE_IDLE_MINUTES)
    out = (
        spans.join(last_progress, on=[*key, "span_start_at"], how="left")
        .join(declared, on=key)
        .join(last_checkpoint, on=["job_id", "attempt"], how="left")
        .with_columns(
            window_start_at=pl.max_horizontal("span_start_at", "last_progress_at"),
            interval_s=pl.col("checkpoint_policy").replace_strict(intervals, default=None, return_dtype=pl.Float64),
            checkpoint_base_at=pl.coalesce("last_checkpoint_at", "started_at"),
        )
        .with_columns(
            quiet_minutes=(pl.col("span_end_at") - pl.col("window_start_at")).dt.total_seconds() / 60,
            due_at=pl.when(pl.col("template") == "training").then(
                pl.col("checkpoint_base_at") + pl.duration(seconds=pl.col("interval_s") * CHECKPOINT_TOLERANCE)),
        )
        .with_columns(
            overdue_at=pl.when((pl.col("quiet_minutes") >= STALE_IDLE_MINUTES) & (pl.col("due_at") <= pl.col("span_end_at")))
            .then(pl.max_horizontal(pl.col("window_start_at") + stale_idle, "due_at")),
            silent_at=pl.when(pl.col("quiet_minutes") >= pl.col("limit_minutes"))
            .then(pl.col("window_start_at") + pl.duration(minutes=pl.col("limit_minutes"))),
        )
        .with_columns(detected_at=pl.min_horizontal("overdue_at", "silent_at"))
        .filter(pl.col("detected_at").is_not_null())
        .with_columns(
            checkpoint_overdue=pl.col("overdue_at").is_not_null(),
            checkpoint_age_minutes=(pl.col("span_end_at") - pl.col("checkpoint_base_at")).dt.total_seconds() / 60,
            checkpoint_limit_minutes=pl.col("interval_s") * CHECKPOINT_TOLERANCE / 60,
        )
        .with_columns(
            window_end_at=pl.col("span_end_at"),
            gpus_flagged=pl.col("gpus_held"),
            gpu_hours=pl.col("quiet_minutes") / 60 * pl.col("fraction_held"),
            metric=pl.when("checkpoint_overdue").then(pl.lit("minutes_since_checkpoint"))
            .otherwise(pl.lit("minutes_without_progress")),
            observed=pl.when("checkpoint_overdue").then("checkpoint_age_minutes").otherwise("quiet_minutes"),
            threshold=pl.when("checkpoint_overdue").then("checkpoint_limit_minutes").otherwise("limit_minutes"),
            is_ongoing=pl.col("is_running") & pl.col("is_ongoing_span"),
            recommendation=pl.lit(None, pl.String),
            checkpoint_tolerance=pl.lit(CHECKPOINT_TOLERANCE),
            stale_idle_minutes=pl.lit(STALE_IDLE_MINUTES),
            last_progress_at=pl.col("last_progress_at").dt.strftime("%Y-%m-%dT%H:%M:%SZ"),
            last_checkpoint_at=pl.col("last_checkpoint_at").dt.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        .with_columns(
            evidence=pl.struct(
                "limit_minutes", "activity_threshold", "observed_activity", "last_progress_at", "checkpoint_policy",
                "checkpoint_tolerance", "stale_idle_minutes", "last_checkpoint_at", "checkpoint_age_minutes",
                "checkpoint_overdue", "gpus",
            ).struct.json_encode()
        )
    )
    return findings(out, rule)


def idle_interactive(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime,
                     candidates: pl.DataFrame | None = None) -> pl.DataFrame:
    """Interactive sessions with every GPU idle for remind_after_minutes (or the job's own
    idle_reminder_s). The finding's steps (remind, then reclaim after the step's delay while the
    session is still idle) come from the rule; the planner runs them."""
    rule = catalog.rule(policy)
    windows = _windows_for(inputs, catalog, policy, now, "remind_after_minutes", candidates=candidates)
    if windows.is_empty():
        return findings(windows, rule)
    out = (
        _span_findings(inputs, windows, now)
        .with_columns(idle_minutes=(pl.col("span_end_at") - pl.col("span_start_at")).dt.total_seconds() / 60)
        .filter(pl.col("idle_minutes") >= pl.col("window_minutes"))
        .with_columns(
            window_start_at=pl.col("span_start_at"),
            window_end_at=pl.col("span_end_at"),
            detected_at=pl.col("span_start_at") + pl.duration(minutes=pl.col("window_minutes")),
            gpus_flagged=pl.col("gpus_held"),
            gpu_hours=pl.col("idle_minutes") / 60 * pl.col("fraction_held"),
            metric=pl.lit("idle_minutes"),
            observed=pl.col("idle_minutes"),
            threshold=pl.col("window_minutes"),
            is_ongoing=pl.col("is_running") & pl.col("is_ongoing_span"),
            recommendation=pl.lit(None, pl.String),
            remind_after_minutes=pl.col("window_minutes"),
        )
        .with_columns(
            evidence=pl.struct(
                "remind_after_minutes", "activity_threshold", "observed_activity", "gpus",
            ).struct.json_encode()
        )
    )
    return findings(out, rule)
