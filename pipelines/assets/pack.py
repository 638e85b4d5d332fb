"""The pack domain: the monthly review pack (pipelines/pack/: HTML, PDF, PNG charts and a CSV/Parquet
appendix of a month, from the metrics views, kept under <home>/packs/YYYY-MM/<version>/ and listed in
ops.review_packs), the `review_pack_monthly` job and its schedule."""

import datetime as dt

import dagster as dg
from pydantic import Field

from pipelines.assets.marts import reads
from pipelines.pack.build import build_pack
from pipelines.pack.figures import FIGURES, TABLES
from pipelines.partitions import monthly_partitions
from pipelines.resources.warehouse import WarehouseResource
from pipelines.schedules import last_month


class PackConfig(dg.Config):
    lang: str = Field("en", description="the pack's language: en or zh")


@dg.asset(name="review_pack", group_name="pack", kinds={"duckdb", "polars"}, partitions_def=monthly_partitions,
          # The views of the pack's figures and tables, and the catalog it footnotes them with.
          deps=reads(*sorted({f"metrics.{x.view}" for x in (*FIGURES, *TABLES)}), "metrics.catalog",
                     "metrics.catalog_version"))
def review_pack(context: dg.AssetExecutionContext, config: PackConfig, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The month's review pack: resources, tasks, governance, improvements and the pooling-stage
    scorecard, every number from a metrics view with its catalog definition footnoted."""
    out = build_pack(warehouse.get(), dt.date.fromisoformat(context.partition_key), config.lang)
    return dg.MaterializeResult(metadata={"folder": str(out), "pdf": dg.MetadataValue.path(str(out / "pack.pdf"))})


pack_job = dg.define_asset_job("review_pack_monthly", selection=[review_pack], partitions_def=monthly_partitions)


@dg.schedule(job=pack_job, cron_schedule="0 4 1 * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED)
def pack_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """On the 1st of each month (after the capacity advice), the month that just ended."""
    return dg.RunRequest(partition_key=last_month(context))


defs = dg.Definitions(assets=[review_pack], jobs=[pack_job], schedules=[pack_schedule])
