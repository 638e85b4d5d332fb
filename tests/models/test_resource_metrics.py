"""Resource metrics pinned with hand-computed values on tiny fixtures."""
from __future__ import annotations

import pytest
import yaml

from tests.models.builders import at, build, gpu, load, one, rows, series, simple_job

pytestmark = pytest.mark.slow  # dbt builds of constructed warehouses

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB = "DCGM_FI_DEV_FB_USED"


def test_mig_slice_allocation_counts_its_share_of_seven(warehouse):
    # An A100 cut into MIG instances; a job holds the 1g.10gb instance (1 of 7 compute slices)
    # from 10:00 to 12:00. Allocated GPU-hours = 2 h x 1/7 = 2/7.
    inventory = [
        gpu("a100-01", 0, share_mode="mig", gpu_instance_id=1, gpu_instance_profile="1g.10gb",
            fraction=1 / 7, memory_mib=9984),
        gpu("a100-01", 0, share_mode="mig", gpu_instance_id=2, gpu_instance_profile="3g.40gb",
            fraction=3 / 7, memory_mib=40192),
    ]
    events, placements = simple_job(
        "j-mig", "a100-01", 0, at("10:00"), at("12:00"),
        placement_fields={"gpu_instance_id": 1, "gpu_instance_profile": "1g.10gb", "fraction": 1 / 7},
    )
    # the instance's own series: 50% busy for the whole two hours
    samples = series("a100-01", 0, GR, at("10:00"), 120, 0.5, gpu_instance_id=1, gpu_instance_profile="1g.10gb")
    load(warehouse, gpu_inventory=inventory, job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    usage = one(con, "select * from metrics.allocation_usage where job_id = 'j-mig'")
    assert usage["allocated_gpu_hours"] == pytest.approx(2 / 7)
    assert usage["share_mode"] == "mig"
    assert usage["active_gpu_hours"] == pytest.approx(0.5 * 2 / 7)  # read from the instance's series
    pool = one(con, "select * from metrics.pool_daily where day = date '2026-11-01'")
    assert pool["allocated_gpu_hours"] == pytest.approx(2 / 7)
    # capacity counts the physical GPU once, not its instances: data runs 00:00-12:00 -> 12 GPU-hours
    assert pool["physical_gpus"] == 1
    assert pool["capacity_gpu_hours"] == pytest.approx(12.0)


def test_time_sliced_share_counts_one_over_replicas_and_reads_its_gpu(warehouse):
    # An L40S shared by 4 time-slice replicas; one replica held 4 h = 4 x 1/4 = 1 GPU-hour.
    # Time-slice replicas have no series of their own: the GPU's series (no instance id) is used.
    inventory = [gpu("l40s-01", 0, "L40S", share_mode="timeslice", gpu_instance_id=r, fraction=0.25) for r in range(4)]
    events, placements = simple_job(
        "j-ts", "l40s-01", 0, at("08:00"), at("12:00"), placement_fields={"gpu_instance_id": 2, "fraction": 0.25},
    )
    samples = series("l40s-01", 0, UTIL, at("08:00"), 240, 80.0)
    load(warehouse, gpu_inventory=inventory, job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    usage = one(con, "select * from metrics.allocation_usage where job_id = 'j-ts'")
    assert usage["allocated_gpu_hours"] == pytest.approx(1.0)
    assert usage["active_gpu_hours"] == pytest.approx(0.8)
    assert usage["has_telemetry"] is True


def test_activity_falls_back_from_gr_engine_active_to_gpu_util(warehouse):
    # GPU 0 exports only GPU_UTIL = 40 -> activity 0.4 from gpu_util.
    # GPU 1 exports both (GR_ENGINE_ACTIVE 0.7, GPU_UTIL 90) -> GR_ENGINE_ACTIVE wins: 0.7.
    samples = (
        series("h100-01", 0, UTIL, at("10:00"), 60, 40.0)
        + series("h100-01", 1, GR, at("10:00"), 60, 0.7)
        + series("h100-01", 1, UTIL, at("10:00"), 60, 90.0)
    )
    jobs = [simple_job(f"j-{i}", "h100-01", i, at("10:00"), at("11:00")) for i in (0, 1)]
    load(
        warehouse,
        gpu_inventory=[gpu("h100-01", 0, "H100"), gpu("h100-01", 1, "H100")],
        job_events=[e for events, _ in jobs for e in events],
        job_gpus=[p for _, placements in jobs for p in placements],
        dcgm_samples=samples,
    )
    con = build(warehouse)

    activity = {
        r["gpu"]: r
        for r in rows(con, "select gpu, min(activity) as lo, max(activity) as hi, any_value(activity_source) as src, "
                           "count(distinct activity_source) as sources from marts.fct_gpu_activity group by gpu")
    }
    assert activity[0]["lo"] == activity[0]["hi"] == pytest.approx(0.4)
    assert activity[0]["src"] == "gpu_util"
    assert activity[1]["lo"] == activity[1]["hi"] == pytest.approx(0.7)
    assert activity[1]["src"] == "gr_engine_active"
    # what a dashboard sees: 1 h held at 0.4 and at 0.7
    usage = {r["job_id"]: r["active_gpu_hours"] for r in rows(con, "select * from metrics.allocation_usage")}
    assert usage == {"j-0": pytest.approx(0.4), "j-1": pytest.approx(0.7)}


def test_allocation_crossing_midnight_is_split_per_day(warehouse):
    # 22:00 -> 03:00 next day on one whole GPU: 2 GPU-hours on day 1, 3 on day 2, 5 in total.
    events, placements = simple_job("j-night", "a100-01", 0, at("22:00"), at("03:00", day=2), tenant="nlp")
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements)
    con = build(warehouse)

    daily = {str(r["day"]): r["allocated_gpu_hours"] for r in rows(con, "select * from metrics.tenant_daily")}
    assert daily == {"2026-11-01": pytest.approx(2.0), "2026-11-02": pytest.approx(3.0)}
    pool = {str(r["day"]): r for r in rows(con, "select * from metrics.pool_daily")}
    assert pool["2026-11-01"]["allocated_gpu_hours"] == pytest.approx(2.0)
    assert pool["2026-11-02"]["allocated_gpu_hours"] == pytest.approx(3.0)
    # the data window starts at midnight of day 1 and ends at 03:00 of day 2
    assert pool["2026-11-01"]["capacity_gpu_hours"] == pytest.approx(24.0)
    assert pool["2026-11-02"]["capacity_gpu_hours"] == pytest.approx(3.0)
    assert pool["2026-11-01"]["allocation_rate_pct"] == pytest.approx(100 * 2 / 24)
    assert one(con, "select allocated_gpu_hours from metrics.job_summary")["allocated_gpu_hours"] == pytest.approx(5.0)


def test_running_allocation_is_clipped_at_the_data_end(warehouse):
    # Started 10:00, never finished; the latest telemetry minute is 13:59, so the data ends 14:00.
    events, placements = simple_job("j-run", "a100-01", 0, at("10:00"), None)
    samples = series("a100-01", 0, GR, at("10:00"), 240, 1.0)
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    usage = one(con, "select * from metrics.allocation_usage")
    assert usage["is_running"] is True
    assert usage["ended_at"] is None
    assert usage["allocated_gpu_hours"] == pytest.approx(4.0)
    assert usage["utilisation_of_allocated_pct"] == pytest.approx(100.0)
    status = one(con, "select * from metrics.gpu_status")
    assert status["job_id"] == "j-run" and status["is_reporting"] is True


def test_idle_window_crossing_midnight_is_one_window_split_across_days(warehouse):
    # Held 22:00 -> 02:00 at 60% activity, except 23:40 -> 00:20 at 1% (below the 5% default).
    # One idle window of 40 minutes (>= the 30 minute default): 20 minutes on each day.
    # A 25-minute dip at 01:00 is too short to count.
    events, placements = simple_job("j-idle", "a100-01", 0, at("22:00"), at("02:00", day=2))
    samples = (
        series("a100-01", 0, GR, at("22:00"), 100, 0.6)          # 22:00-23:39
        + series("a100-01", 0, GR, at("23:40"), 40, 0.01)        # 23:40-00:19 idle
        + series("a100-01", 0, GR, at("00:20", day=2), 40, 0.6)  # 00:20-00:59
        + series("a100-01", 0, GR, at("01:00", day=2), 25, 0.0)  # 01:00-01:24 short dip
        + series("a100-01", 0, GR, at("01:25", day=2), 35, 0.6)  # 01:25-01:59
    )
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    window = one(con, "select * from metrics.idle_allocations")
    assert window["window_start_at"] == at("23:40")
    assert window["window_end_at"] == at("00:20", day=2)
    assert window["idle_minutes"] == pytest.approx(40)
    assert window["idle_gpu_hours"] == pytest.approx(40 / 60)
    assert window["policy_scope"] == "default"
    daily = {str(r["day"]): r["idle_allocated_gpu_hours"] for r in rows(con, "select * from metrics.pool_daily")}
    assert daily == {"2026-11-01": pytest.approx(20 / 60), "2026-11-02": pytest.approx(20 / 60)}


def test_idle_window_respects_memory_floor_and_policy_precedence(warehouse, tmp_path, monkeypatch):
    # A site's policy catalog (gpupool.yml governance.policies) whose idle rule says: template training
    # needs 20 idle minutes, queue vision-train (more specific) needs 10 minutes and memory under 1,000 MiB.
    # The warehouse's idle windows follow it: the rule has one home, the catalog.
    from pipelines.policies.catalog import DEFAULT_POLICIES

    catalog = yaml.safe_load(DEFAULT_POLICIES.read_text())
    catalog["policies"]["idle-allocation"]["overrides"] = [
        {"template": "training", "params": {"window_minutes": 20}},
        {"queue": "vision-train", "params": {"window_minutes": 10, "memory_floor_mib": 1000}},
    ]
    (tmp_path / "policies.yml").write_text(yaml.safe_dump(catalog, allow_unicode=True))
    (tmp_path / "gpupool.yml").write_text("governance:\n  policies: policies.yml\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "gpupool.yml"))
    a_events, a_gpus = simple_job("j-q", "a100-01", 0, at("10:00"), at("11:00"), queue="vision-train")
    b_events, b_gpus = simple_job("j-t", "a100-01", 1, at("10:00"), at("11:00"), queue="other")
    samples = (
        # j-q: 15 idle minutes with 500 MiB used (a window), then 15 idle minutes holding 30 GB (not idle)
        series("a100-01", 0, GR, at("10:00"), 30, 0.0)
        + series("a100-01", 0, FB, at("10:00"), 15, 500.0)
        + series("a100-01", 0, FB, at("10:15"), 15, 30000.0)
        + series("a100-01", 0, GR, at("10:30"), 30, 0.9)
        # j-t: 15 idle minutes: under the template's 20 -> no window
        + series("a100-01", 1, GR, at("10:00"), 15, 0.0)
        + series("a100-01", 1, GR, at("10:15"), 45, 0.9)
    )
    load(warehouse, gpu_inventory=[gpu("a100-01", 0), gpu("a100-01", 1)], job_events=a_events + b_events,
         job_gpus=a_gpus + b_gpus, dcgm_samples=samples)
    con = build(warehouse)

    window = one(con, "select * from metrics.idle_allocations")
    assert window["job_id"] == "j-q"
    assert window["policy_scope"] == "queue:vision-train"
    assert window["idle_minutes"] == pytest.approx(15)
    assert window["memory_floor_mib"] == pytest.approx(1000)


def test_no_telemetry_allocation_and_busy_unallocated_gpu_are_both_reported(warehouse):
    # GPU 0 is held 10:00-12:00 but sends no telemetry; GPU 1 is 90% busy 10:00-10:30 with no
    # allocation, labelled with Slurm job 777.
    events, placements = simple_job("j-dark", "a100-01", 0, at("10:00"), at("12:00"))
    samples = series("a100-01", 1, GR, at("10:00"), 30, 0.9, hpc_job="777")
    load(warehouse, gpu_inventory=[gpu("a100-01", 0), gpu("a100-01", 1)], job_events=events,
         job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    findings = {r["finding"]: r for r in rows(con, "select * from metrics.telemetry_reconciliation")}
    assert set(findings) == {"allocation_without_telemetry", "busy_unallocated"}
    dark = findings["allocation_without_telemetry"]
    assert (dark["job_id"], dark["gpu"], dark["gpu_hours"]) == ("j-dark", 0, pytest.approx(2.0))
    busy = findings["busy_unallocated"]
    assert (busy["gpu"], busy["minutes"], busy["gpu_hours"]) == (1, 30, pytest.approx(0.5))
    assert busy["telemetry_hpc_job"] == "777"
    pool = one(con, "select * from metrics.pool_daily")
    assert pool["busy_unallocated_gpu_hours"] == pytest.approx(0.5)
    assert pool["allocated_gpu_hours_without_telemetry"] == pytest.approx(2.0)
    assert pool["active_gpu_hours"] == pytest.approx(0.0)  # no telemetry counts as no activity


def test_label_mismatch_and_gpu_seen_only_in_telemetry(warehouse):
    # Slurm says job 100 holds node1 GPU 0, but telemetry labels it with job 200.
    # node9 GPU 3 sends telemetry but is not in the inventory: it shows up flagged, model from its NVML name.
    events, placements = simple_job("100", "node1", 0, at("10:00"), at("11:00"))
    samples = series("node1", 0, GR, at("10:00"), 60, 0.5, hpc_job="200") + series(
        "node9", 3, GR, at("10:00"), 10, 0.0, model_name="NVIDIA H100 80GB HBM3"
    )
    load(warehouse, gpu_inventory=[gpu("node1", 0)], job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    usage = one(con, "select * from metrics.allocation_usage")
    assert usage["label_status"] == "mismatch" and usage["other_hpc_job"] == "200"
    stray = one(con, "select * from metrics.gpu_inventory where not is_in_inventory")
    assert (stray["host"], stray["gpu"], stray["gpu_model"]) == ("node9", 3, "H100")


def test_memory_watermark_is_the_peak_framebuffer_use(warehouse):
    events, placements = simple_job("j-mem", "a100-01", 0, at("10:00"), at("10:30"))
    samples = (
        series("a100-01", 0, GR, at("10:00"), 30, 0.5)
        + series("a100-01", 0, FB, at("10:00"), 20, 10240.0)
        + series("a100-01", 0, FB, at("10:20"), 10, 20480.0)
    )
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)], job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)

    usage = one(con, "select * from metrics.allocation_usage")
    assert usage["peak_fb_used_mib"] == pytest.approx(20480)
    assert usage["peak_fb_used_pct"] == pytest.approx(25.0)  # of the A100's 81,920 MiB


def test_time_sliced_gpu_with_one_series_per_job_recognises_every_job(warehouse):
    # An L40S shared by 4 time-slice replicas; j-a, j-b, j-c and j-d each hold one from 10:00 to 11:00.
    # The exporter emits one GPU-level series per job it sees (same values, different hpc_job), but
    # it sees only j-a, j-b and j-c. Every minute carries all three labels, so each of those jobs
    # matches all 60 minutes, the middle one included; j-d is never named: a mismatch, and the
    # other job reported is the smallest label, j-a.
    inventory = [gpu("l40s-01", 0, "L40S", share_mode="timeslice", gpu_instance_id=r, fraction=0.25) for r in range(4)]
    jobs = [
        simple_job(job, "l40s-01", 0, at("10:00"), at("11:00"), placement_fields={"gpu_instance_id": r, "fraction": 0.25})
        for r, job in enumerate(["j-a", "j-b", "j-c", "j-d"])
    ]
    samples = [s for job in ("j-c", "j-a", "j-b") for s in series("l40s-01", 0, UTIL, at("10:00"), 60, 90.0, hpc_job=job)]
    load(warehouse, gpu_inventory=inventory, job_events=[e for events, _ in jobs for e in events],
         job_gpus=[p for _, placements in jobs for p in placements], dcgm_samples=samples)
    con = build(warehouse)

    minute = one(con, "select * from marts.fct_gpu_activity where minute_at = ?", [at("10:30")])
    assert (minute["hpc_job"], minute["hpc_jobs"], minute["samples"]) == ("j-a", ["j-a", "j-b", "j-c"], 3)
    assert minute["activity"] == pytest.approx(0.9)
    usage = {r["job_id"]: r for r in rows(con, "select * from metrics.allocation_usage")}
    for job in ("j-a", "j-b", "j-c"):
        assert (usage[job]["label_status"], usage[job]["label_match_minutes"]) == ("match", 60), job
    assert (usage["j-d"]["label_status"], usage["j-d"]["other_hpc_job"]) == ("mismatch", "j-a")
    assert usage["j-d"]["active_gpu_hours"] == pytest.approx(0.9 * 0.25)
    findings = rows(con, "select finding, job_id from metrics.telemetry_reconciliation")
    assert findings == [{"finding": "label_mismatch", "job_id": "j-d"}]
