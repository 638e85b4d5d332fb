"""Benchmark: the raw.dcgm_samples expectation suite on parsed dcgm-exporter samples.

Generates the exposition text bench_dcgm_ingest.py generates, parses it (parse_dcgm_file), then times
`expectations.validate.validate_frame("dcgm_samples", frame)`, in one process, runs alternating:

  * as it runs now: the screen first (expectations/screen.py, the rules as Polars expressions), GX only
    on a frame the screen fails;
  * GX alone (for comparison): the screen switched off, as before it existed.

Both on a passing frame and on one with failing rows (values out of range, an unknown source), whose
verdicts must be the same. Prints medians, rows/s and the ratio. Also on slices of --slice rows, the
size the ingest validates at a time.

Run:  .venv/bin/python bench/bench_validate.py [--lines 1000000] [--runs 5] [--slice 262144]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dcgm_ingest import generate

from expectations import screen, validate
from pipelines.ingest import SLICE_ROWS
from pipelines.sources.dcgm_text import parse_dcgm_file

SCREEN = screen.passes


def broken(frame: pl.DataFrame) -> pl.DataFrame:
    """One row in 1,000 with a utilisation of 150 (out of range whatever its metric's rule), one in 777
    from an unknown source."""
    row = pl.int_range(pl.len())
    return frame.with_columns(
        value=pl.when(row % 1000 == 0).then(150.0).otherwise("value"),
        source=pl.when(row % 777 == 0).then(pl.lit("nope")).otherwise("source"),
    )


def verdict(frame: pl.DataFrame, slice_rows: int) -> list[tuple]:
    found = []
    for part in frame.iter_slices(slice_rows):
        outcome = validate.validate_frame("dcgm_samples", part)
        found += [(o.reason, o.unexpected_count, o.unexpected_index, o.examples) for o in outcome.failed]
    return found


def timed(screened: bool, frame: pl.DataFrame, slice_rows: int) -> tuple[float, list[tuple]]:
    screen.passes = SCREEN if screened else (lambda _table, _frame: None)
    try:
        started = time.perf_counter()
        found = verdict(frame, slice_rows)
        return time.perf_counter() - started, found
    finally:
        screen.passes = SCREEN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="sample lines to generate")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each way and frame")
    parser.add_argument("--slice", type=int, default=SLICE_ROWS, help="rows validated at a time, as the ingest does")
    args = parser.parse_args()
    data, samples = generate(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.prom"
        path.write_bytes(data)
        frame = parse_dcgm_file(path).tables["dcgm_samples"]
    frames = {"passing": frame, "failing": broken(frame)}
    print(f"input: {samples:,} samples parsed, {frame.height:,} rows")
    timed(False, broken(frame).head(1000), args.slice)  # GX imported, its context and the suite built once
    for name, data_frame in frames.items():
        for rows in sorted({data_frame.height, args.slice}, reverse=True):
            seconds: dict[str, list[float]] = {"screen first": [], "GX alone": []}
            verdicts = {}
            for _ in range(args.runs):
                for label, took_s in seconds.items():
                    took, verdicts[label] = timed(label == "screen first", data_frame, rows)
                    took_s.append(took)
            if verdicts["screen first"] != verdicts["GX alone"]:
                raise SystemExit(f"{name}: the two ways disagree")
            failing = sum(count for _, count, _, _ in verdicts["GX alone"])
            medians = {label: statistics.median(s) for label, s in seconds.items()}
            for label, median in medians.items():
                runs = ", ".join(f"{s:.3f}" for s in seconds[label])
                print(f"{name:8} slices of {rows:>9,} {label:12} median {median:.3f} s -> "
                      f"{data_frame.height / median:12,.0f} rows/s   (runs: {runs})")
            print(f"{name:8} slices of {rows:>9,} GX alone / screen first: "
                  f"{medians['GX alone'] / medians['screen first']:.1f}x; same verdict ({failing:,} failed checks)")


if __name__ == "__main__":
    main()
