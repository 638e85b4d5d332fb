"""Benchmark: dcgm-exporter text -> parsed -> Parquet partition in the warehouse, in samples/s.

Generates a dcgm-exporter 4.x style exposition file (full H100 label sets as in
tests/fixtures/real-data/dcgm-exporter/metrics_sample_h100_k8s_pod_labels_nvidia_aicr.prom, pod labels
on half the GPUs, # HELP/# TYPE per metric, millisecond timestamps; one scrape of every host
per 15 s round), then times, in one process:

  * this project's path end to end: parse_dcgm_file + Warehouse.replace_partition (a Parquet file
    swapped into the Delta table in one commit, the warehouse transaction and the publish of a release);
  * prometheus_client.parser.text_string_to_metric_families over the same text (parse only).

With --floors it also times what any parser and load of this text into raw.dcgm_samples must do at
least, on the same file: read it into one Polars column of lines, and the Parquet write of the parsed
rows as the lake writes a partition (pipelines/lake/tables.py PARQUET_WRITE). Their sum bounds the
rate of a parse that cost nothing, with the table's text columns.

Run:  .venv/bin/python bench/bench_dcgm_ingest.py [--lines 1000000] [--runs 5] [--client-runs 1] [--floors]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from pipelines.lake.tables import PARQUET_WRITE
from pipelines.sources.dcgm_text import _read_lines as read_lines  # the parser's own first step
from pipelines.sources.dcgm_text import parse_dcgm_file
from pipelines.warehouse import Warehouse

TARGET_SAMPLES_PER_S = 1_300_000  # end to end, issue 15 (the figure before the lakehouse: 1.34 M/s)
ISSUE_34_SAMPLES_PER_S = 3_000_000  # end to end, issue 34
GPUS_PER_HOST = 8
HOSTS = 64
SCRAPE_INTERVAL_MS = 15_000
START = dt.datetime(2026, 3, 10, tzinfo=dt.UTC)
PCI_BUSES = ["53", "64", "75", "86", "97", "A8", "B9", "CA"]  # as on the real 8xH100 node

# (metric, prometheus type, low, high, decimals): dcgm-exporter prints ints bare and floats "%f".
METRICS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", 345, 1980, 0),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", 1593, 2619, 0),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", 25, 85, 0),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", 25, 85, 0),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", 60, 700, 6),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", 1e9, 9e11, 0),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", 0, 3, 0),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", 0, 100, 0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", 0, 100, 0),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", 0, 1, 0),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", 0, 1, 0),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", 0, 1, 0),
    ("DCGM_FI_DEV_FB_FREE", "gauge", 0, 81559, 0),
    ("DCGM_FI_DEV_FB_USED", "gauge", 0, 81559, 0),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", 0, 600, 0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", 0, 1, 6),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", 0, 1, 6),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", 0, 1, 6),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "counter", 1e6, 1e9, 0),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "counter", 1e6, 1e9, 0),
]


def generate(sample_lines: int, seed: int = 7) -> tuple[bytes, int]:
    """The file and its sample count: whole rounds of HOSTS x 8 GPUs x len(METRICS) samples, at
    least `sample_lines`."""
    per_round = HOSTS * GPUS_PER_HOST * len(METRICS)
    rounds = -(-sample_lines // per_round)
    rng = np.random.default_rng(seed)
    metrics = pl.DataFrame(
        {
            "metric_idx": range(len(METRICS)),
            "metric": [m[0] for m in METRICS],
            "mtype": [m[1] for m in METRICS],
            "low": [float(m[2]) for m in METRICS],
            "high": [float(m[3]) for m in METRICS],
            "decimals": [m[4] for m in METRICS],
        }
    )
    grid = (
        pl.DataFrame({"round": range(rounds)})
        .join(pl.DataFrame({"host": range(HOSTS)}), how="cross")
        .join(metrics, how="cross")
        .join(pl.DataFrame({"gpu": range(GPUS_PER_HOST)}), how="cross")
    )
    grid = grid.with_columns(u=pl.Series(rng.random(grid.height)))
    scaled = pl.col("low") + pl.col("u") * (pl.col("high") - pl.col("low"))
    micro = (scaled * 1_000_000).round().cast(pl.Int64)
    value = (
        pl.when(pl.col("decimals") == 0)
        .then(scaled.round().cast(pl.Int64).cast(pl.String))
        .otherwise(pl.format("{}.{}", micro // 1_000_000, (micro % 1_000_000).cast(pl.String).str.zfill(6)))
    )
    host, gpu = pl.col("host").cast(pl.String), pl.col("gpu").cast(pl.String)
    pod_labels = (
        pl.when(pl.col("gpu") % 2 == 0)
        .then(
            pl.format(
                ',container="main",namespace="team-{}",pod="train-{}-{}-{}",pod_uid=""',
                pl.col("host") % 7,
                host,
                gpu,
                (pl.col("host") * 31 + pl.col("gpu")).cast(pl.String).str.zfill(5),
            )
        )
        .otherwise(pl.lit(""))
    )
    labels = pl.format(
        '{{gpu="{}",UUID="GPU-{}-d595-d1c7-d1d2-{}",pci_bus_id="00000000:{}:00.0",device="nvidia{}",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-{}",DCGM_FI_DRIVER_VERSION="580.105.08"{}}}',
        gpu,
        host.str.zfill(8),
        gpu.str.zfill(12),
        pl.col("gpu").replace_strict(dict(enumerate(PCI_BUSES)), return_dtype=pl.String),
        gpu,
        host,
        pod_labels,
    )
    timestamp = (
        int(START.timestamp() * 1000) + pl.col("round") * SCRAPE_INTERVAL_MS + pl.col("host") * 37
    ).cast(pl.String)
    header = pl.format(
        "# HELP {} {}\n# TYPE {} {}\n",
        pl.col("metric"),
        pl.lit("DCGM field."),
        pl.col("metric"),
        pl.col("mtype"),
    )
    lines = grid.select(
        pl.concat_str(
            pl.when(pl.col("gpu") == 0).then(header).otherwise(pl.lit("")),
            pl.col("metric"),
            labels,
            pl.lit(" "),
            value,
            pl.lit(" "),
            timestamp,
        ).alias("line")
    )
    return (lines.get_column("line").str.join("\n").item() + "\n").encode(), lines.height


def time_ours(path: Path, runs: int, samples: int) -> tuple[list[float], list[float]]:
    parse_s, total_s = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            started = time.perf_counter()
            result = parse_dcgm_file(path)
            parsed = time.perf_counter()
            Warehouse(home).replace_partition(
                "dcgm_text",
                START.date(),
                result.tables,
                result.quarantine,
                files_read=1,
                records_read=result.records_read,
                records_loaded=result.records_loaded,
            )
            done = time.perf_counter()
        if result.records_loaded != samples or result.records_quarantined:
            raise SystemExit(
                f"parser loaded {result.records_loaded} and quarantined {result.records_quarantined} of {samples} samples"
            )
        parse_s.append(parsed - started)
        total_s.append(done - started)
    return parse_s, total_s


def floors(path: Path, runs: int, samples: int) -> list[tuple[str, float]]:
    """(step, median seconds) of what any parse and load of this file must do at least."""
    rows = parse_dcgm_file(path).tables["dcgm_samples"]

    def median_s(step) -> float:
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - started)
        return statistics.median(seconds)

    with tempfile.TemporaryDirectory() as tmp:
        written = Path(tmp) / "partition.parquet"
        steps = [("read the lines into Polars", median_s(lambda: read_lines(path))),
                 (f"Parquet write of the {rows.height:,} parsed rows", median_s(
                     lambda: rows.write_parquet(written, **PARQUET_WRITE)))]
    return steps


def time_prometheus_client(text: str, runs: int, samples: int) -> list[float]:
    from prometheus_client.parser import text_string_to_metric_families

    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        count = sum(len(family.samples) for family in text_string_to_metric_families(text))
        seconds.append(time.perf_counter() - started)
        if count != samples:
            raise SystemExit(f"prometheus_client read {count} samples, expected {samples}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--lines", type=int, default=1_000_000, help="sample lines to generate (rounded up to whole rounds)"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs of this project's parser + load")
    parser.add_argument(
        "--client-runs", type=int, default=1, help="timed runs of prometheus_client (slow; 0 skips it)"
    )
    parser.add_argument("--floors", action="store_true",
                        help="also time what any parse and load must do at least (reading, cutting, writing)")
    args = parser.parse_args()

    data, samples = generate(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.prom"
        path.write_bytes(data)
        print(
            f"input: {samples:,} samples, {len(data) / 1e6:,.0f} MB, {HOSTS} hosts x {GPUS_PER_HOST} GPUs x {len(METRICS)} metrics"
        )
        parse_s, total_s = time_ours(path, args.runs, samples)
        least = floors(path, args.runs, samples) if args.floors else []
    ours = samples / statistics.median(total_s)
    ours_parse = samples / statistics.median(parse_s)
    print(
        f"gpupool parse + load (Delta):   median {statistics.median(total_s):.3f} s of {args.runs} runs "
        f"-> {ours:,.0f} samples/s   (runs: {', '.join(f'{s:.3f}' for s in total_s)})"
    )
    print(
        f"gpupool parse only:             median {statistics.median(parse_s):.3f} s -> {ours_parse:,.0f} samples/s"
    )
    load_s = [total - parse for total, parse in zip(total_s, parse_s, strict=True)]
    print(f"gpupool load only:              median {statistics.median(load_s):.3f} s")
    print(f"target >= {TARGET_SAMPLES_PER_S:,} samples/s end to end: {'met' if ours >= TARGET_SAMPLES_PER_S else 'MISSED'}")
    print(f"issue 34's >= {ISSUE_34_SAMPLES_PER_S:,} samples/s end to end: "
          f"{'met' if ours >= ISSUE_34_SAMPLES_PER_S else 'MISSED'}")
    for step, seconds in least:
        print(f"floor: {step:46s} median {seconds:.3f} s -> {samples / seconds:,.0f} samples/s")
    if least:
        bound = sum(seconds for _, seconds in least)
        print(f"floor: read + write, a parse that cost nothing {bound:.3f} s -> {samples / bound:,.0f} samples/s "
              f"(end to end here: {statistics.median(total_s) / bound:.2f}x it)")
    if args.client_runs < 1:
        return
    client_s = time_prometheus_client(data.decode(), args.client_runs, samples)
    client = samples / statistics.median(client_s)
    print(
        f"prometheus_client parse only:   median {statistics.median(client_s):.3f} s of {args.client_runs} runs "
        f"-> {client:,.0f} samples/s"
    )
    print(
        f"ratio end to end / prometheus_client: {ours / client:,.1f}x   (parse only: {ours_parse / client:,.1f}x)"
    )
    print(f"target >= 30x prometheus_client end to end: {'met' if ours / client >= 30 else 'MISSED'}")


if __name__ == "__main__":
    main()
