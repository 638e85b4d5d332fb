"""The simulator: its landing layout parses clean, shows every planted waste, and is reproducible."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from allocator.pool import default_pool, pool_capacity
from allocator.sim.admin import GOVERNANCE_BOT, OUTGOING_ADMIN, access_plan
from allocator.sim.simulator import scale_pool, simulate
from allocator.sim.workload import PER_JOB_WASTE, Waste, tenant_users
from allocator.telemetry import GPU_UTIL, GR_ENGINE_ACTIVE, IDLE_ACTIVITY
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
def audits(run) -> pl.DataFrame:
    out, _, _ = run
    frames = []
    for path in sorted(out.glob("allocator_audit/*/audit.jsonl")):
        parsed = parse_audit_log(path.read_bytes(), str(path))
        assert parsed.quarantine.height == 0, parsed.quarantine
        assert parsed.records_read == parsed.records_loaded > 0
        frames.append(parsed.tables["audit_events"])
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
        ("allocator_audit", "audit.jsonl"),
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


def test_admin_activity_writes_every_kind_of_record(run, audits, events):
    _, report, _ = run
    kinds = Counter(zip(audits.get_column("action"), audits.get_column("decision"), strict=True))
    assert report.audit_records == audits.height
    assert report.audit_kinds == {f"{a} {d}": n for (a, d), n in kinds.items()}
    for kind in (
        ("permission.grant", "applied"),
        ("permission.revoke", "applied"),
        ("quota.update", "applied"),
        ("enforcement.quota_proposal", "proposed"),
        ("approval.grant", "approved"),
        ("enforcement.reclaim", "refused"),
    ):
        assert kinds[kind] >= 1, kind
    # idle-reclaim is the pipeline's (tests/policies/test_simulated_governance.py), not the admins'
    assert not {a for a, _ in kinds} & {"enforcement.remind", "enforcement.cap_runtime"}
    # day 0: every tenant's members, the admins and the bot; the records are the store's shape
    grants = audits.filter(pl.col("action") == "permission.grant")
    members = {u for t in default_pool().tenants for u in tenant_users(t)}
    assert members | {GOVERNANCE_BOT, OUTGOING_ADMIN} <= set(grants.get_column("object_name"))
    assert set(grants.get_column("actor_role")) == {"system"}
    assert set(grants.get_column("object_kind")) == {"principal"}
    # the refused reclaim targets an inference service
    refused = audits.filter(pl.col("action") == "enforcement.reclaim", pl.col("decision") == "refused")
    templates = dict(events.filter(pl.col("event_type") == "submit").select("job_id", "template").iter_rows())
    assert {templates[j] for j in refused.get_column("object_name")} == {"inference"}
    # one proposal approved a day later, the other left open
    proposals = audits.filter(pl.col("action") == "enforcement.quota_proposal")
    approved = audits.filter(pl.col("action") == "approval.grant")
    assert proposals.height == 2 and approved.height == 1
    assert approved.get_column("request_id")[0] == proposals.get_column("request_id")[0]
    gap = approved.get_column("occurred_at")[0] - proposals.get_column("occurred_at")[0]
    assert gap == dt.timedelta(days=1)


def test_access_plan_is_seeded_and_consistent():
    start = dt.datetime(2026, 11, 2)
    tenants = default_pool().tenants
    plan = access_plan(tenants, start, 30, seed=7)
    assert plan == access_plan(tenants, start, 30, seed=7)
    assert plan != access_plan(tenants, start, 30, seed=8)
    assert access_plan(tenants, start, 3, seed=7) == [c for c in plan if c[0] < start + dt.timedelta(days=3)]
    first = [c for c in plan if c[0] == start]
    assert len(first) == 12 * len(tenants) + 4 and all(p is not None for _, _, p in first)
    holding: set[str] = set()
    for at, name, principal in plan:
        if principal is None:
            assert name in holding, name  # only someone who held access loses it
            holding.discard(name)
        else:
            assert at.weekday() < 5 or at == start
            holding.add(name)
    revoked = [(at, name) for at, name, p in plan if p is None]
    assert revoked[0] == (start + dt.timedelta(days=1, hours=9), OUTGOING_ADMIN) and len(revoked) >= 2
    assert len(plan) - len(first) - len(revoked) >= 3  # people join during the month


def test_without_admin_the_audit_log_stays_empty(tmp_path: Path):
    report = simulate(tmp_path, days=1, gpus=32, seed=3, start=START, admin=None)
    assert report.audit_records == 0 and not (tmp_path / "allocator_audit").exists()
