"""The marts domain: the SQL models (staging views, mart tables and the metrics views, built from
models/), their checks, the `build_models` job and its schedule; and the policy exemptions, loaded
with every build so that the dashboards read them from the warehouse."""

import datetime as dt

import dagster as dg

from pipelines.assets.ingest import ingest_assets
from pipelines.catalog import documentation_gaps, load_catalog, missing_metric_columns
from pipelines.config import ConfigError
from pipelines.contracts import EXEMPTIONS_TABLE
from pipelines.models_runner import build_models
from pipelines.policies.catalog import CatalogError
from pipelines.policies.catalog import load_catalog as load_policy_catalog
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse

EXEMPTIONS_CHECK = "policy_exemptions_valid"


@dg.asset(
    name="warehouse_models",
    group_name="marts",
    kinds={"duckdb", "sql"},
    deps=ingest_assets,
)
def warehouse_models(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Builds every model in models/ (seeds, staging, marts, metrics) and the metric catalog, then
    loads the policy exemptions (load_exemptions).

    The `metrics` schema it produces is the only place dashboards, packs and SQL users read numbers.
    """
    wh = warehouse.get()
    with wh.writer() as con:
        builds = build_models(con, on_progress=lambda name, i, n: context.log.info(f"[{i}/{n}] {name}"))
    problem = load_exemptions(wh)
    if problem:
        context.log.warning(f"policy exemptions not loaded, the last loaded are kept: {problem}")
    table = "| model | kind | rows | seconds |\n|---|---|---|---|\n" + "\n".join(
        f"| {b.name} | {b.kind} | {b.rows if b.rows is not None else ''} | {b.seconds:.2f} |" for b in builds
    )
    return dg.MaterializeResult(
        metadata={"models_built": len(builds), "models": dg.MetadataValue.md(table)}
    )


def load_exemptions(wh: Warehouse) -> str | None:
    """Replace governance.policy_exemptions with the policy catalog's exemptions (the file gpupool.yml's
    governance.exemptions names, else models/policies/exemptions.yml), validated as the governance
    tick reads them, and record the outcome as the check policy_exemptions_valid. An invalid file
    keeps the rows last loaded; returns why it is invalid (None: loaded)."""
    try:
        entries = load_policy_catalog().exemptions
    except (CatalogError, ConfigError) as exc:
        wh.record_check(EXEMPTIONS_CHECK, "warehouse_models", None, False, "WARN", 1, {"error": str(exc)})
        return str(exc)
    loaded_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    rows = [[e.tenant, e.policy, e.queue, e.job_id, e.reason, e.granted_by, e.expires_at, loaded_at] for e in entries]
    with wh.writer() as con:
        con.execute("begin transaction")
        con.execute(f"delete from {EXEMPTIONS_TABLE}")
        if rows:
            con.executemany(f"insert into {EXEMPTIONS_TABLE} values (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        con.execute("commit")
    wh.record_check(EXEMPTIONS_CHECK, "warehouse_models", None, True, "WARN", 0, {"exemptions": len(rows)})
    return None


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


models_job = dg.define_asset_job(
    "build_models",
    selection=dg.AssetSelection.groups("marts"),
    description="Rebuild staging, marts and the metrics views.",
)

# Once yesterday is in (ingest_daily, 00:20), the models.
models_schedule = dg.ScheduleDefinition(job=models_job, cron_schedule="50 0 * * *", execution_timezone="UTC")

defs = dg.Definitions(
    assets=[warehouse_models],
    asset_checks=[ingest_accounting_balanced, catalog_matches_models],
    jobs=[models_job],
    schedules=[models_schedule],
)
