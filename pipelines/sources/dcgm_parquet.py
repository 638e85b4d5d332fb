"""Parquet files already in the raw.dcgm_samples contract (the simulator's bulk telemetry,
or an export from another system) -> raw.dcgm_samples.

Columns are matched by name and cast to the contract; a file lacking a required column is one
quarantined record naming the columns. Row checks are column-wise: null required fields, NaN
or infinite values and DCGM blank sentinels are quarantined with the row as raw text.
"""
from __future__ import annotations

import io

import polars as pl

from pipelines.contracts import contract
from pipelines.sources.base import ParseResult, empty_quarantine, quarantine_frame
from pipelines.sources.dcgm_text import FP64_SENTINELS, INT64_SENTINELS

SOURCE = "dcgm_parquet"


def parse_dcgm_parquet(data: bytes, source_file: str) -> ParseResult:
    samples = contract("dcgm_samples")
    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except Exception as err:  # noqa: BLE001 - polars raises several error types for a bad file
        return _whole_file_rejected(source_file, f"not a readable Parquet file: {err}")
    # source and source_file describe where the rows were loaded from: always set here.
    missing = [c for c in samples.required if c not in frame.columns and c not in ("source", "source_file")]
    if missing:
        return _whole_file_rejected(source_file, f"missing required columns {', '.join(missing)}")
    try:
        rows = samples.conform(
            frame.with_columns(
                source=pl.lit(SOURCE),
                source_file=pl.lit(source_file),
            )
        )
    except pl.exceptions.PolarsError as err:
        return _whole_file_rejected(source_file, f"columns do not cast to the contract's types: {err}")
    rows = rows.with_columns(line_number=pl.int_range(1, pl.len() + 1, dtype=pl.Int32))
    sentinels = [float(v) for v in INT64_SENTINELS] + list(FP64_SENTINELS)
    reason = (
        pl.when(pl.any_horizontal(*[pl.col(c).is_null() for c in samples.required]))
        .then(pl.lit("required field is null: ") + pl.concat_str(
            [pl.when(pl.col(c).is_null()).then(pl.lit(c)) for c in samples.required], separator=",",
            ignore_nulls=True))
        .when(pl.col("value").is_nan())
        .then(pl.lit("value is NaN"))
        .when(pl.col("value").is_infinite())
        .then(pl.lit("value is infinite"))
        .when(pl.col("value").is_in(sentinels))
        .then(pl.lit("DCGM blank sentinel"))
    )
    rows = rows.with_columns(reason=reason)
    bad = rows.filter(pl.col("reason").is_not_null())
    good = rows.filter(pl.col("reason").is_null()).drop("reason", "line_number")
    quarantine = (
        quarantine_frame(
            SOURCE,
            source_file,
            bad["line_number"],
            bad["reason"],
            bad.drop("reason", "line_number").select(pl.struct(pl.all()).struct.json_encode())[:, 0],
        )
        if bad.height
        else empty_quarantine()
    )
    return ParseResult(tables={"dcgm_samples": good}, quarantine=quarantine, records_read=rows.height,
                       records_loaded=good.height)


def _whole_file_rejected(source_file: str, reason: str) -> ParseResult:
    return ParseResult(
        tables={"dcgm_samples": contract("dcgm_samples").empty_frame()},
        quarantine=quarantine_frame(SOURCE, source_file, [None], [reason], [None]),
        records_read=1,
        records_loaded=0,
    )
