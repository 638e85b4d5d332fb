"""What the policies read, as Polars frames, and how those frames come from the warehouse.

The policy functions never touch a database: the sensor (fresh minutes), the daily record (the
warehouse) and the simulator build the same frames and get the same findings. Each frame has a
schema below; columns marked optional may be left out and are then null.

ALLOCATION_SCHEMA: one row per allocation = a GPU, MIG slice or time-sliced share held by a job
attempt (the columns of marts.fct_allocations the policies need, plus template fields).
  required: allocation_id, source, job_id, attempt, tenant, queue, template, gpu_model, fraction,
            started_at, is_running
  optional: user_name, host, gpu, gpu_instance_profile, share_mode, ended_at (null while running),
            expected_runtime_s (declared), max_runtime_s (queue's cap), idle_reminder_s (interactive
            jobs' own reminder), checkpoint_policy, min_replicas, rollback, reservation,
            queue_low_priority (null: unknown), evaluated_at (the attempt's own `now` when one pass
            evaluates looks taken at different moments, as the simulator batches them: its minutes
            and progress at or after it are ignored and it ends a running attempt; null: `now`.
            Only the live kinds read it: idle_allocation, zombie, idle_interactive and overrun)
MINUTE_SCHEMA: one row per allocation per telemetry minute (marts.fct_allocation_activity); a
  minute without a row had no telemetry, which is never taken as idle.
PROGRESS_SCHEMA: one row per progress signal of a job attempt (a job event, a checkpoint or artifact
  report). optional: is_checkpoint (an ok checkpoint was written then; null: no), which the zombie
  policy reads for checkpoint staleness.
ATTEMPT_SCHEMA: one row per job attempt (marts.fct_job_attempts with the job's attributes); only
  the retry-storm policy reads it, so callers evaluating the live kinds may leave it empty.
HOST_USAGE_SCHEMA: one row per job attempt with node_exporter data (metrics.job_host_usage): the
  minutes its GPUs were underused while a host's CPU was saturated, with the evidence. required:
  source, job_id, attempt, queue, template, started_at, is_running, allocations, observed_minutes,
  host_saturated_minutes. Only the host-bound policy reads it.
HEALTH_SCHEMA: one row per GPU per health signal per minute it fired (metrics.gpu_health_events, the
  columns of marts.fct_gpu_health_events), plus signal "telemetry" rows (one per GPU per hour it sent
  any telemetry, is_hardware_fault false) so that a silent GPU is never taken as a healthy one.
  required: host, gpu, minute_at, signal, is_hardware_fault; optional: xid, event_count, engine
  (allocator | slurm | kueue: the engine that schedules the host; null: allocator). Only the
  gpu_health policy reads it.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

import duckdb
import polars as pl

from pipelines.contracts import FINDING_SCHEMA
from pipelines.policies.catalog import PolicyCatalog
from pipelines.policies.model import Rule, empty_frame

TS = pl.Datetime("us")
ALLOCATION_SCHEMA: dict[str, pl.DataType] = {
    "allocation_id": pl.String, "source": pl.String, "job_id": pl.String, "attempt": pl.Int64,
    "tenant": pl.String, "queue": pl.String, "template": pl.String, "user_name": pl.String,
    "host": pl.String, "gpu": pl.Int64, "gpu_instance_profile": pl.String, "share_mode": pl.String,
    "gpu_model": pl.String, "fraction": pl.Float64, "started_at": TS, "ended_at": TS, "is_running": pl.Boolean,
    "expected_runtime_s": pl.Int64, "max_runtime_s": pl.Int64, "idle_reminder_s": pl.Int64,
    "checkpoint_policy": pl.String, "min_replicas": pl.Int64, "rollback": pl.String, "reservation": pl.String,
    "queue_low_priority": pl.Boolean, "evaluated_at": TS,
}
ALLOCATION_REQUIRED = ("allocation_id", "source", "job_id", "attempt", "tenant", "queue", "template",
                       "gpu_model", "fraction", "started_at", "is_running")
MINUTE_SCHEMA: dict[str, pl.DataType] = {
    "allocation_id": pl.String, "minute_at": TS, "activity": pl.Float64, "fb_used_mib": pl.Float64,
}
MINUTE_REQUIRED = ("allocation_id", "minute_at", "activity")
PROGRESS_SCHEMA: dict[str, pl.DataType] = {"job_id": pl.String, "attempt": pl.Int64, "at": TS, "is_checkpoint": pl.Boolean}
PROGRESS_REQUIRED = ("job_id", "attempt", "at")
ATTEMPT_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String, "job_id": pl.String, "attempt": pl.Int64, "tenant": pl.String, "queue": pl.String,
    "template": pl.String, "user_name": pl.String, "gpu_model": pl.String, "started_at": TS, "ended_at": TS,
    "end_state": pl.String, "is_running": pl.Boolean, "is_job_finished": pl.Boolean, "gpu_hours": pl.Float64,
}
ATTEMPT_REQUIRED = ("source", "job_id", "attempt", "tenant", "queue", "started_at", "ended_at", "end_state")

HEALTH_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String, "gpu": pl.Int64, "minute_at": TS, "signal": pl.String, "xid": pl.Int64,
    "event_count": pl.Float64, "is_hardware_fault": pl.Boolean, "engine": pl.String,
}
HEALTH_REQUIRED = ("host", "gpu", "minute_at", "signal", "is_hardware_fault")

HOST_USAGE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String, "job_id": pl.String, "attempt": pl.Int64, "tenant": pl.String, "queue": pl.String,
    "template": pl.String, "gpu_model": pl.String, "started_at": TS, "ended_at": TS, "is_running": pl.Boolean,
    "gpus": pl.Float64, "allocations": pl.Int64, "observed_minutes": pl.Int64, "gpu_activity_mean": pl.Float64,
    "host_saturated_minutes": pl.Int64, "host_saturated_gpu_hours": pl.Float64, "saturated_host": pl.String,
    "saturated_cpu_busy_fraction_mean": pl.Float64, "saturated_disk_read_bytes_per_s_mean": pl.Float64,
    "saturated_gpu_activity_mean": pl.Float64,
}
HOST_USAGE_REQUIRED = ("source", "job_id", "attempt", "queue", "template", "started_at", "is_running",
                       "allocations", "observed_minutes", "host_saturated_minutes")

ATTEMPT_KEY = ("source", "job_id", "attempt")


class InputError(ValueError):
    """A frame handed to the policies lacks a required column."""


def conform(frame: pl.DataFrame | None, schema: dict[str, pl.DataType], required: Iterable[str],
            name: str) -> pl.DataFrame:
    """The frame with every schema column (optional ones added as null) in schema order and types."""
    if frame is None:
        return empty_frame(schema)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(f"{name} frame lacks column(s) {missing}; see pipelines/policies/inputs.py")
    have = frame.schema
    if list(have.items()) == list(schema.items()):  # already conformed: no Polars pass
        return frame
    if all(have.get(c) == t for c, t in schema.items()):  # extra columns only: a projection, no casts
        return frame.select(list(schema))
    return frame.select(
        (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c) for c, t in schema.items()
    )


@dataclass(frozen=True)
class PolicyInputs:
    """The frames the policies read, conformed to their schemas on construction."""

    allocations: pl.DataFrame
    minutes: pl.DataFrame
    progress: pl.DataFrame = field(default_factory=lambda: empty_frame(PROGRESS_SCHEMA))
    attempts: pl.DataFrame = field(default_factory=lambda: empty_frame(ATTEMPT_SCHEMA))
    host_usage: pl.DataFrame = field(default_factory=lambda: empty_frame(HOST_USAGE_SCHEMA))
    health: pl.DataFrame = field(default_factory=lambda: empty_frame(HEALTH_SCHEMA))

    def __post_init__(self) -> None:
        object.__setattr__(self, "allocations",
                           conform(self.allocations, ALLOCATION_SCHEMA, ALLOCATION_REQUIRED, "allocations"))
        object.__setattr__(self, "minutes", conform(self.minutes, MINUTE_SCHEMA, MINUTE_REQUIRED, "minutes"))
        object.__setattr__(self, "progress",
                           conform(self.progress, PROGRESS_SCHEMA, PROGRESS_REQUIRED, "progress"))
        object.__setattr__(self, "attempts", conform(self.attempts, ATTEMPT_SCHEMA, ATTEMPT_REQUIRED, "attempts"))
        object.__setattr__(self, "host_usage",
                           conform(self.host_usage, HOST_USAGE_SCHEMA, HOST_USAGE_REQUIRED, "host_usage"))
        object.__setattr__(self, "health", conform(self.health, HEALTH_SCHEMA, HEALTH_REQUIRED, "health"))


# -- rules as columns ---------------------------------------------------------------------------
def with_rules(frame: pl.DataFrame, catalog: PolicyCatalog, policy: str, params: Iterable[str]) -> pl.DataFrame:
    """The frame's rows whose resolved rule is enabled, with the rule's scope and the named scalar
    parameters as columns. Rules are resolved once per distinct (queue, template), not per row."""
    params = tuple(params)
    pairs = tuple(sorted(frame.select("queue", "template").unique().iter_rows(), key=repr))
    table = _rule_table(catalog, policy, params, pairs)
    return frame.join(table, on=["queue", "template"], how="left", nulls_equal=True).filter(pl.col("scope").is_not_null())


# Rule tables by (catalog, policy, parameters, pairs): a simulated month asks for the same few again
# and again. Each entry holds its catalog, so an id is never reused while its entry is kept.
_RULE_TABLES: dict[tuple, tuple[PolicyCatalog, pl.DataFrame]] = {}


def _rule_table(catalog: PolicyCatalog, policy: str, params: tuple[str, ...],
                pairs: tuple[tuple[str | None, str | None], ...]) -> pl.DataFrame:
    """(queue, template) -> scope and parameters, for the pairs whose rule is enabled."""
    key = (id(catalog), policy, params, pairs)
    entry = _RULE_TABLES.get(key)
    if entry is not None and entry[0] is catalog:
        return entry[1]
    if len(_RULE_TABLES) >= 4096:
        _RULE_TABLES.clear()
    resolved = [(q, t, catalog.rule(policy, queue=q, template=t)) for q, t in pairs]
    table = pl.DataFrame([
        pl.Series("queue", [q for q, _, _ in resolved], pl.String),
        pl.Series("template", [t for _, t, _ in resolved], pl.String),
        pl.Series("scope", [r.scope for _, _, r in resolved], pl.String),
        pl.Series("_enabled", [bool(r.params.get("enabled", True)) for _, _, r in resolved], pl.Boolean),
        *(_param_series(p, [r.params.get(p) for _, _, r in resolved]) for p in params),
    ]).filter(pl.col("_enabled")).drop("_enabled")
    _RULE_TABLES[key] = (catalog, table)
    return table


def _param_series(name: str, values: list) -> pl.Series:
    """A parameter as a column: numbers as Float64 (also when every scope leaves it null), flags as Boolean."""
    series = pl.Series(name, values, strict=False)
    return series if series.dtype == pl.Boolean else series.cast(pl.Float64)


def has_own_moments(frame: pl.DataFrame) -> bool:
    """Whether some row of the frame carries its attempt's own evaluated_at (ALLOCATION_SCHEMA)."""
    return "evaluated_at" in frame.columns and frame.get_column("evaluated_at").null_count() < frame.height


def held(allocations: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """Per attempt: the GPUs held, their summed fraction, start, end (its now_at while running), now_at (the
    moment it is evaluated at: evaluated_at, else `now`) and attributes."""
    return allocations.group_by(ATTEMPT_KEY).agg(
        pl.col("tenant", "queue", "template", "user_name", "gpu_model").first(),
        gpus_held=pl.len(),
        fraction_held=pl.col("fraction").sum(),
        started_at=pl.col("started_at").min(),
        ended_at=pl.when(pl.col("is_running").any()).then(None).otherwise(pl.col("ended_at").max()),
        is_running=pl.col("is_running").any(),
        now_at=pl.coalesce(pl.col("evaluated_at").first(), pl.lit(now, TS)),
    ).with_columns(end_at=pl.coalesce("ended_at", "now_at"))


def findings(frame: pl.DataFrame, rule: Rule) -> pl.DataFrame:
    """FINDING_SCHEMA rows from a frame holding the finding columns (all but finding_id, policy,
    policy_version and kind). window_start_at is cut to whole seconds so that finding_id equals
    finding_key(policy, version, job_id, attempt, window_start_at.isoformat())."""
    if frame.is_empty():
        return empty_frame(FINDING_SCHEMA)
    out = frame.with_columns(
        pl.col("window_start_at").cast(TS).dt.truncate("1s"),
        policy=pl.lit(rule.policy),
        policy_version=pl.lit(rule.version),
        kind=pl.lit(rule.kind.value),
    ).with_columns(
        finding_id=pl.concat_str(
            pl.lit(f"{rule.policy}:{rule.version}:"), pl.col("job_id"), pl.lit(":a"), pl.col("attempt").cast(pl.String),
            pl.lit(":"), pl.col("window_start_at").dt.strftime("%Y-%m-%dT%H:%M:%S"),
        )
    )
    return out.select(pl.col(c).cast(t) for c, t in FINDING_SCHEMA.items())


# -- from the warehouse -------------------------------------------------------------------------
def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> pl.DataFrame:
    return con.sql(sql, params=params).pl()


def inputs_from_warehouse(
    con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime,
    lookback: dt.timedelta = dt.timedelta(days=1), health_lookback: dt.timedelta = dt.timedelta(days=3),
) -> PolicyInputs:
    """The inputs as they stood at `end`, for work overlapping [start, end): an allocation or
    attempt ending after `end` counts as still running, so re-running a past day gives the same
    findings. Minutes and progress signals come from [start, end); attempts reach `lookback`
    further back for the retry-storm window, health events `health_lookback` before `end` (the
    gpu-health windows: `pipelines.policies.health.health_lookback`). Read-only queries; evaluate with now = end (or the
    data's end when earlier)."""
    allocations = _frame(con, """
        with queues as (
          select queue, max(max_runtime_s) as max_runtime_s, sum(quota_gpus) = 0 as queue_low_priority
          from marts.dim_queues group by queue
        )
        select
          a.allocation_id, a.source, a.job_id, a.attempt, a.tenant, a.queue, a.template, a.user_name,
          a.host, a.gpu, a.gpu_instance_profile, a.share_mode, a.gpu_model, a.fraction, a.started_at,
          case when a.ended_at <= ? then a.ended_at end as ended_at,
          a.ended_at is null or a.ended_at > ? as is_running,
          j.expected_runtime_s, q.max_runtime_s,
          try_cast(json_extract_string(j.spec_json, '$.idle_reminder_s') as bigint) as idle_reminder_s,
          case when j.has_checkpoint_policy then j.checkpoint_policy end as checkpoint_policy,
          j.min_replicas, j.rollback_method as rollback, j.reservation, q.queue_low_priority
        from marts.fct_allocations a
        left join marts.dim_jobs j using (source, job_id)
        left join queues q on q.queue = a.queue
        where a.started_at < ? and coalesce(a.ended_at, a.effective_ended_at) >= ?
    """, [end, end, end, start])
    minutes = _frame(con, """
        select m.allocation_id, m.minute_at, m.activity, m.fb_used_mib
        from marts.fct_allocation_activity m
        where m.minute_at >= ? and m.minute_at < ?
    """, [start, end])
    # job events and checkpoint/artifact reports in the window, and each attempt's last ok checkpoint before
    # it (checkpoint staleness reaches back further than the window)
    progress = _frame(con, """
        select job_id, attempt, occurred_at as at, false as is_checkpoint
        from staging.stg_scheduler__job_events
        where occurred_at >= ? and occurred_at < ?
        union all
        select job_id, attempt, occurred_at as at, kind = 'checkpoint' and status = 'ok' as is_checkpoint
        from staging.stg_scheduler__artifacts
        where attempt is not null and occurred_at >= ? and occurred_at < ?
        union all
        select job_id, attempt, max(occurred_at) as at, true as is_checkpoint
        from staging.stg_scheduler__artifacts
        where attempt is not null and kind = 'checkpoint' and status = 'ok' and occurred_at < ?
        group by job_id, attempt
    """, [start, end, start, end, start])
    attempts = _frame(con, """
        with hours as (
          select source, job_id, attempt, sum(allocated_gpu_hours) as gpu_hours
          from marts.fct_allocations group by all
        )
        select
          t.source, t.job_id, t.attempt, j.tenant, j.queue, j.template, j.user_name, j.gpu_model,
          t.started_at,
          case when t.ended_at <= ? then t.ended_at end as ended_at,
          case when t.ended_at <= ? then t.end_state end as end_state,
          t.is_started and (t.ended_at is null or t.ended_at > ?) as is_running,
          coalesce(j.finished_at <= ?, false) as is_job_finished,
          h.gpu_hours
        from marts.fct_job_attempts t
        join marts.dim_jobs j using (source, job_id)
        left join hours h using (source, job_id, attempt)
        where coalesce(t.started_at, t.queued_at) < ? and (t.ended_at is null or t.ended_at >= ?)
    """, [end, end, end, end, end, start - lookback])
    # minutes counted over the attempt's life as the warehouse holds it (the view has no minutes)
    host_usage = _frame(con, """
        select
          source, job_id, attempt, tenant, queue, template, gpu_model, started_at,
          case when not is_running and ended_at <= ? then ended_at end as ended_at,
          is_running or ended_at > ? as is_running,
          gpus, allocations, observed_minutes, gpu_activity_mean, host_saturated_minutes, host_saturated_gpu_hours,
          saturated_host, saturated_cpu_busy_fraction_mean, saturated_disk_read_bytes_per_s_mean,
          saturated_gpu_activity_mean
        from metrics.job_host_usage
        where started_at < ? and ended_at >= ?
    """, [end, end, end, start])
    health = _frame(con, """
        select host, gpu, minute_at, signal, xid, event_count, is_hardware_fault, engine
        from metrics.gpu_health_events
        where minute_at >= ? and minute_at < ?
    """, [end - health_lookback, end])
    return PolicyInputs(allocations=allocations, minutes=minutes, progress=progress, attempts=attempts, health=health,
                        host_usage=host_usage)
