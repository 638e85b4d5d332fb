"""The backfill domain: the `ingest_backfill` job ingests a range of days side by side under Dagster's
multiprocess executor (`gpupool ingest all ... --workers N`): the days are cut into N contiguous
chunks, one step (one process) each, and every step ingests its days for every source in order.

Why chunks and not a step per (source, day): a step costs a process, the code location's imports, a
run plan and a publish, about 2 s here; 150 such steps for the demo month made the backfill slower
than one process. Why a job of ops and not the ingest assets: a run of an asset covers one partition
or one range in one step, so two days of a source never load at the same time. Each step runs what
the ingest asset runs (`pipelines.ingest.ingest_days` and the expectations check) and reports the
asset's materialization per (source, day) and its check per source, so the asset catalog sees the
backfill as if the assets had run. Raw telemetry of different days commits to Delta concurrently; the
small tables, the quarantine and the ingest log serialise on the writers' lock (a short transaction
a day, a step's days in one session of the writers' file); a (source, day) partition is written by
one process at a time (Warehouse.partition_lock).

Records timestamped outside their step's days are not merged by the step (the step that owns that
day might replace its partition after): each step returns them and the last step, `merge_spilled`,
merges them once every day is loaded. Within a step they are carried or merged as in one process.
"""
import datetime as dt
from pathlib import Path

import dagster as dg

from pipelines.assets.ingest import asset_name, ingest_metadata
from pipelines.checks import suite_check_result
from pipelines.ingest import Spilled, ingest_days
from pipelines.resources.warehouse import WarehouseResource
from pipelines.sources.registry import source

JOB_NAME = "ingest_backfill"


class BackfillConfig(dg.Config):
    """Which partitions the backfill loads: every source in `sources` for every day first..last, cut
    into `chunks` contiguous ranges of days."""

    sources: list[str]
    first: str  # YYYY-MM-DD
    last: str
    chunks: int = 2


def chunk_days(first: dt.date, last: dt.date, chunks: int) -> list[list[dt.date]]:
    """first..last as at most `chunks` contiguous runs of days, as even as whole days allow."""
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    count = max(1, min(chunks, len(days)))
    size, extra = divmod(len(days), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(days[start:end])
        start = end
    return out


@dg.op(out=dg.DynamicOut(tuple))
def plan_chunks(config: BackfillConfig):
    """One mapped output per chunk of days: (sources, its days)."""
    first, last = dt.date.fromisoformat(config.first), dt.date.fromisoformat(config.last)
    for days in chunk_days(first, last, config.chunks):
        yield dg.DynamicOutput((tuple(config.sources), tuple(d.isoformat() for d in days)),
                               mapping_key=f"{days[0]:%Y_%m_%d}__{days[-1]:%Y_%m_%d}")


@dg.op
def ingest_chunk(context: dg.OpExecutionContext, warehouse: WarehouseResource, chunk: tuple) -> list[tuple]:
    """Ingest a chunk's days for every source, in order, and record the ingest assets'
    materializations (per day) and checks (per source). Returns the records timestamped outside
    the chunk, as (day, tables, files, source), for `merge_spilled`."""
    names, day_texts = chunk
    days = [dt.date.fromisoformat(d) for d in day_texts]
    wh = warehouse.get()
    out: list[tuple] = []
    # This process's writes publish once, at the end of the step (the parent publishes the last one).
    with wh.publishing("ingest", f"{', '.join(names)} {days[0]}..{days[-1]}"):
        for name in names:
            key = dg.AssetKey(asset_name(name))
            spilled: Spilled = []
            reports = ingest_days(wh, name, days, spilled=spilled)
            out += [(other, tables, files, name) for other, tables, files in spilled]
            check = suite_check_result(source(name), key, reports, wh)
            for report in reports:
                context.log.info(report.summary())
                context.log_event(dg.AssetMaterialization(
                    asset_key=key, partition=report.partition_date.isoformat(), metadata=ingest_metadata([report])))
            context.log_event(dg.AssetCheckEvaluation(
                asset_key=key, check_name=check.check_name, passed=check.passed, severity=check.severity,
                metadata=check.metadata))
    return out


@dg.op
def merge_spilled(context: dg.OpExecutionContext, warehouse: WarehouseResource, steps: list[list[tuple]]) -> None:
    """Merge the records each chunk found timestamped outside its days into their day's partition,
    per landing file (`Warehouse.merge_files`), now that every day's own rows are in."""
    wh = warehouse.get()
    with wh.publishing("ingest", "records timestamped on another chunk's day"):
        for other, tables, files, name in sorted(
                ((other, tables, files, name) for step in steps for other, tables, files, name in step),
                key=lambda item: (item[3], item[0], item[2])):
            wh.merge_files(name, other, tables, files, folder=Path(files[0]).parent)
            rows = sum(frame.height for frame in tables.values())
            context.log.info(f"{name}: {rows:,} record(s) from {len(files)} file(s) merged into {other}")


@dg.job(
    name=JOB_NAME,
    executor_def=dg.multiprocess_executor,
    # Bound here, not only in the code location: `gpupool ingest` runs the job alone (reconstructed
    # from this module in every step's process) and sets the home through the run config.
    resource_defs={"warehouse": WarehouseResource.configure_at_launch()},
    description="Ingest a range of days side by side, one process per chunk of days, every source "
                "(`gpupool ingest all PATH --workers N`).",
)
def ingest_backfill() -> None:
    merge_spilled(plan_chunks().map(ingest_chunk).collect())


defs = dg.Definitions(jobs=[ingest_backfill])
