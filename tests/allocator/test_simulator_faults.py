"""Faults on the simulated pool: health series in the DCGM Parquet, jobs ended as a scheduler records them."""

import datetime as dt
import json

import polars as pl
import pytest

from allocator.pool import default_pool
from allocator.sim.faults import FAULT_KINDS, plan_faults, weak_gpus
from allocator.sim.simulator import scale_pool, simulate

START = dt.date(2026, 11, 1)


def _ends(out) -> pl.DataFrame:
    """finish and requeue events: job_id, type, state, exit_code, reason."""
    rows = [
        {k: r.get(k) for k in ("job_id", "type", "state", "exit_code", "reason")}
        for path in sorted(out.glob("allocator_events/*/events.jsonl"))
        for r in map(json.loads, path.read_text().splitlines())
        if r["type"] in ("finish", "requeue")
    ]
    return pl.DataFrame(rows, infer_schema_length=None)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults")
    report = simulate(out, 2, 64, 7, START, fault_scale=400.0)
    return out, report


def test_plan_is_seeded_and_has_a_gpu_fault_and_a_host_down():
    pool = scale_pool(default_pool(), 64)
    begin = dt.datetime(2026, 11, 1)
    a = plan_faults(pool, begin, 3, 7, scale=0.0)
    assert a == plan_faults(pool, begin, 3, 7, scale=0.0)
    assert any(f.gpu is not None for f in a) and any(f.gpu is None for f in a)
    assert len(weak_gpus(pool, 7)) == 1
    # the forced GPU fault is on the weak GPU and comes back later in the run (the drain loop's case)
    [first, again] = [f for f in a if f.gpu is not None]
    assert (first.host, first.gpu) == (again.host, again.gpu) == weak_gpus(pool, 7)[0] and first.weak
    assert first.kind == again.kind and first.at < again.at < begin + dt.timedelta(days=3)
    # the published rates give few faults: a 256-GPU month expects about 2 GPU faults outside weak GPUs
    per_gpu_day = sum(k.rate for k in FAULT_KINDS if not k.host_down)
    assert 2e-4 < per_gpu_day < 4e-4


def test_faults_write_health_series_and_kill_running_jobs(run):
    out, report = run
    samples = pl.read_parquet(sorted(out.glob("dcgm_parquet/*/samples.parquet")))
    xid = samples.filter(pl.col("metric") == "DCGM_EXP_XID_ERRORS_COUNT")
    codes = set(xid["extra_labels"].str.extract(r'xid="(\d+)"').cast(pl.Int64).to_list())
    assert {79, 48} <= codes and codes & {13, 43}
    assert xid["extra_labels"].str.contains('window_size_in_ms="300000"').all()
    dbe = samples.filter(pl.col("metric") == "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL").sort(
        "host", "gpu", "sampled_at"
    )
    assert dbe.height and (dbe.group_by("host", "gpu").agg(pl.col("value").diff().min())["value"] >= 0).all()
    assert report.fault_kills > 0
    ends = _ends(out).filter(pl.col("reason").is_not_null())
    reasons = set(ends["reason"].to_list())
    assert any(r.startswith(k.reason) for r in reasons for k in FAULT_KINDS if not k.host_down)
    node_fail = ends.filter(pl.col("reason").str.starts_with("node lost contact"))
    assert set(node_fail["state"].drop_nulls().to_list()) <= {"NODE_FAIL"}
    # some faults find the GPU idle: more GPU faults than attempts they ended
    assert sum(n for k, n in report.faults.items() if k != "host") > 0


def test_out_of_memory_fills_the_gpu_before_the_end(run):
    out, _ = run
    oom = _ends(out).filter(pl.col("exit_code") == 137)
    assert oom.height
    samples = pl.read_parquet(sorted(out.glob("dcgm_parquet/*/samples.parquet")))
    fb = samples.filter(
        (pl.col("metric") == "DCGM_FI_DEV_FB_USED") & pl.col("hpc_job").is_in(oom["job_id"].to_list())
    )
    # the pool's whole GPUs: 98% of memory is above what ordinary work uses (capped at 97%)
    top = fb.group_by("hpc_job").agg(pl.col("value").max())
    assert top.height and (top["value"] > 0).all()
    full = samples.filter(pl.col("metric") == "DCGM_FI_DEV_FB_USED")["value"].max()
    assert top["value"].max() == full


def test_same_seed_same_bytes(tmp_path):
    a = simulate(tmp_path / "a", 1, 64, 3, START, admin=None, fault_scale=200.0)
    b = simulate(tmp_path / "b", 1, 64, 3, START, admin=None, fault_scale=200.0)
    assert a.files == b.files
    for name in a.files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def _audit(out) -> list[dict]:
    return [r for p in sorted(out.glob("allocator_audit/*/audit.jsonl")) for r in map(json.loads, p.read_text().splitlines())]


def _outages(out) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """(host, drained at, undrained at) from the node health checker's audit records."""
    records = [r for r in _audit(out) if r["actor"] == "gpupool-node-health" and r["decision"] == "applied"]
    drains = [r for r in records if r["action"] == "enforcement.drain"]
    undrains = {r["object_name"]: r for r in records if r["action"] == "enforcement.undrain"}
    assert drains and all(r["actor_role"] == "governance_bot" and r["object_kind"] == "node" for r in drains)
    ts = lambda r: dt.datetime.fromisoformat(r["ts"].rstrip("Z"))
    return [(r["object_name"], ts(r), ts(undrains[r["object_name"]])) for r in drains if r["object_name"] in undrains]


def test_a_host_down_is_drained_reports_nothing_and_takes_no_work_until_it_is_back(run):
    out, _ = run
    outages = _outages(out)
    assert outages
    dcgm = pl.read_parquet(out / "dcgm_parquet").select("host", "sampled_at")
    hosts = pl.read_parquet(out / "node_exporter_parquet").select("host", "sampled_at")
    starts = [
        (g["host"], dt.datetime.fromisoformat(r["ts"].rstrip("Z")))
        for p in sorted(out.glob("allocator_events/*/events.jsonl"))
        for r in map(json.loads, p.read_text().splitlines())
        if r["type"] == "start"
        for g in r["gpus"]
    ]
    for host, down, back in outages:
        assert back - down == dt.timedelta(hours=4)
        for frame in (dcgm, hosts):
            mine = frame.filter(pl.col("host") == host)
            inside = mine.filter((pl.col("sampled_at") >= down) & (pl.col("sampled_at") < back))
            assert inside.height == 0 and mine.height > 0
            if back < dt.datetime.combine(START, dt.time()) + dt.timedelta(days=2):
                assert mine.filter(pl.col("sampled_at") >= back).height > 0  # it reports again once back
        assert not [t for h, t in starts if h == host and down <= t < back]


def test_an_xid_just_before_midnight_keeps_its_window_in_the_next_days_file():
    from allocator.sim.health import XID_COUNT, HealthEvent, HealthSeries
    from allocator.telemetry import BulkTelemetry

    pool = scale_pool(default_pool(), 64)
    bulk = BulkTelemetry(pool, 60)
    series = HealthSeries(bulk.table, 60)
    gpu = pool.nodes[0].gpus[0]
    day1 = dt.datetime(2026, 11, 1)
    event = HealthEvent(gpu.host, gpu.index, day1 + dt.timedelta(hours=23, minutes=58), 79, dbe=1)
    carried = HealthSeries.carry([event], day1 + dt.timedelta(days=1))
    assert carried == [HealthEvent(gpu.host, gpu.index, event.at, 79)]  # its ECC error is counted once
    times = (day1 + dt.timedelta(days=1) - dt.datetime(1970, 1, 1)).total_seconds() + 60.0 * pl.arange(
        0, 1440, eager=True
    ).cast(pl.Float64).to_numpy()
    table = pl.from_arrow(series.table(carried, times, "x")).filter(pl.col("metric") == XID_COUNT)
    # 23:58 + 5 min: the window's steps 00:00, 00:01 and 00:02 are in the next day
    assert table.get_column("sampled_at").dt.strftime("%H:%M").to_list() == ["00:00", "00:01", "00:02"]
    assert HealthSeries.carry([replace_at(event, 23, 55)], day1 + dt.timedelta(days=1)) == []


def replace_at(event, hour: int, minute: int):
    from dataclasses import replace

    return replace(event, at=dt.datetime(2026, 11, 1, hour, minute))
