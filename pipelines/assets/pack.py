"""The monthly review pack (pipelines/pack/): HTML, PDF, PNG charts and a CSV/Parquet appendix of a
month, from the metrics views, kept under <home>/packs/YYYY-MM/<version>/."""

import datetime as dt

import dagster as dg

from pipelines.assets.capacity import capacity_recommendations
from pipelines.assets.marts import warehouse_models
from pipelines.pack.build import build_pack
from pipelines.partitions import monthly_partitions
from pipelines.resources.warehouse import WarehouseResource


class PackConfig(dg.Config):
    lang: str = "en"  # en | zh


@dg.asset(name="review_pack", group_name="pack", kinds={"duckdb", "polars"}, partitions_def=monthly_partitions,
          deps=[warehouse_models, capacity_recommendations])
def review_pack(context: dg.AssetExecutionContext, config: PackConfig, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The month's review pack: resources, tasks, governance, improvements and the pooling-stage
    scorecard, every number from a metrics view with its catalog definition footnoted."""
    wh = warehouse.get()
    con = wh.analyst_connect()  # read-only, no file but the warehouse and its lake
    try:
        out = build_pack(con, wh.home, dt.date.fromisoformat(context.partition_key), config.lang)
    finally:
        con.close()
    return dg.MaterializeResult(metadata={"folder": str(out), "pdf": dg.MetadataValue.path(str(out / "pack.pdf"))})


pack_job = dg.define_asset_job("review_pack_monthly", selection=[review_pack], partitions_def=monthly_partitions)


@dg.schedule(job=pack_job, cron_schedule="0 4 1 * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED)
def pack_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """On the 1st of each month (after the capacity advice), the month that just ended."""
    scheduled = context.scheduled_execution_time.date()
    previous = (scheduled.replace(day=1) - dt.timedelta(days=1)).replace(day=1)
    return dg.RunRequest(partition_key=previous.isoformat())
