"""The pack domain: the monthly review pack (pipelines/pack/: HTML, PDF, PNG charts and a CSV/Parquet
appendix of a month, from the metrics views, kept under <home>/packs/YYYY-MM/<version>/ and listed in
ops.review_packs), the pool's and every tenant's, emailed when gpupool.yml has a `pack_delivery`
section (pipelines/pack/deliver.py); the `review_pack_monthly` job and its schedule."""

import datetime as dt

import dagster as dg
from pydantic import Field

from pipelines.assets.marts import reads
from pipelines.pack.build import build_pack
from pipelines.pack.deliver import deliver, delivery_config
from pipelines.pack.figures import POOL
from pipelines.pack.tenant import TENANT, tenants_of_month
from pipelines.partitions import monthly_partitions
from pipelines.resources.warehouse import WarehouseResource
from pipelines.schedules import last_month


class PackConfig(dg.Config):
    lang: str | None = Field(None, description="build only this language (en or zh); default: the "
                                               "pack_delivery section's languages, else en")


@dg.asset(name="review_pack", group_name="pack", kinds={"duckdb", "polars"}, partitions_def=monthly_partitions,
          # The views of the pool's and the tenants' figures and tables, and the catalog it footnotes them with.
          deps=reads(*sorted({f"metrics.{x.view}" for s in (POOL, TENANT) for x in (*s.figures, *s.tables)}),
                     "metrics.catalog", "metrics.catalog_version"))
def review_pack(context: dg.AssetExecutionContext, config: PackConfig, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The month's review packs, the pool's and every tenant's with allocations in the month:
    resources, tasks, governance, improvements and the pooling-stage scorecard, every number from a
    metrics view with its catalog definition footnoted; emailed when `pack_delivery` is configured."""
    settings = delivery_config()  # an invalid section fails the run before anything is built
    languages = [config.lang] if config.lang else settings.languages if settings else ["en"]
    wh = warehouse.get()
    month = dt.date.fromisoformat(context.partition_key)
    con = wh.analyst_connect()
    try:
        tenants = tenants_of_month(con, month)
    finally:
        con.close()
    folders = [build_pack(wh, month, lang, tenant=tenant) for lang in languages for tenant in (None, *tenants)]
    home = wh.home
    metadata = {"packs_built": len(folders), "packs": dg.MetadataValue.json([str(f.relative_to(home)) for f in folders]),
                "pdf": dg.MetadataValue.path(str(folders[0] / "pack.pdf"))}
    if settings is None:
        context.log.info(f"{len(folders)} packs built; not emailed: gpupool.yml has no pack_delivery section")
        return dg.MaterializeResult(metadata={**metadata, "mails_sent": 0, "delivery": "not configured"})
    sent = deliver(wh, folders, settings,
                   on_sent=lambda s: context.log.info(f"sent {s.pack.filename} to {s.recipient}"))
    return dg.MaterializeResult(metadata={
        **metadata, "mails_sent": len(sent), "delivery": f"SMTP {settings.host}:{settings.smtp_port}",
        "mails": dg.MetadataValue.json([f"{s.pack.filename} -> {s.recipient}" for s in sent])})


pack_job = dg.define_asset_job("review_pack_monthly", selection=[review_pack], partitions_def=monthly_partitions)


@dg.schedule(job=pack_job, cron_schedule="0 4 1 * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED)
def pack_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """On the 1st of each month (after the capacity advice), the month that just ended."""
    return dg.RunRequest(partition_key=last_month(context))


defs = dg.Definitions(assets=[review_pack], jobs=[pack_job], schedules=[pack_schedule])
