"""The backfill domain: the `ingest_backfill` job ingests many (source, day) partitions side by side,
one step per partition, under Dagster's multiprocess executor (`gpupool ingest all ... --workers N`).

Why a job of ops and not the ingest assets: a run of an asset covers one partition or one range in
one step, so two days of a source never load at the same time. Here each (source, day) is a mapped
step in its own process, running what the ingest asset runs for a day (`pipelines.ingest` and the
expectations check), and it reports the asset's materialization and check for that partition, so
the asset catalog sees the backfill as if the asset had run. Raw telemetry of different days commits
to Delta concurrently; the small tables, the quarantine and the ingest log serialise on the writers'
lock (a short transaction each).

Records timestamped on a later day of the run than their file's are not merged by the step (the
later day's own step might replace its partition after): the step returns them and the last step,
`merge_carried`, merges them once every day is loaded, as the one-process run carries them forward.
"""
import datetime as dt

import dagster as dg
import polars as pl

from pipelines.assets.ingest import asset_name
from pipelines.checks import suite_check_result
from pipelines.ingest import Carried, ingest_partition, landing_folder
from pipelines.resources.warehouse import WarehouseResource
from pipelines.sources.registry import source
from pipelines.warehouse import IngestReport

JOB_NAME = "ingest_backfill"


def ingest_metadata(reports: list[IngestReport]) -> dict:
    """The ingest asset's materialization metadata for the days of `reports`."""
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


class BackfillConfig(dg.Config):
    """Which partitions the backfill loads: every source in `sources` for every day first..last."""

    sources: list[str]
    first: str  # YYYY-MM-DD
    last: str


@dg.op(out=dg.DynamicOut(tuple))
def plan_partitions(config: BackfillConfig):
    """One mapped output per (source, day); the telemetry first, the biggest steps."""
    first, last = dt.date.fromisoformat(config.first), dt.date.fromisoformat(config.last)
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    by_size = sorted(config.sources, key=lambda name: (not name.startswith("dcgm"), name))
    for name in by_size:
        for day in days:
            yield dg.DynamicOutput((name, day.isoformat(), config.last),
                                   mapping_key=f"{name}__{day:%Y_%m_%d}")


@dg.op
def ingest_one_partition(context: dg.OpExecutionContext, warehouse: WarehouseResource,
                         partition: tuple) -> dict:
    """Ingest one (source, day) and record the ingest asset's materialization and check for it.
    Returns the records timestamped on a later day of the run, for `merge_carried`."""
    name, day_text, last_text = partition
    day, last = dt.date.fromisoformat(day_text), dt.date.fromisoformat(last_text)
    wh = warehouse.get()
    key = dg.AssetKey(asset_name(name))
    carried: Carried = {}
    # This process's writes publish once, at the end of the step (the parent publishes the last one).
    with wh.publishing("ingest", f"{key.to_user_string()} {day}"):
        report = ingest_partition(wh, name, day, carried=carried, run_last=last)
        context.log.info(report.summary())
        check = suite_check_result(source(name), key, [report], wh)
    context.log_event(dg.AssetMaterialization(asset_key=key, partition=day_text, metadata=ingest_metadata([report])))
    context.log_event(dg.AssetCheckEvaluation(
        asset_key=key, check_name=check.check_name, passed=check.passed, severity=check.severity,
        metadata=check.metadata))
    return {"source": name, "day": day_text, "carried": carried}


@dg.op
def merge_carried(context: dg.OpExecutionContext, warehouse: WarehouseResource, steps: list[dict]) -> None:
    """Merge the records each step carried to a later day of the run into that day's partition, per
    landing file of the step's day (`Warehouse.merge_files`), now that every day's own rows are in."""
    wh = warehouse.get()
    with wh.publishing("ingest", "records carried to a later day"):
        for step in sorted(steps, key=lambda s: (s["source"], s["day"])):
            if not step["carried"]:
                continue
            name, day = step["source"], dt.date.fromisoformat(step["day"])
            files = [str(f) for f in source(name).files_in(landing_folder(wh, name, day))]
            for other, tables in sorted(step["carried"].items()):
                frames = {table: pl.concat(parts, how="vertical") for table, parts in tables.items()}
                wh.merge_files(name, other, frames, files)
                context.log.info(f"{name} {day}: {sum(f.height for f in frames.values()):,} record(s) merged into {other}")


@dg.job(
    name=JOB_NAME,
    executor_def=dg.multiprocess_executor,
    # Bound here, not only in the code location: `gpupool ingest` runs the job alone (reconstructed
    # from this module in every step's process) and sets the home through the run config.
    resource_defs={"warehouse": WarehouseResource.configure_at_launch()},
    description="Ingest every (source, day) of a range side by side, one process per partition "
                "(`gpupool ingest all PATH --workers N`).",
)
def ingest_backfill() -> None:
    merge_carried(plan_partitions().map(ingest_one_partition).collect())


defs = dg.Definitions(jobs=[ingest_backfill])
