"""Host telemetry of the simulated pool: node_exporter samples in the raw.host_samples contract."""

import datetime as dt
from dataclasses import replace

import polars as pl

from allocator.sim.simulator import simulate
from allocator.sim.workload import CALIBRATION
from tests.allocator.helpers import column_encodings

START = dt.date(2026, 11, 1)


def test_host_samples_follow_the_jobs(tmp_path):
    cal = replace(CALIBRATION, loader_bound=0.5)
    simulate(tmp_path, 2, 64, 7, START, admin=None, calibration=cal)
    files = sorted(tmp_path.glob("node_exporter_parquet/*/samples.parquet"))
    assert [f.parent.name for f in files] == ["2026-11-01", "2026-11-02"]
    rows = pl.read_parquet(files)
    assert rows.columns == [
        "sampled_at",
        "host",
        "metric",
        "value",
        "cpu",
        "mode",
        "device",
        "extra_labels",
        "source",
        "source_file",
    ]
    assert set(rows["source"]) == {"node_exporter_parquet"}
    encodings = column_encodings(files[0])  # as the DCGM files: allocator/sample_parquet.py
    assert "RLE_DICTIONARY" in encodings["metric"] and "RLE_DICTIONARY" not in encodings["value"]
    cpu = rows.filter(pl.col("metric") == "node_cpu_seconds_total")
    assert set(cpu["cpu"]) == {"all"} and set(cpu["mode"]) == {"idle", "user", "system", "iowait"}
    # counters never go back, across the day boundary too
    counters = rows.filter(pl.col("metric").str.ends_with("_total")).sort(
        "host", "metric", "mode", "sampled_at"
    )
    steps = counters.group_by("host", "metric", "mode").agg(pl.col("value").diff().min().alias("d"))
    assert (steps["d"] >= 0).all()
    wide = cpu.pivot(on="mode", index=["host", "sampled_at"], values="value").sort("host", "sampled_at")
    busy = wide.with_columns(
        [pl.col(m).diff().over("host").alias(f"d_{m}") for m in ("idle", "user", "system", "iowait")]
    ).with_columns(
        frac=1
        - pl.col("d_idle") / (pl.col("d_idle") + pl.col("d_user") + pl.col("d_system") + pl.col("d_iowait"))
    )
    # a loader-bound job saturates its host for a while; a quiet host stays well below
    assert busy.filter(pl.col("frac") > 0.9).height >= 30
    assert busy["frac"].min() < 0.2
    mem = rows.filter(pl.col("metric").str.starts_with("node_memory"))
    wide_mem = mem.pivot(on="metric", index=["host", "sampled_at"], values="value")
    assert (wide_mem["node_memory_MemAvailable_bytes"] < wide_mem["node_memory_MemTotal_bytes"]).all()
