"""The simulator: its landing layout parses clean, shows every planted waste, and is reproducible."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from allocator.pool import default_pool, pool_capacity
from allocator.simulator import scale_pool, simulate
from allocator.telemetry import GPU_UTIL, GR_ENGINE_ACTIVE, IDLE_ACTIVITY
from allocator.workload import PER_JOB_WASTE, Waste
from pipelines.sources.allocator_log import parse_audit_log, parse_event_log, parse_pool_snapshot
from pipelines.sources.dcgm_parquet import parse_dcgm_parquet

START = dt.date(2026, 11, 2)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    progress = []
    report = simulate(out, days=2, gpus=64, seed=7, start=START, on_progress=lambda *a: progress.append(a))
    return out, report, progress


@pytest.fixture(scope="module")
def events(run) -> pl.DataFrame:
    out, _, _ = run
    frames = []
    for path in sorted(out.glob("allocator_events/*/events.jsonl")):
        parsed = parse_event_log(path.read_bytes(), str(path))
        assert parsed.quarantine.height == 0, parsed.quarantine
        frames.append(parsed.tables["job_events"])
    return pl.concat(frames)


@pytest.fixture(scope="module")
def samples(run) -> pl.DataFrame:
    out, report, _ = run
    frames = []
    for path in sorted(out.glob("dcgm_parquet/*/samples.parquet")):
        parsed = parse_dcgm_parquet(path.read_bytes(), str(path))
        assert parsed.quarantine.height == 0, parsed.quarantine
        frames.append(parsed.tables["dcgm_samples"])
    frame = pl.concat(frames)
    assert frame.height == report.samples
    return frame


def test_scale_pool_keeps_the_mix_and_fits_the_quotas():
    base = default_pool()
    for gpus in (64, 1024):
        scaled = scale_pool(base, gpus)
        total = sum(len(n.gpus) for n in scaled.nodes)
        assert abs(total - gpus) <= 8
        assert {n.node_pool for n in scaled.nodes} == {n.node_pool for n in base.nodes}
        assert len({n.host for n in scaled.nodes}) == len(scaled.nodes)
        capacity = pool_capacity(scaled)
        for model in capacity:
            assert sum(q.quota.get(model, 0) for q in scaled.queues) <= capacity[model]
    assert scale_pool(base, 256) is base


def test_layout_and_files_parse_clean(run):
    out, report, progress = run
    days = [START.isoformat(), (START + dt.timedelta(days=1)).isoformat()]
    for source, name in (
        ("allocator_events", "events.jsonl"),
        ("allocator_pool", "pool.json"),
        ("dcgm_parquet", "samples.parquet"),
    ):
        assert sorted(p.parent.name for p in out.glob(f"{source}/*/{name}")) == days
    for path in out.glob("allocator_pool/*/pool.json"):
        parsed = parse_pool_snapshot(path.read_bytes(), str(path))
        assert parsed.quarantine.height == 0
        assert parsed.tables["gpu_inventory"].get_column("fraction").sum() == pytest.approx(report.gpus)
    for path in out.glob("allocator_audit/*/audit.jsonl"):
        assert parse_audit_log(path.read_bytes(), str(path)).quarantine.height == 0
    assert set(report.files) == set(_files(out))
    assert [p[0] for p in progress] == [1, 2]
    assert report.gpus == 64 and report.days == 2


def test_report_matches_what_was_written(run, events):
    _, report, _ = run
    assert report.events == events.height
    kinds = Counter(events.get_column("event_type"))
    assert report.jobs_submitted == kinds["submit"] > 100
    assert (
        report.jobs_started == events.filter(pl.col("event_type") == "start", pl.col("attempt") == 1).height
    )
    assert report.preemptions == kinds["preempt"]
    assert (
        report.retries
        == events.filter(pl.col("event_type") == "requeue", pl.col("state").is_not_null()).height
    )
    assert 0 < report.allocation_rate <= 1 and 0 < report.utilisation_of_allocated < 1
    assert 0 < report.failure_rate < 1 and report.p95_wait_s >= report.mean_wait_s >= 0
    assert report.capacity_gpu_hours == pytest.approx(64 * 48)
    assert "planted" in report.summary()


def test_every_planted_kind_shows_in_events_and_telemetry(run, events, samples):
    _, report, _ = run
    started = set(events.filter(pl.col("event_type") == "start").get_column("job_id"))
    examples = report.planted_examples
    for kind in PER_JOB_WASTE:
        assert report.planted[kind] >= 1
        assert started & set(examples[kind]), kind
    # a retry storm: one job name failing again and again, resubmitted
    storm = examples[Waste.RETRY_STORM][0]
    tries = events.filter(pl.col("job_id").str.starts_with(storm), pl.col("event_type") == "start")
    assert tries.height >= 4
    assert events.filter(pl.col("job_id") == f"{storm}-r1", pl.col("event_type") == "submit").height == 1
    # the over-using tenant ran on borrowed quota; H100 work waited in the queues
    assert report.borrowed_starts > 0 and report.planted[Waste.BORROWED_QUOTA] > 0
    assert report.scarce_model == "H100" and report.planted[Waste.SCARCE_MODEL_QUEUE] > 0

    activity = samples.filter(pl.col("metric").is_in([GR_ENGINE_ACTIVE, GPU_UTIL])).with_columns(
        level=pl.when(pl.col("metric") == GPU_UTIL).then(pl.col("value") / 100).otherwise(pl.col("value"))
    )
    # idle holders: allocations below 5% activity for 30 minutes or more
    for kind in (Waste.IDLE_ALLOCATION, Waste.ZOMBIE, Waste.FORGOTTEN_INTERACTIVE):
        held = activity.filter(pl.col("hpc_job").is_in(examples[kind]))
        assert held.filter(pl.col("level") < IDLE_ACTIVITY).height >= 30, kind
    # an oversized request: some of its GPUs work, others idle
    oversized = activity.filter(pl.col("hpc_job").is_in(examples[Waste.OVERSIZED]))
    per_gpu = oversized.group_by("hpc_job", "host", "gpu").agg(pl.col("level").max())
    assert per_gpu.get_column("level").max() > 0.3 and per_gpu.get_column("level").min() < IDLE_ACTIVITY
    # a rogue process: a busy GPU nobody holds
    rogue = activity.filter(pl.col("hpc_job").is_null(), pl.col("level") >= IDLE_ACTIVITY)
    assert rogue.height >= 30 and report.rogue_busy_gpu_hours > 0.5


def test_same_seed_same_bytes(tmp_path: Path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    simulate(a, days=1, gpus=32, seed=3, start=START)
    simulate(b, days=1, gpus=32, seed=3, start=START)
    simulate(c, days=1, gpus=32, seed=4, start=START)
    assert _files(a) == _files(b)
    assert (
        _files(a)["allocator_events/2026-11-02/events.jsonl"]
        != _files(c)["allocator_events/2026-11-02/events.jsonl"]
    )
    # a second run over the same folder replaces its files instead of appending to them
    simulate(a, days=1, gpus=32, seed=3, start=START)
    assert _files(a) == _files(b)


def test_interval_changes_the_resolution(tmp_path: Path):
    report = simulate(tmp_path, days=1, gpus=32, seed=3, start=START, interval_s=300)
    frame = pl.read_parquet(tmp_path / "dcgm_parquet" / START.isoformat() / "samples.parquet")
    assert frame.get_column("sampled_at").dt.minute().unique().sort().to_list() == list(range(0, 60, 5))
    assert frame.height == report.samples
    with pytest.raises(ValueError, match="interval_s"):
        simulate(tmp_path, days=1, gpus=32, seed=3, start=START, interval_s=7)
