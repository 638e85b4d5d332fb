"""When the schedules run for: the UTC day or the month that has just ended; the daily schedule
the partitioned jobs share."""
from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:  # what dg.define_asset_job returns; not exported under dg
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


def yesterday(context: dg.ScheduleEvaluationContext) -> str:
    """The UTC day that has just ended. The partitions run to today (end_offset=1, so the CLI can
    load today), which is why a partitioned schedule would otherwise pick the day still under way."""
    return (context.scheduled_execution_time.astimezone(dt.UTC).date() - dt.timedelta(days=1)).isoformat()


def last_month(context: dg.ScheduleEvaluationContext) -> str:
    """The first day of the month before the scheduled run's: the month that has just ended."""
    scheduled = context.scheduled_execution_time.date()
    return (scheduled.replace(day=1) - dt.timedelta(days=1)).replace(day=1).isoformat()


def daily_schedule(job: UnresolvedAssetJobDefinition, cron: str, name: str, description: str,
                   run_key_prefix: str | None = None) -> dg.ScheduleDefinition:
    """Runs `job` at `cron` (UTC) for yesterday's partition, once per day: its run key is
    `<run_key_prefix, default the job's name>:<day>`. Stopped until an operator starts it (Dagster's default)."""
    prefix = run_key_prefix or job.name

    @dg.schedule(job=job, cron_schedule=cron, execution_timezone="UTC", name=name, description=description)
    def _daily(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        day = yesterday(context)
        return dg.RunRequest(run_key=f"{prefix}:{day}", partition_key=day)

    return _daily
