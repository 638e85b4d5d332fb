"""Fresh inputs for the every-minute policy tick: the last hours of scraped telemetry and the
allocator's running jobs, in the shapes `pipelines.policies.inputs` defines for the warehouse.

The warehouse computes the same minutes in SQL (marts.fct_gpu_activity, fct_allocation_activity);
waiting for a model build would make a reclaim minutes late, so the tick reads the scrape rounds the
`dcgm_scrape` sensor lands and applies the same rules here: a minute's activity is the mean of
DCGM_FI_PROF_GR_ENGINE_ACTIVE, else DCGM_FI_DEV_GPU_UTIL / 100, clipped to 0..1; framebuffer use is
the minute's maximum; a MIG allocation reads its instance's series, whole and time-sliced ones the
GPU's. tests/governance/test_live_inputs.py checks both give the same minutes.

The tick runs every minute over a lookback of two hours or more, and only the last minute's rounds
are new, so the minutes are kept rather than recomputed (`recent_gpu_minutes`). The round files
(`scrape-<HHMMSS>-<round id>.parquet`) are grouped by the minute their name gives; each group is
summarised once into per-GPU-minute partial aggregates (sums and counts of the two activity
metrics, the framebuffer maximum, the first and last sample time), which combine exactly with those
of other groups. A summary is kept in memory and on disk next to the rounds, in the day folder's
hidden `.live_minutes/` (no ingest reads hidden entries), named by the group's minute and a
fingerprint of its files' names, sizes and modification times: a restarted process reads it back,
a round added to or rewritten in the group gives another fingerprint and a new summary, and a
deleted summary is rebuilt. A group whose samples straddle the window's edge is summarised from its
rounds with the window applied, never kept, so the minutes equal those of every sample read afresh.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipelines.clock import parse_utc

log = logging.getLogger(__name__)

ACTIVITY_METRICS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
GR, UTIL, FB = ACTIVITY_METRICS
SCRAPE_SOURCE = "dcgm_parquet"
SUMMARY_FOLDER = ".live_minutes"
ROUND_NAME = re.compile(r"scrape-(\d{2})(\d{2})\d{2}-.+\.parquet")
# Samples that carry their own timestamp may be a little older than the round that landed them:
# rounds named up to this much outside the window are read too (and filtered on sampled_at).
ROUND_NAME_MARGIN = dt.timedelta(minutes=5)
SAMPLE_SCHEMA = {"sampled_at": pl.Datetime("us"), "host": pl.String, "gpu": pl.Int64,
                 "gpu_instance_id": pl.Int64, "metric": pl.String, "value": pl.Float64}
SERIES = ("host", "gpu", "gpu_instance_id")


def read_rounds(files: list[Path]) -> pl.LazyFrame:
    """The activity samples of scrape round files, in SAMPLE_SCHEMA."""
    if not files:
        return pl.LazyFrame(schema=SAMPLE_SCHEMA)
    return (
        pl.scan_parquet(files, missing_columns="insert", extra_columns="ignore")
        .select(list(SAMPLE_SCHEMA))
        .cast(SAMPLE_SCHEMA)
        .filter(pl.col("metric").is_in(ACTIVITY_METRICS))
    )


def minute_partials(samples: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    """Per (host, gpu, gpu_instance_id, minute_at): the partial aggregates that combine exactly
    (`combine_partials`) into a minute's values, whatever split of its samples each one saw."""
    value = pl.col("value")
    return (
        samples.lazy()
        .with_columns(pl.col("sampled_at").dt.truncate("1m").alias("minute_at"))
        .group_by(*SERIES, "minute_at")
        .agg(
            value.filter(pl.col("metric") == GR).sum().alias("gr_sum"),
            value.filter(pl.col("metric") == GR).count().alias("gr_n"),
            value.filter(pl.col("metric") == UTIL).sum().alias("util_sum"),
            value.filter(pl.col("metric") == UTIL).count().alias("util_n"),
            value.filter(pl.col("metric") == FB).max().alias("fb_used_mib"),
            pl.col("sampled_at").min().alias("first_sampled_at"),
            pl.col("sampled_at").max().alias("last_sampled_at"),
        )
    )


def combine_partials(partials: pl.LazyFrame) -> pl.LazyFrame:
    """Partials of the same series and minute (from different groups of rounds) as one row."""
    return partials.group_by(*SERIES, "minute_at").agg(
        pl.col("gr_sum", "gr_n", "util_sum", "util_n").sum(),
        pl.col("fb_used_mib").max(),
        pl.col("first_sampled_at").min(),
        pl.col("last_sampled_at").max(),
    )


def minutes_of_partials(partials: pl.LazyFrame) -> pl.DataFrame:
    """The per-GPU minutes (see `gpu_minutes`) of partials with one row per series and minute."""
    gr = pl.when(pl.col("gr_n") > 0).then(pl.col("gr_sum") / pl.col("gr_n"))
    util = pl.when(pl.col("util_n") > 0).then(pl.col("util_sum") / pl.col("util_n") / 100.0)
    return (
        partials.select(
            *SERIES, "minute_at", "first_sampled_at", "last_sampled_at",
            pl.coalesce(gr, util).clip(0.0, 1.0).alias("activity"),
            "fb_used_mib",
        )
        .filter(pl.col("activity").is_not_null())
        .collect()
    )


def gpu_minutes(samples: pl.DataFrame) -> pl.DataFrame:
    """One row per (host, gpu, gpu_instance_id, minute_at): activity 0..1, fb_used_mib and when the
    minute's first and last samples were taken; computed from every sample given."""
    return minutes_of_partials(minute_partials(samples))


@dataclass(frozen=True)
class _Group:
    """The round files of one day folder whose names give the same minute (None: no time in the name)."""

    folder: Path
    minute: dt.datetime | None
    files: tuple[Path, ...]
    fingerprint: str

    @property
    def summary_path(self) -> Path:
        label = "unnamed" if self.minute is None else f"{self.minute:%H%M}"
        return self.folder / SUMMARY_FOLDER / f"{label}-{self.fingerprint}.parquet"


@dataclass(frozen=True)
class _Kept:
    partials: pl.DataFrame
    first_at: dt.datetime | None  # the group's first and last sample
    last_at: dt.datetime | None
    one_minute: bool  # every sample in the group's own minute: no other group shares its minutes


# summary path -> its partials; a path names its files' fingerprint, so an entry never goes stale
_KEPT: dict[Path, _Kept] = {}


def _round_groups(landing: Path, since: dt.datetime, now: dt.datetime) -> list[_Group]:
    """The groups of round files that may hold samples of [since, now), chosen by their names
    (a directory listing, nothing read); files named otherwise are one group per day."""
    earliest = since - ROUND_NAME_MARGIN
    groups = []
    for day in sorted({since.date(), now.date()}):
        folder = Path(landing) / SCRAPE_SOURCE / day.isoformat()
        if not folder.is_dir():
            continue
        by_minute: dict[dt.datetime | None, list[os.DirEntry]] = {}
        with os.scandir(folder) as entries:
            for entry in entries:  # names only: a day holds up to 5,760 rounds
                if entry.name.startswith(".") or not entry.name.endswith(".parquet") or not entry.is_file():
                    continue
                named = ROUND_NAME.fullmatch(entry.name)
                minute = None if named is None else dt.datetime.combine(
                    day, dt.time(int(named[1]), int(named[2])))
                if minute is None or earliest - dt.timedelta(minutes=1) < minute <= now + ROUND_NAME_MARGIN:
                    by_minute.setdefault(minute, []).append(entry)
        for minute, found in by_minute.items():
            found.sort(key=lambda e: e.name)
            stats = [(e.name, e.stat()) for e in found]
            fingerprint = hashlib.sha1(
                "\n".join(f"{n} {s.st_size} {s.st_mtime_ns}" for n, s in stats).encode()).hexdigest()[:16]
            groups.append(_Group(folder, minute, tuple(folder / n for n, _ in stats), fingerprint))
    return groups


def _summarise(group: _Group) -> _Kept:
    """The group's kept partials: from memory, else from its summary file, else from its rounds
    (then written for the next process)."""
    path = group.summary_path
    kept = _KEPT.get(path)
    if kept is not None:
        return kept
    try:
        partials = pl.read_parquet(path)
    except FileNotFoundError:
        partials = minute_partials(read_rounds(list(group.files))).collect()
        _write_summary(path, partials)
    minutes = partials["minute_at"]
    kept = _Kept(partials.with_columns(pl.col("host").cast(pl.Categorical)), partials["first_sampled_at"].min(), partials["last_sampled_at"].max(),
                 group.minute is not None and bool((minutes == group.minute).all()))
    _KEPT[path] = kept
    return kept


def _write_summary(path: Path, partials: pl.DataFrame) -> None:
    """Write atomically (two ticks may summarise the same group) and remove the group's older
    summaries; a landing zone that cannot be written only costs the next process a recomputation."""
    try:
        path.parent.mkdir(exist_ok=True)
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        partials.write_parquet(temp, compression="lz4", statistics=False)
        os.replace(temp, path)
        label = path.name.rsplit("-", 1)[0]
        for older in path.parent.glob(f"{label}-*.parquet"):
            if older != path:
                older.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not keep the minute summary %s (%s): it is recomputed by the next process", path, exc)


def recent_gpu_minutes(landing: Path, now: dt.datetime, lookback: dt.timedelta) -> pl.DataFrame:
    """`gpu_minutes` of the samples in [now - lookback, now) of the scrape landing zone, from the
    kept summaries of the rounds (see the module docstring); `host` is Categorical, so that joining
    the minutes to the allocations compares integers rather than strings."""
    since = now - lookback
    parts, one_minute, used = [], True, set()
    for group in sorted(_round_groups(landing, since, now), key=lambda g: (g.minute is None, g.minute or since)):
        kept = _summarise(group)
        used.add(group.summary_path)
        if kept.first_at is None or kept.last_at < since or kept.first_at >= now:
            continue
        if since <= kept.first_at and kept.last_at < now:
            parts.append(kept.partials)
            one_minute &= kept.one_minute
        else:  # at the window's edge: only its samples inside the window count
            parts.append(minute_partials(read_rounds(list(group.files)).filter(
                pl.col("sampled_at") >= since, pl.col("sampled_at") < now)).collect()
                .with_columns(pl.col("host").cast(pl.Categorical)))
            one_minute &= kept.one_minute  # a part of the group's samples: within its minutes too
    for path in set(_KEPT) - used:  # memory holds the current window's summaries only
        del _KEPT[path]
    partials = pl.concat(parts).lazy() if parts else minute_partials(pl.LazyFrame(schema=SAMPLE_SCHEMA))
    return minutes_of_partials(partials if one_minute else combine_partials(partials))


_SPEC_FIELDS = {"template": pl.String, "share_mode": pl.String, "gpu_model": pl.String,
                "expected_runtime_s": pl.Int64, "idle_reminder_s": pl.Int64, "checkpoint_policy": pl.String,
                "min_replicas": pl.Int64, "rollback": pl.String, "reservation": pl.String}
_JOB_FIELDS = {"job_id": pl.String, "attempt": pl.Int64, "tenant": pl.String, "queue": pl.String, "user": pl.String,
               "state": pl.String, "started_at": pl.String, "ended_at": pl.String}
_GPU_FIELDS = {"host": pl.String, "gpu": pl.Int64, "gpu_instance_id": pl.Int64, "gpu_instance_profile": pl.String,
               "fraction": pl.Float64}
_QUEUE_FIELDS = {"max_runtime_s": pl.Int64, "queue_low_priority": pl.Boolean}  # GET /v1/queues: low_priority
_RFC3339 = "%Y-%m-%dT%H:%M:%S%.f"


def _timestamp(name: str) -> pl.Expr:
    """An API time (RFC 3339, UTC) as naive UTC; null where it is in another form (`_other_timestamps`)."""
    return pl.col(name).str.strip_suffix("Z").str.to_datetime(_RFC3339, time_unit="us", strict=False)


def _other_timestamps(column: pl.Series, parsed: pl.Series) -> pl.Series | None:
    """`parsed` with the rare value in another ISO form (an offset) parsed as `parse_utc` does; None when
    there is none."""
    missed = parsed.is_null() & column.is_not_null()
    if not missed.any():
        return None
    return parsed.scatter(missed.arg_true(), pl.Series([parse_utc(v) for v in column.filter(missed)],
                                                       dtype=pl.Datetime("us")))


def allocations_from_jobs(jobs: list[dict], queues: dict[str, dict] | None = None,
                          source: str = "allocator") -> pl.DataFrame:
    """The allocations frame (pipelines.policies.inputs.ALLOCATION_SCHEMA) of running jobs as the
    allocator's API lists them (`job_view`: GET /v1/jobs?state=RUNNING); `queues` by name as
    GET /v1/queues gives them (max_runtime_s, low_priority). One row per placed GPU, slice or share,
    in the jobs' order. The records' fields are gathered per column and the rows made by one Polars
    select: the policy tick and the simulated governance call it for a few jobs at a time, where
    each Polars operation's fixed cost is most of the time."""
    placed = [(job, gpu) for job in jobs for gpu in (job.get("gpus") or ()) if gpu is not None]
    specs = [job.get("spec") or {} for job, _ in placed]
    limits = [(queues or {}).get(job.get("queue")) or {} for job, _ in placed]
    frame = pl.DataFrame({
        **{name: [job.get(name) for job, _ in placed] for name in _JOB_FIELDS},
        **{name: [gpu.get(name) for _, gpu in placed] for name in _GPU_FIELDS},
        **{name: [spec.get(name) for spec in specs] for name in _SPEC_FIELDS},
        "max_runtime_s": [q.get("max_runtime_s") for q in limits],
        "queue_low_priority": [q.get("low_priority") for q in limits],
    }, schema=_JOB_FIELDS | _GPU_FIELDS | _SPEC_FIELDS | _QUEUE_FIELDS)
    instance = pl.col("gpu_instance_id")
    rows = frame.select(
        pl.concat_str(pl.lit(f"{source}:"), "job_id", pl.lit(":"), pl.col("attempt").cast(pl.String), pl.lit(":"),
                      "host", pl.lit("/"), pl.col("gpu").cast(pl.String),
                      pl.when(instance.is_not_null()).then(pl.lit("/") + instance.cast(pl.String)).otherwise(pl.lit("")),
                      ).alias("allocation_id"),
        pl.lit(source).alias("source"), "job_id", "attempt", "tenant", "queue", "template",
        pl.col("user").alias("user_name"), "host", "gpu", "gpu_instance_id", "gpu_instance_profile", "share_mode",
        "gpu_model", pl.col("fraction").fill_null(1.0), _timestamp("started_at"), _timestamp("ended_at"),
        (pl.col("state") == "RUNNING").fill_null(False).alias("is_running"),
        "expected_runtime_s", "max_runtime_s", "idle_reminder_s", "checkpoint_policy", "min_replicas",
        "rollback", "reservation", "queue_low_priority",
    )
    reparsed = [_other_timestamps(frame.get_column(name), rows.get_column(name)) for name in ("started_at", "ended_at")]
    reparsed = [column for column in reparsed if column is not None]
    return rows.with_columns(reparsed) if reparsed else rows


def _series_key(host: str, gpu: str, instance: str) -> pl.Expr:
    """One integer per (host, gpu, gpu_instance_id): the host's Categorical code, the GPU index and
    the instance (+1, 0 for none) packed in 64 bits, so that a join hashes one integer per row.
    GPU indexes and instance ids beyond 16 bits (none in practice) get no key and match nothing."""
    code = pl.col(host).cast(pl.Categorical).to_physical().cast(pl.UInt64)
    slot = pl.col(instance).fill_null(-1) + 1
    return (
        pl.when(pl.col(gpu).is_between(0, 0xFFFF) & slot.is_between(0, 0xFFFF))
        .then(code * 2**32 + pl.col(gpu).cast(pl.UInt64) * 2**16 + slot.cast(pl.UInt64))
        .alias("series")
    )


def allocation_minutes(allocations: pl.DataFrame, minutes: pl.DataFrame) -> pl.DataFrame:
    """The minutes frame (MINUTE_SCHEMA): each allocation's GPU minutes whose samples were all taken
    at or after its start (and before its end, when it ended), as marts.fct_allocation_activity. A
    MIG allocation reads its instance's series; whole GPUs and time-sliced shares the GPU's. Sorted
    by allocation_id and minute_at, through integers: each allocation's rank by id, and the minute."""
    keyed = (
        allocations.sort("allocation_id").with_row_index("rank")
        .with_columns(pl.when(pl.col("share_mode") == "mig").then(pl.col("gpu_instance_id")).alias("series_instance"))
        .select("rank", "allocation_id", "started_at", "ended_at", _series_key("host", "gpu", "series_instance"))
        .drop_nulls("series")
    )
    minute = pl.col("minute_at").dt.epoch("s") // 60
    return (
        minutes.lazy().with_columns(_series_key("host", "gpu", "gpu_instance_id"))
        .join(keyed.lazy(), on="series")
        .filter(
            (pl.col("first_sampled_at") >= pl.col("started_at"))
            & (pl.col("ended_at").is_null() | (pl.col("last_sampled_at") < pl.col("ended_at")))
        )
        .sort(pl.col("rank").cast(pl.Int64) * 2**32 + (minute - minute.min()))
        .select("allocation_id", "minute_at", "activity", "fb_used_mib")
        .collect()
    )


POD_GPU_SCHEMA = {"namespace": pl.String, "pod": pl.String, "host": pl.String, "gpu": pl.Int64,
                  "gpu_instance_id": pl.Int64, "gpu_instance_profile": pl.String}
POD_SAMPLE = {"sampled_at": pl.Datetime("us"), "host": pl.String, "gpu": pl.Int64, "gpu_instance_id": pl.Int64,
               "gpu_instance_profile": pl.String, "k8s_namespace": pl.String, "k8s_pod": pl.String}


def pod_gpus(landing: Path, now: dt.datetime, lookback: dt.timedelta) -> pl.DataFrame:
    """Which Kubernetes pod holds each GPU (or MIG instance) now, as dcgm-exporter's pod labels say in
    the scrape rounds of [now - lookback, now) (`pods_holding`). Rounds without the pod columns
    (written before they were kept) name no pod."""
    since = now - lookback
    parts = []
    for group in _round_groups(landing, since, now):
        for path in group.files:
            present = pl.read_parquet_schema(path)
            parts.append(pl.scan_parquet(path).select(
                [pl.col(c) if c in present else pl.lit(None).alias(c) for c in POD_SAMPLE]).cast(POD_SAMPLE))
    if not parts:
        return pl.DataFrame(schema=POD_GPU_SCHEMA)
    sampled = pl.col("sampled_at")
    return pods_holding(pl.concat(parts).filter(sampled >= since, sampled < now))


def pods_holding(samples: pl.LazyFrame) -> pl.DataFrame:
    """POD_GPU_SCHEMA of samples (POD_SAMPLE's columns): for each series, the pods named at its latest
    sample (several when the GPU is time-sliced); a series whose latest sample names no pod is free,
    so a GPU handed from one pod to the next belongs to the second."""
    sampled = pl.col("sampled_at")
    return (
        samples
        .filter(sampled == sampled.max().over(SERIES))
        .drop_nulls(["k8s_namespace", "k8s_pod"])
        .select(pl.col("k8s_namespace").alias("namespace"), pl.col("k8s_pod").alias("pod"), *SERIES,
                "gpu_instance_profile")
        .unique()
        .sort("namespace", "pod", *SERIES, nulls_last=True)
        .collect()
        .cast(POD_GPU_SCHEMA)
    )
