"""The ingest domain: one daily-partitioned asset per ingest source (each with its expectations
check), the `ingest_daily` job and its schedule."""
import datetime as dt
from collections.abc import Iterator

import dagster as dg

from pipelines.assets.ingest_cursor import INGEST_TAG, NEW_FILES
from pipelines.checks import suite_check_result, suite_check_spec
from pipelines.ingest import ingest_days, ingest_new_files
from pipelines.ingest_record import IngestReport
from pipelines.partitions import daily_partitions
from pipelines.resources.warehouse import WarehouseResource
from pipelines.schedules import daily_schedule
from pipelines.sources.registry import SOURCES, IngestSource

# Lineage only: the connector asset that fills a source's landing folder (pipelines.assets.connectors).
# `ingest_daily` selects the ingest group alone, so it never runs (nor needs) the connectors.
LANDED_BY = {
    "slurm_sacct": "slurm_accounting_landing",
    "slurm_sacct_json": "slurm_accounting_landing",
    "kueue": "kueue_workloads_landing",
}


def asset_name(source_name: str) -> str:
    return f"raw_{source_name}"


def ingest_metadata(reports: list[IngestReport]) -> dict:
    """An ingest asset's materialization metadata for the days of `reports`."""
    rows = "\n".join(
        f"| {r.partition_date} | {r.files_read} | {r.records_read} | {r.records_loaded} | {r.records_quarantined} |"
        for r in reports[-31:]
    )
    return {
        "files_read": sum(r.files_read for r in reports),
        "records_read": sum(r.records_read for r in reports),
        "records_loaded": sum(r.records_loaded for r in reports),
        "records_quarantined": sum(r.records_quarantined for r in reports),
        "files_empty": sum(r.files_empty for r in reports),
        "notes": dg.MetadataValue.json(
            [f"{r.partition_date}: {n}" if len(reports) > 1 else n for r in reports for n in r.notes][:200]
        ),
        "partitions": dg.MetadataValue.md(
            "| day | files | read | loaded | quarantined |\n|---|---|---|---|---|\n" + rows
        ),
    }


def _ingest_asset(src: IngestSource) -> dg.AssetsDefinition:
    key = dg.AssetKey(asset_name(src.name))

    @dg.asset(
        key=key,
        group_name="ingest",
        deps=[dg.AssetKey(LANDED_BY[src.name])] if src.name in LANDED_BY else None,
        kinds={"duckdb", "polars"},
        partitions_def=daily_partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        check_specs=[suite_check_spec(src, key)],
        description=(
            f"{src.description}. Reads landing/{src.name}/<day>/ ({', '.join(src.patterns)}), "
            f"validates with the Great Expectations suites and replaces the day's rows in "
            f"{', '.join('raw.' + t for t in src.tables)}; rejected records go to ops.quarantine."
        ),
    )
    def _asset(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        wh = warehouse.get()
        days = [dt.date.fromisoformat(p) for p in context.partition_keys]
        with wh.publishing("ingest", f"{key.to_user_string()} {days[0]}..{days[-1]}"):  # one release per run
            if context.run.tags.get(INGEST_TAG) == NEW_FILES:  # an intraday run: what landed since the last
                reports = [ingest_new_files(wh, src.name, day) for day in days]
            else:
                reports = ingest_days(wh, src.name, days)
        for report in reports:
            context.log.info(report.summary())
            for note in report.notes:
                context.log.info(f"{report.partition_date}: {note}")
        yield dg.MaterializeResult(asset_key=key, metadata=ingest_metadata(reports))
        yield suite_check_result(src, key, reports, wh)

    return _asset


ingest_assets = [_ingest_asset(src) for src in SOURCES.values()]

ingest_job = dg.define_asset_job(
    "ingest_daily",
    selection=dg.AssetSelection.groups("ingest"),
    partitions_def=daily_partitions,
    description="Ingest one day of every source from the landing zone.",
)


ingest_schedule = daily_schedule(ingest_job, "20 0 * * *", "ingest_schedule",
                                 "Ingests yesterday (UTC) of every source at 00:20 UTC.")


defs = dg.Definitions(assets=ingest_assets, jobs=[ingest_job], schedules=[ingest_schedule])
