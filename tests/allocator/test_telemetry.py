"""Telemetry: the live exposition parses clean and follows the holders; bulk samples are the same values."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from allocator.model import Job, JobSpec, JobState, ShareMode, Template
from allocator.pool import default_pool
from allocator.telemetry import (
    FB_USED,
    GPU_UTIL,
    GR_ENGINE_ACTIVE,
    POWER_USAGE,
    ActivityProfile,
    BulkTelemetry,
    Work,
    default_profile,
    render_node_metrics,
    telemetry_units,
)
from pipelines.contracts import contract
from pipelines.sources.dcgm_parquet import parse_dcgm_parquet
from pipelines.sources.dcgm_text import parse_dcgm_text
from tests.allocator.helpers import column_encodings

T0 = dt.datetime(2026, 11, 2, 6, 0)
NOW = dt.datetime(2026, 11, 2, 10, 0)
KEYS = ["host", "gpu", "gpu_instance_id", "metric", "hpc_job"]


@pytest.fixture(scope="module")
def pool():
    return default_pool()


def _job(pool, job_id: str, template: str, slot_ids: list[str], model: str, mode=ShareMode.WHOLE) -> Job:
    slots = {s.slot_id: s for s in pool.slots()}
    spec = JobSpec(
        "vision",
        "vision-train",
        "vision-u01",
        Template(template),
        model,
        len(slot_ids),
        mode,
        mig_profile=slots[slot_ids[0]].profile if mode == ShareMode.MIG else None,
    )
    return Job(job_id, spec, JobState.RUNNING, started_at=T0, slots=tuple(slots[s] for s in slot_ids))


@pytest.fixture(scope="module")
def holders(pool):
    jobs = [
        _job(pool, "j-train", "training", ["h100-01/0", "h100-01/1"], "H100"),
        _job(pool, "j-mig", "interactive", ["a100-11/0/1"], "A100", ShareMode.MIG),
        _job(pool, "j-serve", "inference", ["l40s-07/0/0"], "L40S", ShareMode.TIMESLICE),
        _job(pool, "j-exp", "experiment", ["l40s-07/0/1"], "L40S", ShareMode.TIMESLICE),
        _job(pool, "j-l40s", "training", ["l40s-01/3"], "L40S"),
    ]
    return {s.slot_id: j for j in jobs for s in j.slots}


def _scrape(pool, holders, host, now=NOW, profiles=None) -> tuple[str, pl.DataFrame]:
    text = render_node_metrics(pool, holders, host, now, profiles=profiles)
    parsed = parse_dcgm_text(text, f"http://test/nodes/{host}/metrics", scraped_at=now)
    assert parsed.quarantine.height == 0, parsed.quarantine
    assert parsed.records_read == parsed.records_loaded > 0
    return text, parsed.tables["dcgm_samples"]


@pytest.mark.parametrize("host", ["h100-01", "a100-11", "l40s-07", "l40s-01"])
def test_exposition_parses_clean_with_help_type_and_the_real_label_set(pool, holders, host):
    text, samples = _scrape(pool, holders, host)
    metrics = set(samples.get_column("metric"))
    for metric in metrics:
        assert f"# HELP {metric} " in text and f"# TYPE {metric} gauge" in text
    assert {FB_USED, "DCGM_FI_DEV_FB_FREE", POWER_USAGE, "DCGM_FI_DEV_GPU_TEMP"} <= metrics
    sample_line = next(line for line in text.splitlines() if not line.startswith("#"))
    labels = re.findall(r'(\w+)="', sample_line)
    expected = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]
    if host == "a100-11":
        expected += ["GPU_I_PROFILE", "GPU_I_ID"]
    assert labels[: len(expected) + 2] == [*expected, "Hostname", "DCGM_FI_DRIVER_VERSION"]
    assert samples.get_column("extra_labels").unique().to_list() == ['DCGM_FI_DRIVER_VERSION="580.105.08"']
    if host.startswith("l40s"):
        # an exporter without DCP profiling: utilisation only (the pipeline's activity fallback)
        assert GR_ENGINE_ACTIVE not in metrics and GPU_UTIL in metrics
    else:
        assert GR_ENGINE_ACTIVE in metrics


def test_values_follow_the_holders(pool, holders):
    _, h100 = _scrape(pool, holders, "h100-01")
    active = h100.filter(pl.col("metric") == GR_ENGINE_ACTIVE)
    busy = active.filter(pl.col("hpc_job") == "j-train")
    assert sorted(busy.get_column("gpu").to_list()) == [0, 1]
    level = default_profile(holders["h100-01/0"]).level
    assert busy.get_column("value").is_between(level - 0.2, level + 0.2).all()
    idle = active.filter(pl.col("hpc_job").is_null())
    assert idle.height == 6 and idle.get_column("value").max() == 0.0
    fb = h100.filter(pl.col("metric") == FB_USED)
    assert fb.filter(pl.col("hpc_job").is_null()).get_column("value").max() == 0
    assert fb.filter(pl.col("hpc_job") == "j-train").get_column("value").min() > 20_000
    power = h100.filter(pl.col("metric") == POWER_USAGE)
    assert (
        power.filter(pl.col("hpc_job") == "j-train").get_column("value").min()
        > power.filter(pl.col("hpc_job").is_null()).get_column("value").max()
    )


def test_mig_instances_are_separate_series(pool, holders):
    _, a100 = _scrape(pool, holders, "a100-11")
    gpu0 = a100.filter(pl.col("gpu") == 0, pl.col("metric") == GR_ENGINE_ACTIVE)
    assert gpu0.get_column("gpu_instance_id").sort().to_list() == [1, 2, 3, 4]
    assert gpu0.get_column("gpu_instance_profile").to_list() == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    held = gpu0.filter(pl.col("hpc_job") == "j-mig")
    assert held.get_column("gpu_instance_id").to_list() == [1] and held.get_column("value")[0] > 0.05
    assert gpu0.filter(pl.col("hpc_job").is_null()).get_column("value").max() == 0.0
    # utilisation is not reported for MIG instances
    assert a100.filter(pl.col("metric") == GPU_UTIL, pl.col("gpu_instance_id").is_not_null()).height == 0


def test_time_sliced_gpu_reports_once_per_job_on_it(pool, holders):
    _, l40s = _scrape(pool, holders, "l40s-07")
    util = l40s.filter(pl.col("gpu") == 0, pl.col("metric") == GPU_UTIL)
    assert sorted(util.get_column("hpc_job").to_list()) == ["j-exp", "j-serve"]
    assert util.get_column("gpu_instance_id").null_count() == 2
    assert util.get_column("value").n_unique() == 1  # the GPU's value, once per job
    free = l40s.filter(pl.col("gpu") == 1, pl.col("metric") == GPU_UTIL)
    assert free.height == 1 and free.get_column("hpc_job")[0] is None and free.get_column("value")[0] == 0


def test_explicit_profiles_override_the_default(pool, holders):
    stopped = ActivityProfile(level=0.9, busy_for_s=600, idle_mem_frac=0.5)
    oversized = ActivityProfile(level=0.9, working_gpus=1)
    _, idle = _scrape(pool, holders, "h100-01", profiles={"j-train": stopped})
    values = idle.filter(pl.col("metric") == GR_ENGINE_ACTIVE, pl.col("hpc_job") == "j-train").get_column(
        "value"
    )
    assert values.max() < 0.01
    memory = idle.filter(pl.col("metric") == FB_USED, pl.col("hpc_job") == "j-train").get_column("value")
    assert memory.min() > 30_000  # the zombie keeps its memory
    _, half = _scrape(pool, holders, "h100-01", profiles={"j-train": oversized})
    by_gpu = dict(
        half.filter(pl.col("metric") == GR_ENGINE_ACTIVE, pl.col("hpc_job") == "j-train")
        .select("gpu", "value")
        .iter_rows()
    )
    assert by_gpu[0] > 0.5 and by_gpu[1] < 0.01


def _works(pool, holders, bulk: BulkTelemetry) -> list[Work]:
    works = []
    for slot_id, job in holders.items():
        rank = [s.slot_id for s in job.slots].index(slot_id)
        profile = default_profile(job)
        if job.slots[rank].share_mode == ShareMode.TIMESLICE:
            share = job.slots[rank].fraction
            profile = replace(
                profile, mem_frac=profile.mem_frac * share, idle_mem_frac=profile.idle_mem_frac * share
            )
        works.append(Work(bulk.unit_of(slot_id), job.job_id, rank, job.started_at, None, profile))
    return works


def test_bulk_samples_equal_the_live_values(pool, holders):
    bulk = BulkTelemetry(pool)
    day = bulk.day(NOW.date(), _works(pool, holders, bulk), "dcgm_parquet/2026-11-02/samples.parquet")
    frame = pl.concat(day.frames)
    at_now = frame.filter(pl.col("sampled_at") == NOW)
    for host in ("h100-01", "a100-11", "l40s-07", "l40s-01"):
        _, live = _scrape(pool, holders, host)
        joined = live.join(
            at_now.filter(pl.col("host") == host), on=KEYS, how="inner", nulls_equal=True, suffix="_bulk"
        )
        # the bulk file has three metrics per series: all of them are in the scrape, with equal values
        assert joined.height == at_now.filter(pl.col("host") == host).height > 0
        assert (joined.get_column("value") == joined.get_column("value_bulk")).all(), host


def test_an_attempts_series_are_its_units_rows_in_the_day_file(pool, holders):
    """BulkTelemetry.series, what the simulated policies read (computed over the asked units alone), holds
    the values the day's file holds for those units: a pair of whole GPUs, a MIG instance and a time-sliced
    GPU that two jobs share (asked twice, through each job's slot), out of the units' order, idle before T0."""
    bulk = BulkTelemetry(pool)
    works = _works(pool, holders, bulk)
    frame = pl.concat(bulk.day(NOW.date(), works, "dcgm_parquet/2026-11-02/samples.parquet").frames)
    slots = ["l40s-07/0/1", "h100-01/1", "a100-11/0/1", "h100-01/0", "l40s-07/0/0"]
    units = [bulk.unit_of(slot) for slot in slots]
    assert units[0] == units[-1], "the time-sliced slots share one unit"
    stamps, activity, fb_used = bulk.series(works, units, dt.datetime.combine(NOW.date(), dt.time()), NOW)
    assert len(stamps) == NOW.hour * 60
    described = telemetry_units(pool.nodes)
    for i, unit in enumerate(units):
        u = described[unit]
        shown = pl.DataFrame({"sampled_at": stamps, "activity": activity[i], "fb_used": fb_used[i]}).with_columns(
            pl.col("sampled_at").cast(pl.Datetime("us")))
        rows = frame.filter(pl.col("host") == u.host, pl.col("gpu") == u.gpu,
                            pl.col("gpu_instance_id").eq_missing(u.gpu_instance_id), pl.col("sampled_at") < NOW)
        active = rows.filter(pl.col("metric") == u.activity_metric).join(shown, on="sampled_at", how="left")
        # a unit without profiling reports its activity as a whole percentage (GPU_UTIL)
        expected = (pl.col("activity") * 100).round(0) if u.activity_metric == GPU_UTIL else pl.col("activity")
        assert active.height >= len(stamps) and active.filter(pl.col("value") != expected).is_empty(), slots[i]
        memory = rows.filter(pl.col("metric") == FB_USED).join(shown, on="sampled_at", how="left")
        assert memory.height >= len(stamps) and memory.filter(pl.col("value") != pl.col("fb_used")).is_empty(), slots[i]
    assert activity[1, -1] > 0 and activity[1, 0] == 0, "busy after T0, not before"


def test_bulk_day_conforms_to_the_contract_and_counts(pool, holders, tmp_path: Path):
    bulk = BulkTelemetry(pool)
    works = _works(pool, holders, bulk)
    name = "dcgm_parquet/2026-11-02/samples.parquet"
    day = bulk.day(NOW.date(), works, name)
    frame = pl.concat(day.frames)
    schema = contract("dcgm_samples").schema
    assert frame.schema == schema
    assert frame.equals(contract("dcgm_samples").conform(frame))
    units = telemetry_units(pool.nodes)
    timesliced_extra = 2 * (1440 - T0.hour * 60) - (1440 - T0.hour * 60)  # two jobs on l40s-07/0 after T0
    assert frame.height == 3 * (len(units) * 1440 + timesliced_extra)
    assert set(frame.get_column("metric")) == {GR_ENGINE_ACTIVE, GPU_UTIL, FB_USED, POWER_USAGE}
    # held time x fraction, from T0 to midnight: 2 H100 + 3/7 of an A100 + 2 quarter L40S shares + 1 L40S
    hours = 24 - T0.hour
    assert day.allocated_gpu_hours == pytest.approx(hours * (2 + 3 / 7 + 0.5 + 1), rel=1e-9)
    assert 0 < day.active_gpu_hours < day.allocated_gpu_hours
    written = bulk.day(NOW.date(), works, name, path=tmp_path / name)
    assert written.frames == () and written.samples == day.samples
    on_disk = pl.read_parquet(tmp_path / name)
    assert on_disk.schema == schema and on_disk.equals(frame)
    # labels in dictionaries, the (mostly distinct) values plain: allocator/sample_parquet.py
    encodings = column_encodings(tmp_path / name)
    assert "RLE_DICTIONARY" in encodings["host"] and "RLE_DICTIONARY" not in encodings["value"]
    loaded = parse_dcgm_parquet((tmp_path / name).read_bytes(), name)
    assert loaded.quarantine.height == 0 and loaded.records_loaded == frame.height


def test_idle_runs_and_rogue_processes_are_counted(pool):
    bulk = BulkTelemetry(pool)
    unit = bulk.unit_of("h100-02/0")
    stops = ActivityProfile(level=0.8, swing=0.0, noise=0.0, busy_for_s=3600)
    rogue = ActivityProfile(level=0.6, swing=0.0, noise=0.0)
    works = [
        Work(unit, "j-idle", 0, dt.datetime(2026, 11, 2, 8), dt.datetime(2026, 11, 2, 12), stops),
        Work(
            bulk.unit_of("h100-02/1"),
            None,
            0,
            dt.datetime(2026, 11, 2, 1),
            dt.datetime(2026, 11, 2, 3),
            rogue,
        ),
    ]
    day = bulk.day(dt.date(2026, 11, 2), works, "x.parquet")
    assert day.allocated_gpu_hours == pytest.approx(4.0)
    assert day.idle_gpu_hours == pytest.approx(3.0)  # busy the first hour, idle the next three
    assert day.rogue_busy_gpu_hours == pytest.approx(2.0)
    frame = pl.concat(day.frames).filter(
        pl.col("metric") == GR_ENGINE_ACTIVE, pl.col("gpu") == 1, pl.col("host") == "h100-02"
    )
    busy = frame.filter(pl.col("value") > 0.5)
    assert busy.height == 120 and busy.get_column("hpc_job").null_count() == 120


def test_render_rejects_an_unknown_host(pool):
    with pytest.raises(KeyError, match="nope-01"):
        render_node_metrics(pool, {}, "nope-01", NOW)
