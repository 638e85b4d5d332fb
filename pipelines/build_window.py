"""Which days a build's day-by-day (microbatch) models rebuild: every day whose rows a change can alter,
not only the days that changed. One rule for both build paths: `gpupool build` (pipelines/build.py:
the partitions loaded since the last successful build) and the Dagster dbt assets
(pipelines/assets/marts.py: the run's partitions).

The day-by-day models are marts.fct_gpu_activity and fct_gpu_daily (a day reads its own DCGM samples),
fct_host_activity (a day reads its samples and the day before's last ones: the first counter delta of a
day needs the previous sample) and fct_allocation_activity (a day's allocation segments, cut at
midnight, joined to its telemetry). Given the changed days C (partitions loaded or re-loaded, any
source), the rows that can change are on:

- the days of C;
- the day after a changed day of host samples (fct_host_activity's first rates of that day);
- for every job with a row in C's partitions (its allocations' start or end may have moved): the days
  of those rows' own times (a snapshot source such as sacct files events of earlier days under the
  day it was queried), the start of its attempts placed there (a re-delivered placement moves the
  allocation), and up to its end as the raw events now say it (its latest event; the data's end while
  an attempt has started and not ended) and as the previous build had it (an allocation that was still
  running then and whose end came in a late file leaves rows on every later day until rebuilt);
- up to the previous build's last day of every allocation alive on a day of C (one that a re-ingest
  removed);
- from the previous build's end of data (dim_days.as_of_at) when the changes reach it: allocations
  still running were cut there.

Clamped to the days that can hold rows of these models (telemetry's days, and C: a day whose telemetry
a re-ingest removed keeps stale rows until rebuilt). The window is one range of days, [start, end),
what dbt's --event-time-start/--event-time-end take.

Not covered (a full refresh is needed after them): a change to what dim_gpus says of a GPU (its model
or share mode from a newer inventory snapshot) changes that GPU's rows of fct_gpu_daily and
fct_allocation_activity on every day; a re-ingested snapshot source that drops a job whose events lay
on days outside its partition.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Collection

import duckdb

# the jobs with a row in the changed partitions: the days of those rows' own times, the first start of
# their attempts placed there, their latest event, and whether an attempt has started and not ended
# (a start or placement after every requeue, preempt or finish: models/marts/jobs/fct_job_attempts.sql)
_CHANGED_JOBS = """
with changed as (select unnest(?::date[]) as day),
changed_rows as (
  select source, job_id, attempt, occurred_at as row_at, lower(event_type) as event_type
  from raw.job_events where partition_date in (select day from changed)
  union all
  select source, job_id, attempt, assigned_at, 'assign'
  from raw.job_gpus where partition_date in (select day from changed)
),
touched as (select distinct source, job_id from changed_rows),
placed as (select distinct source, job_id, attempt from changed_rows where event_type = 'assign'),
job_rows as (
  select source, job_id, attempt, occurred_at as row_at, lower(event_type) as event_type
  from raw.job_events semi join touched using (source, job_id)
  union all
  select source, job_id, attempt, assigned_at, 'assign'
  from raw.job_gpus semi join touched using (source, job_id)
),
jobs as (
  select
    max(row_at) as last_at,
    max(row_at) filter (where event_type in ('start', 'assign')) as last_started_at,
    max(row_at) filter (where event_type in ('requeue', 'preempt', 'finish')) as last_ended_at
  from job_rows
  group by source, job_id
)
select
  (select cast(min(row_at) as date) from changed_rows),
  (select cast(max(row_at) as date) from changed_rows),
  (select cast(min(row_at) as date) from job_rows semi join placed using (source, job_id, attempt)
   where event_type in ('start', 'assign')),
  (select cast(max(last_at) as date) from jobs),
  (select coalesce(bool_or(last_started_at > coalesce(last_ended_at, timestamp '-infinity')), false) from jobs)
"""

# the previous build's allocations of the jobs above, or alive on a changed day: their last day
_PREVIOUS_ALLOCATIONS = """
with changed as (select unnest(?::date[]) as day),
touched as (
  select distinct source, job_id from raw.job_events where partition_date in (select day from changed)
  union
  select distinct source, job_id from raw.job_gpus where partition_date in (select day from changed)
),
previous as (
  select allocation_id from marts.fct_allocations semi join touched using (source, job_id)
  union
  select allocation_id from marts.fct_allocation_segments where day in (select day from changed)
)
select max(day) from marts.fct_allocation_segments semi join previous using (allocation_id)
"""


TELEMETRY_TABLES = ("raw.dcgm_samples", "raw.host_samples")


def telemetry_days(con: duckdb.DuckDBPyConnection) -> tuple[dt.date | None, dt.date | None]:
    """The first and last UTC day of the telemetry's samples (raw.dcgm_samples and raw.host_samples);
    (None, None) without any. Read from ops.lake_versions, which records the first and last day of
    the sample times of the version each lake view reads (from its files' Delta statistics), so that
    it costs the same whatever the history; scanned from the samples where a view's days are not
    recorded (a view written before they were, a file without statistics). `con`: a writers'
    connection, whose schema and lake views Warehouse.ensure_schema has brought up to date."""
    first, last, tables, unknown = con.execute(
        "select min(first_day), max(last_day), count(*),"
        " count(*) filter (where version is not null and first_day is null)"
        " from ops.lake_versions where table_name in (select unnest(?::varchar[]))", [list(TELEMETRY_TABLES)],
    ).fetchone()
    if tables == len(TELEMETRY_TABLES) and not unknown:
        return first, last
    return con.execute(
        "select cast(min(first) as date), cast(max(last) as date) from ("
        " select min(sampled_at) as first, max(sampled_at) as last from raw.dcgm_samples union all"
        " select min(sampled_at), max(sampled_at) from raw.host_samples)"
    ).fetchone()


def rebuild_window(con: duckdb.DuckDBPyConnection, changed: Collection[dt.date],
                   host_changed: Collection[dt.date] = ()) -> tuple[dt.date, dt.date] | None:
    """[start, end) of the days the microbatch models rebuild after the partitions of the `changed`
    days were loaded (`host_changed`: those of them with host samples), by the rule in this module's
    docstring; None without telemetry or changes (nothing to rebuild). `con` sees the raw tables as
    loaded now and the marts as the previous build left them (absent marts: no previous build)."""
    first, last = telemetry_days(con)
    if first is None or not changed:
        return None
    days = sorted(set(changed))
    row_first, row_last, placed_start, job_last, any_open = con.execute(_CHANGED_JOBS, [days]).fetchone()
    # the latest day that can hold rows: the telemetry's, or a changed day's (its rows may be stale)
    data_last = max(last, days[-1])
    start = min(d for d in (days[0], row_first, placed_start) if d is not None)
    ends = [days[-1], row_last, job_last, data_last if any_open else None]
    ends += [d + dt.timedelta(days=1) for d in host_changed]
    present = {f"{s}.{t}" for s, t in con.execute(
        "select table_schema, table_name from information_schema.tables where table_schema = 'marts'").fetchall()}
    if {"marts.fct_allocations", "marts.fct_allocation_segments"} <= present:
        ends.append(con.execute(_PREVIOUS_ALLOCATIONS, [days]).fetchone()[0])
    if "marts.dim_days" in present:
        as_of = con.execute("select max(as_of_at) from marts.dim_days").fetchone()[0]
        reached = max(d for d in (days[-1], row_last) if d is not None)
        if as_of is not None and reached >= as_of.date():
            start = min(start, as_of.date())
    end = min(max(d for d in ends if d is not None), data_last)
    start = max(start, min(first, days[0]))
    return start, max(start, end) + dt.timedelta(days=1)
