"""Retention of a gpupool home's lake: old raw telemetry compacted to the per-minute grain the marts
use, recommendation pins expired, old releases expired, small Delta files merged and unreferenced
ones vacuumed. `gpupool maintain` and the Dagster job `maintain_lake` run `maintain`.

Raw telemetry (raw.dcgm_samples) of days older than GPUPOOL_RAW_RETENTION_DAYS (default 35) is
replaced, per day, by rows from which models/staging/dcgm/stg_dcgm__samples.sql and
models/marts/telemetry/fct_gpu_activity.sql compute the same per-minute rows as from the samples: per GPU (or
MIG instance) and minute, one row per metric holding the minute's aggregate (the mean, or the
highest FB_USED and the lowest FB_FREE), at the minute's first sample time, plus rows that carry
only a copy of an extreme (which moves no mean, max or min) at the last sample time and with the
minute's other job and pod labels. A rebuild gives the same fct_gpu_activity rows, except
`samples`: it counts the rows' values, and a minute of n samples kept as fewer rows cannot count n
(that would take a row per sample, which is what compaction removes). The marts already built are
kept: incremental builds rebuild only the days ingested since the last build, and compaction
ingests nothing.

Compacted rows carry COMPACTED_MARK in extra_labels; a day whose rows all carry it is done, so a
second run writes nothing. Compacting compacted rows gives the same rows again; rows merged into
a compacted day later (late files) are compacted with it on the next run, each as one sample.

Why the releases' Delta versions are kept by the vacuum: a kept release's raw.dcgm_samples view is
a list of Parquet files of one Delta version (pipelines/warehouse.py). Files no version reads any
more are deleted only GPUPOOL_LAKE_VACUUM_HOURS (default 24) after they were replaced, so a reader
that opened an older release before it expired can still finish its query.
"""
from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import duckdb
import polars as pl
import pyarrow.parquet as pq

from allocator.filemodes import READER_MODE, write_atomic
from pipelines.clock import utc_naive
from pipelines.duckdb_limits import writer_limits
from pipelines.lake import LakeError
from pipelines.lake.mart_files import Swept, sweep
from pipelines.warehouse import LAKE_DAY_COLUMN, Warehouse

RAW_RETENTION_ENV = "GPUPOOL_RAW_RETENTION_DAYS"
VACUUM_HOURS_ENV = "GPUPOOL_LAKE_VACUUM_HOURS"
PIN_DAYS_ENV = "GPUPOOL_PIN_DAYS"
DEFAULT_RAW_RETENTION_DAYS = 35  # a month of samples plus a few days to re-ingest late files from
DEFAULT_VACUUM_HOURS = 24  # longer than any query on a release that has just expired
DEFAULT_PIN_DAYS = 35  # a recommendation is re-read the month after it was made, not later

TELEMETRY = "dcgm_samples"
# extra_labels of a compacted row: in the text form of labels the contract does not map (k="v")
COMPACTED_MARK = 'gpupool_compacted="minute"'
# Pins kept forever: a review pack must be rebuilt from its release (`gpupool pack --as-of`) any
# time. Recommendation pins expire; pins of kinds not known here are kept (never guess).
EXPIRING_PIN_KINDS = ("recommendation",)

# What fct_gpu_activity makes of each field over a minute (models/marts/telemetry/fct_gpu_activity.sql).
MINUTE_AGGREGATES = {
    "DCGM_FI_DEV_FB_USED": "max",
    "DCGM_FI_DEV_FB_FREE": "min",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "avg",
    "DCGM_FI_DEV_GPU_UTIL": "avg",
    "DCGM_FI_DEV_POWER_USAGE": "avg",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "avg",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "avg",
    "DCGM_FI_PROF_NVLINK_TX_BYTES": "avg",
    "DCGM_FI_PROF_NVLINK_RX_BYTES": "avg",
}
# The metric a minute's extra rows carry: the first of these it has. A copy of the highest FB_USED
# or the lowest FB_FREE changes nothing; a mean copied onto one extra row neither ((m + m) / 2 = m),
# onto more it may move by the last bit (only a minute without memory fields and with several
# jobs or pods on one GPU needs that).
CARRIER_ORDER = tuple(MINUTE_AGGREGATES)


class RetentionError(ValueError):
    """A retention setting that cannot be used; the message names it and what it accepts."""


def setting(env: str, default: int, minimum: int, given: int | None = None) -> int:
    """`given`, else the environment variable `env`, else `default`; at least `minimum`."""
    raw = str(given) if given is not None else os.environ.get(env, "").strip() or str(default)
    try:
        value = int(raw)
    except ValueError:
        raise RetentionError(f"{env}={raw!r}: expected a whole number >= {minimum}") from None
    if value < minimum:
        raise RetentionError(f"{env}={value}: expected a whole number >= {minimum}")
    return value


# -- raw telemetry: the per-minute compaction ------------------------------------------------------
def _compaction_sql() -> str:
    metrics = ", ".join(f"'{m}'" for m in MINUTE_AGGREGATES)
    aggregates = ",\n    ".join(f"{agg}(value) filter (where metric = '{m}') as \"{m}\""
                                 for m, agg in MINUTE_AGGREGATES.items())
    carrier = " ".join(f"when \"{m}\" is not null then '{m}'" for m in CARRIER_ORDER)
    per_row = ",\n    ".join(f"case when i = 0 or carrier = '{m}' then \"{m}\" end as \"{m}\"" for m in MINUTE_AGGREGATES)
    unpivot_on = ", ".join(f'"{m}"' for m in MINUTE_AGGREGATES)
    return f"""
with cells as (
  -- stg_dcgm__samples' deduplication: one value per sample time, series and metric, the latest delivery's
  select sampled_at, host, gpu, gpu_instance_id, k8s_namespace, k8s_pod, k8s_container, hpc_job, metric,
    arg_max(value, ingested_at) as value,
    arg_max(source, ingested_at) as source,
    arg_max(source_file, ingested_at) as source_file,
    arg_max(ingest_source, ingested_at) as ingest_source,
    max(ingested_at) as ingested_at
  from day
  where metric in ({metrics})
  group by all
),

gpus as (
  -- what stg_dcgm__gpus reads: the highest of each descriptive label, over every row of the day
  select host, gpu, gpu_instance_id, max(uuid) as uuid, max(model_name) as model_name,
    max(gpu_instance_profile) as gpu_instance_profile, max(device) as device, max(pci_bus_id) as pci_bus_id
  from day
  group by all
),

minutes as (
  select host, gpu, gpu_instance_id, date_trunc('minute', sampled_at) as minute_at,
    min(sampled_at) as first_sampled_at,
    max(sampled_at) as last_sampled_at,
    {aggregates},
    list_sort(list_distinct(list(hpc_job))) as hpc_jobs,
    list_sort(list_distinct(list(k8s_pod))) as k8s_pods,
    list_sort(list_distinct(list(k8s_namespace))) as k8s_namespaces,
    min(k8s_container) as k8s_container,
    min(source) as source,
    min(source_file) as source_file,
    -- the minute goes to the ingest whose delivery won the deduplication last
    arg_max(ingest_source, ingested_at) as ingest_source,
    max(ingested_at) as ingested_at
  from cells
  group by all
),

sized as (
  -- rows at one sample time need distinct labels (else the staging merges them): as many rows as
  -- the most labels of a kind, and one more when the last sample time has no row yet
  select *,
    greatest(len(hpc_jobs), len(k8s_pods), len(k8s_namespaces),
             1 + (last_sampled_at > first_sampled_at)::integer) as n_rows,
    case {carrier} end as carrier
  from minutes
),

expanded as (
  select *, unnest(range(n_rows)) as i from sized
),

minute_rows as (
  select
    case when i = n_rows - 1 and last_sampled_at > first_sampled_at then last_sampled_at
         else first_sampled_at end as sampled_at,
    host, gpu, gpu_instance_id,
    coalesce(hpc_jobs[i + 1], hpc_jobs[1]) as hpc_job,
    coalesce(k8s_pods[i + 1], k8s_pods[1]) as k8s_pod,
    coalesce(k8s_namespaces[i + 1], k8s_namespaces[1]) as k8s_namespace,
    k8s_container, source, source_file, ingest_source, ingested_at,
    {per_row}
  from expanded
),

compacted as (
  unpivot minute_rows on {unpivot_on} into name metric value value
),

orphans as (
  -- a GPU with no field the marts read that day keeps one row, so stg_dcgm__gpus still lists it
  select d.sampled_at, d.host, d.gpu, d.gpu_instance_id, d.hpc_job, d.k8s_pod, d.k8s_namespace, d.k8s_container,
    d.source, d.source_file, d.ingest_source, d.ingested_at, d.metric, d.value
  from day as d
  anti join cells as c
    on c.host = d.host and c.gpu = d.gpu and c.gpu_instance_id is not distinct from d.gpu_instance_id
  qualify row_number() over (partition by d.host, d.gpu, d.gpu_instance_id order by d.sampled_at, d.metric) = 1
),

final as (
  select r.sampled_at, r.host, r.gpu, g.uuid, g.device, g.pci_bus_id, g.model_name, r.gpu_instance_id,
    g.gpu_instance_profile, r.metric, r.value, r.k8s_namespace, r.k8s_pod, r.k8s_container, r.hpc_job,
    '{COMPACTED_MARK.replace("'", "''")}' as extra_labels, r.source, r.source_file, r.ingested_at, r.ingest_source
  from (select * from compacted union all by name select * from orphans) as r
  join gpus as g
    on g.host = r.host and g.gpu = r.gpu and g.gpu_instance_id is not distinct from r.gpu_instance_id
)

select * from final
order by ingest_source, host, gpu, gpu_instance_id, sampled_at, metric
"""


def compact_minutes(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The compacted rows, with their ingest_source, of the relation `day` in `con`: one day of
    raw.dcgm_samples, every ingest source (duplicates across them are resolved as the staging
    does). See the module's docstring."""
    return con.sql(_compaction_sql()).pl()


@dataclass(frozen=True)
class CompactedDay:
    day: dt.date
    rows_before: int
    rows_after: int
    sources: tuple[str, ...]  # the ingest sources whose partitions of the day were replaced


def _is_compacted(paths: list[Path]) -> bool:
    """Every row of these Parquet files carries COMPACTED_MARK, by the files' own statistics (no
    rows read). Files without statistics count as not compacted: compacting again is harmless."""
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        column = next((i for i in range(meta.num_columns)
                       if meta.schema.column(i).name == "extra_labels"), None)
        if column is None:
            return False
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(column).statistics
            if (stats is None or not stats.has_min_max or stats.null_count
                    or stats.min != COMPACTED_MARK or stats.max != COMPACTED_MARK):
                return False
    return True


def _day_files(wh: Warehouse, before: dt.date | None = None, day: dt.date | None = None) -> dict[dt.date, list[Path]]:
    """The latest version's Parquet files of raw telemetry per day: days before `before`, or `day`."""
    table = wh.lake_table(TELEMETRY)
    if not wh.store.exists(table):
        return {}
    out: dict[dt.date, list[Path]] = {}
    for f in wh.store.data_files(table):
        value = f.partition.get(LAKE_DAY_COLUMN)
        on = value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
        if (before is not None and on < before) or on == day:
            out.setdefault(on, []).append(f.path)
    return out


def days_to_compact(wh: Warehouse, before: dt.date) -> list[dt.date]:
    """Days of raw telemetry before `before` with rows not compacted yet, oldest first."""
    return sorted(day for day, paths in _day_files(wh, before=before).items() if not _is_compacted(paths))


def _sources_of(con: duckdb.DuckDBPyConnection, files: list[str]) -> tuple[str, ...]:
    if not files:
        return ()
    return tuple(s for (s,) in con.execute("select distinct ingest_source from read_parquet(?) order by 1",
                                           [files]).fetchall())


def compact_day(wh: Warehouse, day: dt.date, dry_run: bool = False) -> CompactedDay:
    """Replace one day of raw telemetry by its compacted rows: one Delta commit per ingest source
    of the day, holding the day's partition locks (an ingest of that day waits, or is waited for:
    its rows are never overwritten by rows read before it) and the writers' lock (no release is
    published between the commits: one with a source compacted and another not would count the
    second twice). A dry run only reads, without locks. DuckDB reads the day's files itself,
    within the writers' memory limit (pipelines/duckdb_limits.py), spilling to the home's tmp/."""
    with duckdb.connect(config=writer_limits(wh.home).config()) as con:
        locked = _sources_of(con, [str(p) for p in _day_files(wh, day=day).get(day, [])])
        for _attempt in range(3):
            partitions = [(source, day) for source in locked]
            with nullcontext() if dry_run else wh.partition_lock(*partitions), \
                    nullcontext() if dry_run else wh.writer_lock():
                files = [str(p) for p in _day_files(wh, day=day).get(day, [])]
                sources = _sources_of(con, files)
                if not dry_run and not set(sources) <= set(locked):  # a source landed meanwhile: lock it too
                    locked = tuple(sorted(set(locked) | set(sources)))
                    continue
                # the files hold every column but the day, which Delta keeps in its log
                con.read_parquet(files, hive_partitioning=False, union_by_name=True).create_view("day")
                rows_before = con.execute("select count(*) from day").fetchall()[0][0]
                compacted = compact_minutes(con)
                if not dry_run:
                    for source in sources:  # a source whose minutes all went to another is emptied
                        wh.write_lake_rows(TELEMETRY, day, source, compacted.filter(pl.col("ingest_source") == source))
                return CompactedDay(day, rows_before, compacted.height, sources)
    raise LakeError(f"raw telemetry of {day}: new ingest sources kept arriving while compacting; run it again")


# -- pins, releases, files -------------------------------------------------------------------------
@dataclass(frozen=True)
class Unpinned:
    release_id: int
    reasons: tuple[str, ...]  # the pin lines removed
    still_pinned: bool  # other pins (packs) keep it


def expire_pins(wh: Warehouse, max_age_days: int, now: dt.datetime, dry_run: bool = False) -> list[Unpinned]:
    """Remove recommendation pins from pin files not written for `max_age_days` (a pin file's time
    is its newest pin's). Pack pins, and pins of kinds not known here, stay."""
    out = []
    for pin in sorted(wh.releases.glob("*.pin")) if wh.releases.exists() else []:
        if not pin.stem.isdigit():
            continue
        written = dt.datetime.fromtimestamp(pin.stat().st_mtime, dt.UTC).replace(tzinfo=None)
        if now - written < dt.timedelta(days=max_age_days):
            continue
        lines = [line for line in pin.read_text().splitlines() if line.strip()]
        expired = [line for line in lines if line.split(" ", 1)[0] in EXPIRING_PIN_KINDS]
        if not expired:
            continue
        kept = [line for line in lines if line not in expired]
        if not dry_run:
            if kept:
                write_atomic(pin, "".join(f"{line}\n" for line in kept), READER_MODE)
            else:
                pin.unlink(missing_ok=True)
        out.append(Unpinned(int(pin.stem), tuple(dict.fromkeys(expired)), bool(kept)))
    return out


@dataclass(frozen=True)
class Vacuumed:
    files: int
    bytes: int


def _file_sizes(table_dir: Path) -> dict[str, int]:
    """Every data file of a table folder by its path relative to the folder (the log aside)."""
    return {p.relative_to(table_dir).as_posix(): p.stat().st_size
            for p in table_dir.rglob("*") if p.is_file() and "_delta_log" not in p.relative_to(table_dir).parts}


def vacuum(wh: Warehouse, retention_hours: int, keep: dict[str, set[int]] | None = None,
           dry_run: bool = False) -> dict[str, Vacuumed]:
    """Delete the Delta files that neither a kept release's version (or those of `keep`) nor the
    latest one reads and that were replaced more than `retention_hours` ago; per table, how many
    files and bytes went."""
    keep = wh.release_versions() if keep is None else keep
    sizes = {name: _file_sizes(wh.store.path(name)) for name in wh.store.tables()}
    removed = wh.store.vacuum(retention_hours, keep_versions=keep, dry_run=dry_run)
    out = {}
    for name, paths in removed.items():
        table_dir = wh.store.path(name).as_posix()
        relative = [unquote(p.split("://", 1)[-1]).removeprefix(table_dir).lstrip("/") for p in paths]
        # delta-rs also lists files of its log's tombstones that an earlier vacuum deleted already
        gone = [sizes[name][p] for p in relative if p in sizes.get(name, {})]
        out[name] = Vacuumed(len(gone), sum(gone))
    return out


# -- the whole maintenance -------------------------------------------------------------------------
@dataclass(frozen=True)
class MaintenanceReport:
    dry_run: bool
    raw_before: dt.date  # days before this one were due for compaction
    compacted: list[CompactedDay] = field(default_factory=list)
    small_files: dict[str, int] = field(default_factory=dict)  # table -> files merged away
    release: int | None = None  # published after the lake changed (None: nothing changed)
    unpinned: list[Unpinned] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)
    vacuumed: dict[str, Vacuumed] = field(default_factory=dict)
    swept: Swept = field(default_factory=lambda: Swept(0, 0))  # per-minute mart files deleted (pipelines/lake/mart_files.py)

    def lines(self) -> list[str]:
        would = "would be " if self.dry_run else ""
        out = []
        if self.compacted:
            before = sum(d.rows_before for d in self.compacted)
            after = sum(d.rows_after for d in self.compacted)
            out.append(f"raw telemetry before {self.raw_before}: {len(self.compacted)} days {would}compacted, "
                       f"{before:,} rows -> {after:,}")
            out += [f"  {d.day}: {d.rows_before:,} -> {d.rows_after:,} rows ({', '.join(d.sources)})"
                    for d in self.compacted]
        else:
            out.append(f"raw telemetry before {self.raw_before}: nothing to compact")
        if self.dry_run:
            out.append("small files: not merged in a dry run")
        else:
            merged = {t: n for t, n in self.small_files.items() if n}
            out.append("small files: " + (", ".join(f"{t} {n} merged" for t, n in merged.items()) or "none to merge"))
        if self.release is not None:
            out.append(f"published release {self.release} (the lake after maintenance)")
        for u in self.unpinned:
            out.append(f"release {u.release_id}: {would}unpinned {'; '.join(u.reasons)}"
                       + (" (other pins keep it)" if u.still_pinned else ""))
        out.append(f"releases {would}expired: " + (", ".join(map(str, self.expired)) or "none"))
        for table, v in self.vacuumed.items():
            out.append(f"{table}: {v.files} files {would}vacuumed, {v.bytes:,} bytes")
        out.append(f"per-minute marts: {self.swept.files} unread files {would}deleted, {self.swept.bytes:,} bytes")
        return out


def maintain(wh: Warehouse, raw_retention_days: int | None = None, dry_run: bool = False,
             today: dt.date | None = None, now: dt.datetime | None = None,
             on_step: Callable[[str], None] = lambda _m: None) -> MaintenanceReport:
    """Compact old raw telemetry, merge small files, publish, expire recommendation pins and
    releases, vacuum; in that order, so the vacuum keeps exactly what the releases left read.
    `dry_run`: change nothing, take no lock, report what would be done (small files aside:
    delta-rs cannot tell what it would merge)."""
    retention = setting(RAW_RETENTION_ENV, DEFAULT_RAW_RETENTION_DAYS, 1, raw_retention_days)
    vacuum_hours = setting(VACUUM_HOURS_ENV, DEFAULT_VACUUM_HOURS, 0)
    pin_days = setting(PIN_DAYS_ENV, DEFAULT_PIN_DAYS, 0)
    now = now or utc_naive()
    before = (today or now.date()) - dt.timedelta(days=retention)

    kept_before = wh.kept_releases()
    compacted = []
    on_step(f"finding raw telemetry before {before} to compact to the per-minute grain")
    for day in days_to_compact(wh, before):
        done = compact_day(wh, day, dry_run)
        on_step(f"{'would compact' if dry_run else 'compacted'} {day}: {done.rows_before:,} -> {done.rows_after:,} rows")
        compacted.append(done)
    if not dry_run:
        on_step("merging the lake's small files")
    small_files = {} if dry_run else {
        name: int(wh.store.compact(name).get("numFilesRemoved", 0)) for name in wh.store.tables()}
    release = None
    if (compacted and not dry_run) or any(small_files.values()):
        note = f"maintain: {len(compacted)} days of raw telemetry compacted"
        with wh.publishing("maintain", note), wh.writer():
            pass  # the writers' views move to the lake's new version; the release publishes them
        release = wh.current_release()
    unpinned = expire_pins(wh, pin_days, now, dry_run)
    if dry_run:
        pinned = wh.pinned_releases() - {u.release_id for u in unpinned if not u.still_pinned}
        expired = wh.expire_releases(pinned=pinned, dry_run=True)
        keep = wh.release_versions([r for r in wh.kept_releases() if r not in expired])
    else:
        wh.expire_releases()
        expired = sorted(set(kept_before) - set(wh.kept_releases()))  # the publish above expires some too
        keep = None
    on_step(f"finding lake files no kept release reads, replaced over {vacuum_hours} h ago, to delete")
    vacuumed = vacuum(wh, vacuum_hours, keep, dry_run)
    on_step(f"finding per-minute mart files no kept release reads, unread over {vacuum_hours} h, to delete")
    with nullcontext() if dry_run else wh.quiet():
        kept = [r for r in wh.kept_releases() if r not in expired] if dry_run else wh.kept_releases()
        listing = [wh.writer_path] if wh.writer_path.exists() else []
        swept = sweep(wh.home, listing + [wh.release_path(r) for r in kept], vacuum_hours, now, dry_run)
    return MaintenanceReport(dry_run, before, compacted, small_files, release, unpinned, expired, vacuumed,
                             swept)
