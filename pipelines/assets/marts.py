"""The SQL models: staging views, mart tables and the metrics views, built from models/."""

import dagster as dg

from pipelines.assets.ingest import ingest_assets
from pipelines.catalog import documentation_gaps, load_catalog, missing_metric_columns
from pipelines.models_runner import build_models
from pipelines.resources.warehouse import WarehouseResource


@dg.asset(
    name="warehouse_models",
    group_name="marts",
    kinds={"duckdb", "sql"},
    deps=ingest_assets,
)
def warehouse_models(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Builds every model in models/ (seeds, staging, marts, metrics) and the metric catalog.

    The `metrics` schema it produces is the only place dashboards, packs and SQL users read numbers.
    """
    wh = warehouse.get()
    with wh.writer() as con:
        builds = build_models(con, on_progress=lambda name, i, n: context.log.info(f"[{i}/{n}] {name}"))
    table = "| model | kind | rows | seconds |\n|---|---|---|---|\n" + "\n".join(
        f"| {b.name} | {b.kind} | {b.rows if b.rows is not None else ''} | {b.seconds:.2f} |" for b in builds
    )
    return dg.MaterializeResult(
        metadata={"models_built": len(builds), "models": dg.MetadataValue.md(table)}
    )


@dg.asset_check(asset=warehouse_models, name="ingest_accounting_balanced", blocking=False)
def ingest_accounting_balanced(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    """Every ingest run accounts for each record: read = loaded + quarantined."""
    wh = warehouse.get()
    with wh.writer() as con:
        bad = con.execute(
            """
            with latest as (
              select *, row_number() over (partition by ingest_source, partition_date order by finished_at desc) as rn
              from ops.ingest_log
            )
            select ingest_source, cast(partition_date as varchar), records_read, records_loaded, records_quarantined
            from latest
            where rn = 1 and records_read <> records_loaded + records_quarantined
            order by 1, 2
            """
        ).fetchall()
    wh.record_check("ingest_accounting_balanced", "warehouse_models", None, not bad, "WARN", len(bad),
                    {"unbalanced": bad[:20]})
    return dg.AssetCheckResult(
        passed=not bad,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"unbalanced_partitions": len(bad), "examples": dg.MetadataValue.json([list(r) for r in bad[:10]])},
    )


@dg.asset_check(asset=warehouse_models, name="catalog_matches_models", blocking=True)
def catalog_matches_models(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    """Every catalog metric exists as its view's column, and every model column is documented."""
    wh = warehouse.get()
    with wh.writer() as con:
        problems = documentation_gaps(con) + missing_metric_columns(con, load_catalog())
    wh.record_check("catalog_matches_models", "warehouse_models", None, not problems, "ERROR", len(problems),
                    {"problems": problems[:50]})
    return dg.AssetCheckResult(
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"problems": len(problems), "examples": dg.MetadataValue.json(problems[:20])},
    )
