"""Host metrics from node_exporter (raw.host_samples) pinned with hand-computed values: CPU busy from
per-CPU rows (as the exporter writes them) and from cpu="all" rows (as the simulator does), a counter
reset, a gap, excluded devices, a day boundary, the host share of two jobs on one 8-GPU host, and the
host-saturated minutes at the edges of both thresholds (CPU busy >= 0.9, GPUs' mean activity < 0.3)."""
from __future__ import annotations

import datetime as dt

import pytest

from tests.models.builders import at, build, gpu, load, one, rows, series, simple_job

pytestmark = pytest.mark.slow  # dbt builds of constructed warehouses

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
CPU = "node_cpu_seconds_total"
RX = "node_network_receive_bytes_total"
TX = "node_network_transmit_bytes_total"
READ = "node_disk_read_bytes_total"
WRITTEN = "node_disk_written_bytes_total"
MEM_TOTAL = "node_memory_MemTotal_bytes"
MEM_AVAILABLE = "node_memory_MemAvailable_bytes"

# CPU-seconds each mode gains per minute, per CPU: 2 CPUs, 120 CPU-seconds a minute in all.
# Busy (not idle, iowait or steal): cpu0 30 + 6, cpu1 12 + 3 -> 51 of 120 = 0.425, 0.85 CPUs busy.
PER_CPU = {"0": {"user": 30, "system": 6, "idle": 20, "iowait": 3, "steal": 1},
           "1": {"user": 12, "system": 3, "idle": 44, "iowait": 1, "steal": 0}}


def sample(host: str, metric: str, sampled_at: dt.datetime, value: float, **labels: str) -> dict:
    return {"sampled_at": sampled_at, "host": host, "metric": metric, "value": value,
            "source": "node_exporter", "source_file": f"{host}.prom"} | labels


def cpu_rows(host: str, sampled_at: dt.datetime, minutes: int, per_cpu: bool) -> list[dict]:
    """The CPU counters after `minutes` minutes of PER_CPU (counters start at 1000 s per CPU and mode)."""
    if per_cpu:
        return [sample(host, CPU, sampled_at, 1000 + gain * minutes, cpu=c, mode=mode)
                for c, modes in PER_CPU.items() for mode, gain in modes.items()]
    modes = PER_CPU["0"].keys()
    return [sample(host, CPU, sampled_at, 2000 + sum(PER_CPU[c][m] for c in PER_CPU) * minutes, cpu="all", mode=m)
            for m in modes]


def clock_sample(day: int = 1) -> list[dict]:
    """One DCGM sample: the build's day window is the DCGM telemetry's."""
    return series("gpu-host", 0, GR, at("00:00", day=day), 1, 0.0)


def test_cpu_busy_is_the_same_from_per_cpu_rows_and_cpu_all(warehouse):
    times = [at("10:00"), at("10:01"), at("10:02")]
    samples = [r for i, t in enumerate(times) for r in cpu_rows("h-real", t, i, per_cpu=True)]
    samples += [r for i, t in enumerate(times) for r in cpu_rows("h-sim", t, i, per_cpu=False)]
    load(warehouse, host_samples=samples, dcgm_samples=clock_sample())
    con = build(warehouse)

    got = rows(con, "select host, minute_at, cpu_busy_fraction, cpu_busy_cores, cpus from marts.fct_host_activity "
                    "order by host, minute_at")
    for host in ("h-real", "h-sim"):
        minutes = [r for r in got if r["host"] == host]
        assert [r["minute_at"] for r in minutes] == times
        assert minutes[0]["cpu_busy_fraction"] is None  # the first sample has nothing to differ from
        for r in minutes[1:]:
            assert r["cpu_busy_fraction"] == pytest.approx(51 / 120)
            assert r["cpu_busy_cores"] == pytest.approx(51 / 60)
            assert r["cpus"] == pytest.approx(2.0)
    daily = one(con, "select * from metrics.host_daily where host = 'h-real'")
    assert daily["cpu_busy_pct_mean"] == pytest.approx(42.5)
    assert daily["minutes_with_data"] == 3


def test_rates_count_physical_devices_and_survive_resets_and_gaps(warehouse):
    h = "h1"
    times = [at("10:00"), at("10:01"), at("10:02"), at("10:10"), at("10:11")]
    # eth0 received: +60 MB, then a reset to 30 MB (+30 MB, not -1.03 GB), then a gap of 8 minutes
    # (10:10 gives no rate), then +120 MB. lo, veth and docker0 move a lot and are never counted.
    eth0 = [1e9, 1.06e9, 30e6, 500e6, 620e6]
    samples = []
    for i, t in enumerate(times):
        samples += [
            sample(h, RX, t, eth0[i], device="eth0"),
            sample(h, TX, t, 6e6 * i, device="eth0"),
            sample(h, RX, t, 1e12 * i, device="lo"),
            sample(h, RX, t, 1e11 * i, device="veth1a2b"),
            sample(h, TX, t, 1e11 * i, device="docker0"),
            # sda reads 120 MB a minute; its partition and the device-mapper volume on it re-count it
            sample(h, READ, t, 120e6 * i, device="sda"),
            sample(h, READ, t, 120e6 * i, device="sda1"),
            sample(h, READ, t, 120e6 * i, device="dm-0"),
            sample(h, READ, t, 1e12 * i, device="loop0"),
            sample(h, WRITTEN, t, 30e6 * i, device="nvme0n1"),
            sample(h, WRITTEN, t, 30e6 * i, device="nvme0n1p1"),
            sample(h, MEM_TOTAL, t, 64e9),
            sample(h, MEM_AVAILABLE, t, 40e9 - 1e9 * i),
        ]
    load(warehouse, host_samples=samples, dcgm_samples=clock_sample())
    con = build(warehouse)

    got = {r["minute_at"]: r for r in rows(con, "select * from marts.fct_host_activity where host = 'h1'")}
    assert sorted(got) == times
    assert got[at("10:01")]["network_receive_bytes_per_s"] == pytest.approx(60e6 / 60)
    assert got[at("10:02")]["network_receive_bytes_per_s"] == pytest.approx(30e6 / 60)  # the reset
    assert got[at("10:10")]["network_receive_bytes_per_s"] is None  # 8 minutes after the last sample
    assert got[at("10:11")]["network_receive_bytes_per_s"] == pytest.approx(120e6 / 60)
    assert got[at("10:01")]["network_transmit_bytes_per_s"] == pytest.approx(6e6 / 60)
    assert got[at("10:01")]["disk_read_bytes_per_s"] == pytest.approx(120e6 / 60)
    assert got[at("10:01")]["disk_written_bytes_per_s"] == pytest.approx(30e6 / 60)
    assert got[at("10:00")]["memory_used_bytes"] == pytest.approx(24e9)
    assert got[at("10:11")]["memory_used_bytes"] == pytest.approx(28e9)
    assert got[at("10:11")]["memory_total_bytes"] == pytest.approx(64e9)

    daily = one(con, "select * from metrics.host_daily where host = 'h1'")
    assert daily["network_receive_bytes_per_s_mean"] == pytest.approx((1e6 + 0.5e6 + 2e6) / 3)
    assert daily["memory_used_bytes_mean"] == pytest.approx((24e9 + 25e9 + 26e9 + 27e9 + 28e9) / 5)
    assert daily["memory_used_bytes_peak"] == pytest.approx(28e9)
    assert daily["disk_read_bytes_per_s_mean"] == pytest.approx(2e6)


def test_the_first_rate_of_a_day_reads_the_last_sample_of_the_day_before(warehouse):
    # built one day at a time: 00:00 of day 2 differs from 23:59 of day 1
    load(warehouse, ingest="day1", host_samples=cpu_rows("h-sim", at("23:59"), 0, per_cpu=False),
         dcgm_samples=clock_sample())
    load(warehouse, ingest="day2", day=dt.date(2026, 11, 2),
         host_samples=cpu_rows("h-sim", at("00:00", day=2), 1, per_cpu=False), dcgm_samples=clock_sample(day=2))
    con = build(warehouse)

    first = one(con, "select * from marts.fct_host_activity where minute_at = ?", [at("00:00", day=2)])
    assert first["cpu_busy_fraction"] == pytest.approx(51 / 120)


def test_two_jobs_on_an_8_gpu_host_share_it_by_their_gpus(warehouse):
    # h8 has 8 GPUs. j-loader holds 2 (share 2/8) and idles them (activity 0.01 < 0.05) while the host's
    # CPU is 95 % busy: data-loader-bound. j-busy holds the other 6 (share 6/8) at activity 0.8.
    h = "h8"
    inventory = [gpu(h, i, "H100") for i in range(8)]
    jobs = [simple_job("j-loader", h, i, at("10:00"), at("10:10"), gpus=2) for i in (0, 1)]
    jobs += [simple_job("j-busy", h, i, at("10:00"), at("10:10"), gpus=6) for i in range(2, 8)]
    events = {e["event_id"]: e for job_events, _ in jobs for e in job_events}  # one submit/start per job
    placements = [p for _, job_placements in jobs for p in job_placements]
    dcgm = [s for i in (0, 1) for s in series(h, i, GR, at("10:00"), 10, 0.01)]
    dcgm += [s for i in range(2, 8) for s in series(h, i, GR, at("10:00"), 10, 0.8)]
    # host: 100 CPUs (6000 CPU-seconds a minute, 5700 busy), 100 GB of 200 GB used, eth0 receives 10 MB/s,
    # sampled 10:00..10:10: minutes 10:00..10:09 are inside the jobs, 10:01..10:09 (9) have rates
    host = []
    for m in range(11):
        t = at("10:00") + dt.timedelta(minutes=m)
        host += [
            sample(h, CPU, t, 5700.0 * m, cpu="all", mode="user"),
            sample(h, CPU, t, 300.0 * m, cpu="all", mode="idle"),
            sample(h, MEM_TOTAL, t, 200e9),
            sample(h, MEM_AVAILABLE, t, 100e9),
            sample(h, RX, t, 600e6 * m, device="eth0"),
        ]
    load(warehouse, gpu_inventory=inventory, job_events=list(events.values()), job_gpus=placements,
         dcgm_samples=dcgm, host_samples=host)
    con = build(warehouse)

    share = {r["job_id"]: r for r in rows(con, "select * from marts.fct_attempt_host_share")}
    assert share["j-loader"]["gpu_share"] == pytest.approx(0.25)
    assert share["j-busy"]["gpu_share"] == pytest.approx(0.75)
    assert share["j-loader"]["host_gpus"] == 8
    assert share["j-loader"]["host_minutes"] == 10

    usage = {r["job_id"]: r for r in rows(con, "select * from metrics.job_host_usage")}
    loader, busy = usage["j-loader"], usage["j-busy"]
    # 9 minutes x 95 busy CPUs / 60 = 14.25 busy CPU-hours on the host
    assert loader["attributed_cpu_busy_core_hours"] == pytest.approx(0.25 * 14.25)
    assert busy["attributed_cpu_busy_core_hours"] == pytest.approx(0.75 * 14.25)
    assert loader["attributed_memory_used_bytes_mean"] == pytest.approx(0.25 * 100e9)
    assert busy["attributed_memory_used_bytes_peak"] == pytest.approx(0.75 * 100e9)
    assert loader["attributed_network_receive_bytes"] == pytest.approx(0.25 * 9 * 600e6)
    # the 9 minutes with a CPU rate >= 0.9 while its GPUs idled (idle is underused); 10 minutes had both
    # kinds of telemetry
    assert loader["host_saturated_minutes"] == 9
    assert loader["observed_minutes"] == 10
    assert loader["host_saturated_share"] == pytest.approx(0.9)
    assert busy["host_saturated_minutes"] == 0
    assert loader["gpus"] == pytest.approx(2.0)


def test_a_saturated_minute_is_a_busy_host_cpu_with_underused_gpus(warehouse):
    # h8's CPU is busy 0.9 (exactly the threshold) 10:01-10:03, 0.89 10:04-10:06 and 0.95 10:07-10:09:
    # 6 saturated-CPU minutes. Each job holds the named GPUs 10:00-10:10 at a constant activity; the
    # GPUs count as underused when their mean activity is under 0.3.
    h = "h8"
    activity = {"j-idle": [0.01], "j-loader": [0.2], "j-under": [0.29], "j-edge": [0.3],
                "j-mixed": [0.1, 0.45], "j-busy": [0.8]}
    events, placements, dcgm, index = {}, [], [], 0
    for job_id, levels in activity.items():
        for level in levels:
            job_events, job_placements = simple_job(job_id, h, index, at("10:00"), at("10:10"), gpus=len(levels))
            events |= {e["event_id"]: e for e in job_events}
            placements += job_placements
            dcgm += series(h, index, GR, at("10:00"), 10, level)
            index += 1
    busy_per_minute = [5400.0] * 3 + [5340.0] * 3 + [5700.0] * 3  # of 6000 CPU-seconds a minute
    host, busy = [], 0.0
    for m in range(10):
        t = at("10:00") + dt.timedelta(minutes=m)
        busy += busy_per_minute[m - 1] if m else 0.0
        host += [sample(h, CPU, t, busy, cpu="all", mode="user"),
                 sample(h, CPU, t, 6000.0 * m - busy, cpu="all", mode="idle"),
                 sample(h, READ, t, 60e6 * m, device="sda")]  # 1 MB/s
    load(warehouse, gpu_inventory=[gpu(h, i, "H100") for i in range(8)], job_events=list(events.values()),
         job_gpus=placements, dcgm_samples=dcgm, host_samples=host)
    con = build(warehouse)

    usage = {r["job_id"]: r for r in rows(con, "select * from metrics.job_host_usage")}
    saturated = {job_id: r["host_saturated_minutes"] for job_id, r in usage.items()}
    # idle is underused; 0.29 is under 0.3, 0.3 is not; 0.1 and 0.45 average 0.275
    assert saturated == {"j-idle": 6, "j-loader": 6, "j-under": 6, "j-edge": 0, "j-mixed": 6, "j-busy": 0}
    loader = usage["j-loader"]
    assert loader["observed_minutes"] == 10
    assert loader["host_saturated_share"] == pytest.approx(0.6)
    assert loader["host_saturated_gpu_hours"] == pytest.approx(6 / 60)
    assert loader["saturated_host"] == h
    assert loader["saturated_cpu_busy_fraction_mean"] == pytest.approx((3 * 0.9 + 3 * 0.95) / 6)
    assert loader["saturated_disk_read_bytes_per_s_mean"] == pytest.approx(1e6)
    assert loader["saturated_gpu_activity_mean"] == pytest.approx(0.2)
    assert loader["gpu_activity_mean"] == pytest.approx(0.2)
    mixed = usage["j-mixed"]
    assert (mixed["allocations"], mixed["gpus"]) == (2, pytest.approx(2.0))
    assert mixed["host_saturated_gpu_hours"] == pytest.approx(2 * 6 / 60)
    assert mixed["saturated_gpu_activity_mean"] == pytest.approx(0.275)
    edge = usage["j-edge"]
    assert edge["saturated_host"] is None and edge["saturated_cpu_busy_fraction_mean"] is None
    assert edge["host_saturated_share"] == 0
