"""Jobs and schedules."""
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

# Yesterday's partition, shortly after midnight UTC, then the models once it is in.
ingest_schedule = dg.build_schedule_from_partitioned_job(ingest_job, hour_of_day=0, minute_of_hour=20)
models_schedule = dg.ScheduleDefinition(job=models_job, cron_schedule="50 0 * * *", execution_timezone="UTC")
