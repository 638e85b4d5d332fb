"""When the schedules run for: the UTC day or the month that has just ended."""
import datetime as dt

import dagster as dg


def yesterday(context: dg.ScheduleEvaluationContext) -> str:
    """The UTC day that has just ended. The partitions run to today (end_offset=1, so the CLI can
    load today), which is why a partitioned schedule would otherwise pick the day still under way."""
    return (context.scheduled_execution_time.astimezone(dt.UTC).date() - dt.timedelta(days=1)).isoformat()


def last_month(context: dg.ScheduleEvaluationContext) -> str:
    """The first day of the month before the scheduled run's: the month that has just ended."""
    scheduled = context.scheduled_execution_time.date()
    return (scheduled.replace(day=1) - dt.timedelta(days=1)).replace(day=1).isoformat()
