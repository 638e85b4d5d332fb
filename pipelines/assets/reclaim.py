"""The reclaim domain (governance): the every-minute `idle_reclaim` sensor and the daily
`policy_findings` record.

- `idle_reclaim_sensor` runs one `governance_tick` (pipelines/governance/tick.py) per minute against the
  engines gpupool.yml names (the allocator, Slurm, Kueue): fresh scrape rounds in, decisions and actions out. It
  requests no runs; its tick message is the tick's summary. It starts STOPPED: turn it on in the UI (or
  `dagster sensor start idle_reclaim`) once the policies' modes are what you want.
- `policy_findings` (daily partitions, after the marts it reads) re-evaluates every policy kind over
  the warehouse for one day, replaces that day's rows of governance.policy_findings, and records the
  decisions of the kinds in `DAILY_KINDS` (gpu-health's drains and undrains among them) through the
  outbox; their policy modes decide shadow or enforce, and the sensor delivers what is queued.
- `policy_findings_schedule` materializes yesterday's partition at 01:10 UTC, after the nightly
  ingest (00:20) and model build (00:50).
"""

import datetime as dt
from collections import Counter
from dataclasses import dataclass

import dagster as dg
import polars as pl

from pipelines.assets.marts import reads
from pipelines.clock import utc_naive
from pipelines.contracts import FINDING_SCHEMA, FINDINGS_DDL, FINDINGS_TABLE, PolicyKind
from pipelines.governance.outbox import Outbox
from pipelines.partitions import daily_partitions
from pipelines.policies.catalog import PolicyCatalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.health import health_lookback
from pipelines.policies.inputs import inputs_from_warehouse
from pipelines.policies.planner import plan
from pipelines.resources.governance import GovernanceResource
from pipelines.resources.warehouse import WarehouseResource
from pipelines.schedules import daily_schedule
from pipelines.warehouse import Warehouse

SENSOR_NAME = "idle_reclaim"
DAILY_KINDS = (PolicyKind.OVERSIZED, PolicyKind.RETRY_STORM, PolicyKind.TEMPLATE_BREACH, PolicyKind.HOST_BOUND,
               PolicyKind.GPU_HEALTH)
DAILY_WRITER = "daily"


# -- the sensor ------------------------------------------------------------------------------------
@dg.sensor(
    name=SENSOR_NAME,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=(
        "Every minute: reads the running work of the engines gpupool.yml names (the allocator, whose events "
        "and audit it pulls into landing; Slurm's squeue; Kueue's Workloads), evaluates the live idle policies (idle allocation, "
        "zombie, idle interactive, overrun) on the freshest scrape rounds, records the due steps in the outbox "
        "and delivers them to each engine's enforcer (docs/reclaim.md)."
    ),
)
def idle_reclaim_sensor(
    context: dg.SensorEvaluationContext, governance: GovernanceResource, warehouse: WarehouseResource
) -> dg.SkipReason:
    try:
        report = governance.tick(warehouse.get(), utc_naive())
    except Exception as exc:  # noqa: BLE001 - a configuration error must not become a crash loop
        message = f"idle-reclaim tick failed, nothing decided: {type(exc).__name__}: {exc}"
        context.log.error(message)
        return dg.SkipReason(message)
    (context.log.info if report.ok else context.log.warning)(report.summary())
    return dg.SkipReason(report.summary())


# -- the daily record ------------------------------------------------------------------------------
@dataclass(frozen=True)
class DayRecord:
    day: dt.date
    findings: pl.DataFrame
    decisions: Counter  # "<action> <status>" of the daily kinds' decisions recorded now

    @property
    def by_policy(self) -> dict[str, int]:
        if self.findings.is_empty():
            return {}
        return dict(self.findings.group_by("policy").len().sort("policy").iter_rows())


def write_findings(warehouse: Warehouse, day: dt.date, findings: pl.DataFrame, catalog_version: str,
                   evaluated_at: dt.datetime) -> None:
    """Replace the day's rows of governance.policy_findings in one transaction."""
    frame = findings.select(FINDING_SCHEMA.keys()).with_columns(
        partition_date=pl.lit(day, pl.Date), catalog_version=pl.lit(catalog_version),
        evaluated_at=pl.lit(evaluated_at, pl.Datetime("us")),
    )
    with warehouse.writer() as con:
        con.execute(FINDINGS_DDL)
        con.register("_gpupool_findings", frame.to_arrow())
        try:
            con.execute("begin transaction")
            try:
                con.execute(f"delete from {FINDINGS_TABLE} where partition_date = ?", [day])
                con.execute(f"insert into {FINDINGS_TABLE} by name select * from _gpupool_findings")
                con.execute("commit")
            except BaseException:
                con.execute("rollback")
                raise
        finally:
            con.unregister("_gpupool_findings")


def record_day(warehouse: Warehouse, day: dt.date, catalog: PolicyCatalog, outbox: Outbox,
               now: dt.datetime | None = None) -> DayRecord:
    """Every policy over the warehouse for `day` (read-only), the findings written for the record,
    and the daily kinds' due steps recorded in the outbox (decided at `now`, default the clock)."""
    now = now or utc_naive()
    start = dt.datetime.combine(day, dt.time())
    end = min(start + dt.timedelta(days=1), now)
    con = warehouse.connect(read_only=True)
    try:
        inputs = inputs_from_warehouse(con, start, end, health_lookback=health_lookback(catalog))
    finally:
        con.close()
    findings = evaluate(inputs, catalog, end)
    write_findings(warehouse, day, findings, catalog.version, now)
    daily = findings.filter(pl.col("kind").is_in([k.value for k in DAILY_KINDS]))
    recorded = outbox.record(plan(daily, catalog, outbox, now), now)
    return DayRecord(day, findings, Counter(f"{p.action.value} {p.status.value}" for p in recorded))


@dg.asset(
    name="policy_findings",
    group_name="governance",
    kinds={"duckdb", "polars"},
    # What pipelines/policies/inputs.py reads (tests/pipelines/test_asset_graph.py keeps the list exact).
    deps=reads("marts.dim_jobs", "marts.dim_queues", "marts.fct_allocation_activity", "marts.fct_allocations",
               "marts.fct_job_attempts", "staging.stg_scheduler__job_events", "staging.stg_scheduler__artifacts",
               "metrics.job_host_usage", "metrics.gpu_health_events"),
    partitions_def=daily_partitions,
    description=(
        "Every governance policy re-evaluated over the warehouse for one UTC day: the findings replace the "
        f"day's rows of {FINDINGS_TABLE}, and the daily kinds' decisions "
        f"({', '.join(k.value.replace('_', ' ') for k in DAILY_KINDS)}) are recorded through the outbox in their "
        "policies' modes (docs/reclaim.md)."
    ),
)
def policy_findings(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, governance: GovernanceResource
) -> dg.MaterializeResult:
    wh = warehouse.get()
    catalog = governance.catalog()
    outbox = Outbox(governance.outbox_path(wh), wh.landing, writer=DAILY_WRITER)
    try:
        record = record_day(wh, dt.date.fromisoformat(context.partition_key), catalog, outbox)
    finally:
        outbox.close()
    context.log.info(f"{record.day}: {record.findings.height} findings; decisions: {dict(record.decisions)}")
    return dg.MaterializeResult(metadata={
        "findings": record.findings.height,
        "catalog_version": catalog.version,
        "findings_by_policy": dg.MetadataValue.json(record.by_policy),
        "decisions_recorded": dg.MetadataValue.json(dict(sorted(record.decisions.items()))),
    })


policy_findings_job = dg.define_asset_job(
    "policy_findings_daily",
    selection=dg.AssetSelection.assets(policy_findings),
    partitions_def=daily_partitions,
    description="Re-evaluate every governance policy over one day of the warehouse, for the record.",
)


policy_findings_schedule = daily_schedule(
    policy_findings_job, "10 1 * * *", "policy_findings_schedule",
    "Records yesterday's (UTC) policy findings at 01:10 UTC, after the nightly model build.",
    run_key_prefix="policy_findings")


defs = dg.Definitions(
    assets=[policy_findings],
    jobs=[policy_findings_job],
    schedules=[policy_findings_schedule],
    sensors=[idle_reclaim_sensor],
)
