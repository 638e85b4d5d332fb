"""The capacity domain: recommendations per month (rules over the month's metric views, the top
ones tested by the what-if replay, written to governance.capacity_recommendations by
pipelines/capacity/), the `capacity_monthly` job and its schedule."""

import datetime as dt

import dagster as dg
from pydantic import Field

from pipelines.assets.marts import reads
from pipelines.capacity.run import recommend_month
from pipelines.partitions import monthly_partitions
from pipelines.resources.warehouse import WarehouseResource
from pipelines.schedules import last_month


class CapacityConfig(dg.Config):
    whatif_top: int = Field(1, description="recommendations tested by a what-if replay (each ~1-2 min for a month)")


@dg.asset(
    name="capacity_recommendations",
    group_name="capacity",
    kinds={"duckdb", "python"},
    partitions_def=monthly_partitions,
    # What pipelines/capacity/ reads (tests/pipelines/test_asset_graph.py keeps the list exact).
    deps=reads(
        "metrics.capacity_headroom", "metrics.capacity_trend", "metrics.gpu_inventory", "metrics.job_summary",
        "metrics.pool_daily", "metrics.queue_rules", "metrics.quota_fit", "metrics.quota_fit_pairs",
        "metrics.spec_gaps", "metrics.tenant_quota", "metrics.wait_causes", "marts.dim_jobs", "marts.fct_allocation_activity",
        "marts.fct_allocations", "marts.fct_audit_events", "marts.fct_idle_windows", "marts.fct_job_attempts",
        "marts.fct_reclaim_ledger", "staging.stg_pool__gpu_inventory", "staging.stg_pool__queue_quotas",
        "raw.governance_actions",
    ),
    description=(
        "The month's capacity advice (add or remove nodes, re-split MIG, move quota, move experiments to "
        "backfill, change a queue limit) from the metric views, with evidence and a confidence; the top "
        "ones replayed through the allocator with the change (what-if). Rows in "
        "governance.capacity_recommendations, listed by metrics.capacity_recommendations."
    ),
)
def capacity_recommendations(context: dg.AssetExecutionContext, config: CapacityConfig,
                             warehouse: WarehouseResource) -> dg.MaterializeResult:
    month = dt.date.fromisoformat(context.partition_key)
    outcome = recommend_month(warehouse.get(), month, whatif_top=config.whatif_top, on_step=context.log.info)
    table = "| rank | kind | advice | confidence |\n|---|---|---|---|\n" + "\n".join(
        f"| {i} | {r.kind} | {r.recommendation} | {r.confidence} |" for i, r in enumerate(outcome.recommendations, 1))
    return dg.MaterializeResult(metadata={
        "recommendations": len(outcome.recommendations),
        "replayed": outcome.replayed,
        "rules_version": outcome.rules_version,
        # the month's days with data per kind of source: advice on a partial month rests on those days only
        "coverage": dg.MetadataValue.json(outcome.coverage.as_dict() if outcome.coverage else {}),
        # the verdict on last month's top advice, replayed on this month's demand (pipelines/capacity/review.py)
        "previous_advice_verdict": (outcome.review or {}).get("verdict", "none"),
        "list": dg.MetadataValue.md(table),
    })


capacity_job = dg.define_asset_job("capacity_monthly", selection=[capacity_recommendations],
                                   partitions_def=monthly_partitions)


@dg.schedule(job=capacity_job, cron_schedule="30 2 1 * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED)
def capacity_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """On the 1st of each month, the month that just ended."""
    return dg.RunRequest(partition_key=last_month(context))


defs = dg.Definitions(assets=[capacity_recommendations], jobs=[capacity_job], schedules=[capacity_schedule])
