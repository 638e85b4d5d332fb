"""Asset checks: the Great Expectations suites over each loaded partition, and SQL checks.

Every result is also written to ops.check_results so the dashboards can show data quality
without a Dagster instance.
"""

import datetime as dt

import dagster as dg

from expectations.validate import validate_frame
from pipelines.assets.ingest import asset_name
from pipelines.contracts import contract
from pipelines.partitions import daily_partitions
from pipelines.resources.warehouse import WarehouseResource
from pipelines.sources.registry import SOURCES, IngestSource

# A bad batch of these would corrupt every mart downstream: stop the run instead.
BLOCKING_TABLES = {"dcgm_samples", "job_events", "job_gpus"}

def _suite_check(src: IngestSource) -> dg.AssetChecksDefinition:
    blocking = any(t in BLOCKING_TABLES for t in src.tables)
    severity = dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN

    @dg.asset_check(
        asset=asset_name(src.name),
        name="expectations_suite",
        blocking=blocking,
        partitions_def=daily_partitions,
        description=f"Great Expectations suites for {', '.join('raw.' + t for t in src.tables)} over the loaded day.",
    )
    def _check(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        wh = warehouse.get()
        per_table: dict[str, dict] = {}
        unexpected = 0
        for key in context.partition_keys:
            day = dt.date.fromisoformat(key)
            with wh.writer() as con:
                frames = {
                    t: con.sql(
                        f"select {', '.join(contract(t).column_names)} from {contract(t).table} "
                        "where partition_date = $day and ingest_source = $source",
                        params={"day": day, "source": src.name},
                    ).pl()
                    for t in src.tables
                }
            day_unexpected = 0
            for table, frame in frames.items():
                outcome = validate_frame(table, frame)
                day_unexpected += outcome.unexpected_rows
                per_table[f"{key}/{table}"] = {"rows": frame.height, **outcome.to_metadata()}
            wh.record_check("expectations_suite", asset_name(src.name), day, day_unexpected == 0,
                            severity.value, day_unexpected, per_table)
            unexpected += day_unexpected
        return dg.AssetCheckResult(
            passed=unexpected == 0,
            severity=severity,
            metadata={"unexpected_count": unexpected, "tables": dg.MetadataValue.json(per_table)},
        )

    return _check


suite_checks = [_suite_check(src) for src in SOURCES.values()]
