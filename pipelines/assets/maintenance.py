"""The maintenance domain: the `maintain_lake` job (pipelines/lake/retention.py: old raw telemetry
compacted, small files merged, recommendation pins and old releases expired, the lake vacuumed)
and its daily schedule. An op, not an asset: it keeps every figure as it was and makes no data."""

import dagster as dg
from pydantic import Field

from pipelines.lake.retention import maintain
from pipelines.resources.warehouse import WarehouseResource


class MaintainConfig(dg.Config):
    raw_retention_days: int | None = Field(
        None, description="compact raw telemetry older than this; empty: $GPUPOOL_RAW_RETENTION_DAYS, else 35")


@dg.op(name="maintain_lake_op")
def maintain_lake_op(context: dg.OpExecutionContext, config: MaintainConfig, warehouse: WarehouseResource) -> None:
    """Compact raw telemetry past its retention, merge small files, expire recommendation pins and
    releases, vacuum the lake; every line of the report goes to the run's log."""
    report = maintain(warehouse.get(), raw_retention_days=config.raw_retention_days, on_step=context.log.info)
    for line in report.lines():
        context.log.info(line)
    context.add_output_metadata({
        "days_compacted": len(report.compacted),
        "rows_before": sum(d.rows_before for d in report.compacted),
        "rows_after": sum(d.rows_after for d in report.compacted),
        "releases_expired": len(report.expired),
        "files_vacuumed": sum(v.files for v in report.vacuumed.values()),
        "bytes_vacuumed": sum(v.bytes for v in report.vacuumed.values()),
        "report": dg.MetadataValue.md("\n".join(f"- {line}" for line in report.lines())),
    })


@dg.job(name="maintain_lake", description="The lake's daily retention and clean-up (pipelines/lake/retention.py).")
def maintain_lake() -> None:
    maintain_lake_op()


# 03:30 UTC: after the nightly ingest (00:20), build (00:50) and policy findings (01:10), before
# the monthly pack (04:00 on the 1st), which pins the release it reads
maintain_lake_schedule = dg.ScheduleDefinition(
    name="maintain_lake_schedule", job=maintain_lake, cron_schedule="30 3 * * *", execution_timezone="UTC",
    description="Every day at 03:30 UTC: the lake's retention and clean-up.",
    default_status=dg.DefaultScheduleStatus.STOPPED)

defs = dg.Definitions(jobs=[maintain_lake], schedules=[maintain_lake_schedule])
