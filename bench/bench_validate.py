"""Benchmark: the raw.dcgm_samples expectation suite (Great Expectations) on parsed dcgm-exporter samples.

Generates the exposition text bench_dcgm_ingest.py generates, parses it (parse_dcgm_file), then times
`expectations.validate.validate_frame("dcgm_samples", frame)`, in one process, runs alternating:

  * as it runs now: string columns handed to GX as pandas categoricals;
  * as before (for comparison): string columns handed over as strings.

Both on a passing frame and on one with failing rows (values out of range, an unknown source), whose
verdicts must be the same. Prints medians, rows/s and the ratio.

Run:  .venv/bin/python bench/bench_validate.py [--lines 1000000] [--runs 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dcgm_ingest import generate

from expectations import validate
from pipelines.sources.dcgm_text import parse_dcgm_file

NOW = validate._for_pandas


def strings_kept(_table: str, frame: pl.DataFrame) -> Any:
    """The conversion before categoricals: narrow integers widened, strings left as strings."""
    narrow = (pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32)
    return frame.with_columns(pl.col(*narrow).cast(pl.Int64)).to_pandas()


def broken(frame: pl.DataFrame) -> pl.DataFrame:
    """One row in 1,000 with a utilisation of 150 (out of range whatever its metric's rule), one in 777
    from an unknown source."""
    row = pl.int_range(pl.len())
    return frame.with_columns(
        value=pl.when(row % 1000 == 0).then(150.0).otherwise("value"),
        source=pl.when(row % 777 == 0).then(pl.lit("nope")).otherwise("source"),
    )


def verdict(frame: pl.DataFrame) -> list[tuple]:
    outcome = validate.validate_frame("dcgm_samples", frame)
    return [(o.reason, o.unexpected_count, o.unexpected_index, o.examples) for o in outcome.failed]


def timed(convert: Callable, frame: pl.DataFrame) -> tuple[float, list[tuple]]:
    validate._for_pandas = convert
    try:
        started = time.perf_counter()
        found = verdict(frame)
        return time.perf_counter() - started, found
    finally:
        validate._for_pandas = NOW


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="sample lines to generate")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each conversion and frame")
    args = parser.parse_args()
    data, samples = generate(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.prom"
        path.write_bytes(data)
        frame = parse_dcgm_file(path).tables["dcgm_samples"]
    frames = {"passing": frame, "failing": broken(frame)}
    print(f"input: {samples:,} samples parsed, {frame.height:,} rows")
    validate.validate_frame("dcgm_samples", frame.head(1000))  # the context and the suite, built once
    for name, data_frame in frames.items():
        seconds: dict[str, list[float]] = {"categoricals": [], "strings": []}
        verdicts = {}
        for _ in range(args.runs):
            for label, convert in (("categoricals", NOW), ("strings", strings_kept)):
                took, verdicts[label] = timed(convert, data_frame)
                seconds[label].append(took)
        if verdicts["categoricals"] != verdicts["strings"]:
            raise SystemExit(f"{name}: the two conversions disagree")
        failing = sum(count for _, count, _, _ in verdicts["categoricals"])
        medians = {label: statistics.median(s) for label, s in seconds.items()}
        for label, median in medians.items():
            runs = ", ".join(f"{s:.3f}" for s in seconds[label])
            print(f"{name:8} {label:13} median {median:.3f} s -> {data_frame.height / median:12,.0f} rows/s"
                  f"   (runs: {runs})")
        print(f"{name:8} strings / categoricals: {medians['strings'] / medians['categoricals']:.2f}x; "
              f"same verdict ({failing:,} failed checks)")


if __name__ == "__main__":
    main()
