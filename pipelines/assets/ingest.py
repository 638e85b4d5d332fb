"""Ingest assets: one daily-partitioned asset per ingest source."""

import datetime as dt

import dagster as dg

from pipelines.ingest import ingest_partition
from pipelines.partitions import daily_partitions
from pipelines.resources.warehouse import WarehouseResource
from pipelines.sources.registry import SOURCES, IngestSource


def asset_name(source_name: str) -> str:
    return f"raw_{source_name}"


def _ingest_asset(src: IngestSource) -> dg.AssetsDefinition:
    @dg.asset(
        name=asset_name(src.name),
        group_name="ingest",
        kinds={"duckdb", "polars"},
        partitions_def=daily_partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        description=(
            f"{src.description}. Reads landing/{src.name}/<day>/ ({', '.join(src.patterns)}), "
            f"validates with the Great Expectations suites and replaces the day's rows in "
            f"{', '.join('raw.' + t for t in src.tables)}; rejected records go to ops.quarantine."
        ),
    )
    def _asset(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
        wh = warehouse.get()
        totals = {"files": 0, "read": 0, "loaded": 0, "quarantined": 0}
        lines = []
        for key in context.partition_keys:
            report = ingest_partition(wh, src.name, dt.date.fromisoformat(key))
            context.log.info(report.summary())
            totals["files"] += report.files_read
            totals["read"] += report.records_read
            totals["loaded"] += report.records_loaded
            totals["quarantined"] += report.records_quarantined
            lines.append(
                f"| {key} | {report.files_read} | {report.records_read} | {report.records_loaded} "
                f"| {report.records_quarantined} |"
            )
        table = "| day | files | read | loaded | quarantined |\n|---|---|---|---|---|\n" + "\n".join(lines[-31:])
        return dg.MaterializeResult(
            metadata={
                "files_read": totals["files"],
                "records_read": totals["read"],
                "records_loaded": totals["loaded"],
                "records_quarantined": totals["quarantined"],
                "partitions": dg.MetadataValue.md(table),
            }
        )

    return _asset


ingest_assets = [_ingest_asset(src) for src in SOURCES.values()]
