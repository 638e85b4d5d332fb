"""Jobs and schedules."""
import datetime as dt

import dagster as dg

from pipelines.partitions import daily_partitions

ingest_job = dg.define_asset_job(
    "ingest_daily",
    selection=dg.AssetSelection.groups("ingest"),
    partitions_def=daily_partitions,
    description="Ingest one day of every source from the landing zone.",
)

models_job = dg.define_asset_job(
    "build_models",
    selection=dg.AssetSelection.groups("marts"),
    description="Rebuild staging, marts and the metrics views.",
)


def yesterday(context: dg.ScheduleEvaluationContext) -> str:
    """The UTC day that has just ended. The partitions run to today (end_offset=1, so the CLI can
    load today), which is why a partitioned schedule would otherwise pick the day still under way."""
    return (context.scheduled_execution_time.astimezone(dt.UTC).date() - dt.timedelta(days=1)).isoformat()


@dg.schedule(job=ingest_job, cron_schedule="20 0 * * *", execution_timezone="UTC",
             description="Ingests yesterday (UTC) of every source at 00:20 UTC.")
def ingest_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    day = yesterday(context)
    return dg.RunRequest(run_key=f"ingest_daily:{day}", partition_key=day)


# Once yesterday is in, the models.
models_schedule = dg.ScheduleDefinition(job=models_job, cron_schedule="50 0 * * *", execution_timezone="UTC")
