"""Parquet files already in the raw.dcgm_samples contract (the simulator's bulk telemetry,
or an export from another system) -> raw.dcgm_samples.

Columns are matched by name and cast to the contract; a file lacking a required column is one
quarantined record naming the columns. Row checks are column-wise: null required fields, NaN
or infinite values and DCGM blank sentinels are quarantined with the row as raw text.

`parse_dcgm_parquet_slices` reads a file a slice of rows at a time (the ingest of a large pool's day
holds one slice, not the day): the same rows, quarantine and line numbers as the whole-file parse.
"""
from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipelines.contracts import contract
from pipelines.sources.base import ParseResult, quarantine_frame, split_by_reason
from pipelines.sources.dcgm_text import FP64_SENTINELS, INT64_SENTINELS

SOURCE = "dcgm_parquet"
SLICE_ROWS = 1 << 18  # rows read at a time: about 50 MB of samples in Polars (GX validates a pandas copy)


class UnreadableSlice(Exception):
    """A slice after the first could not be read: the file is rejected whole, so the caller drops the
    slices it already took and parses the file whole (`parse_dcgm_parquet`), which says why."""


def parse_dcgm_parquet(data: bytes, source_file: str) -> ParseResult:
    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except Exception as err:  # noqa: BLE001 - polars raises several error types for a bad file
        return _whole_file_rejected(source_file, f"not a readable Parquet file: {err}")
    missing = _missing_columns(frame.columns)
    if missing:
        return _whole_file_rejected(source_file, f"missing required columns {', '.join(missing)}")
    return _parse_rows(frame, source_file, first_line=1)


def parse_dcgm_parquet_slices(path: Path, slice_rows: int = SLICE_ROWS) -> Iterator[ParseResult]:
    """The file's ParseResults, one per `slice_rows` rows (line numbers count from the file's first row).
    A file whose columns need a cast that could fail on some row (a string to a number...) is parsed
    whole, so that such a failure still rejects the whole file; so is an unreadable or incomplete one."""
    source_file = str(path)
    try:
        schema = pl.read_parquet_schema(path)
    except Exception:  # noqa: BLE001 - the whole-file parse reports why
        yield parse_dcgm_parquet(path.read_bytes(), source_file)
        return
    types = contract("dcgm_samples").schema
    if _missing_columns(list(schema)) or any(name in types and types[name] != dtype for name, dtype in schema.items()):
        yield parse_dcgm_parquet(path.read_bytes(), source_file)
        return
    rows = pl.scan_parquet(path).select(pl.len()).collect().item()
    for offset in range(0, max(rows, 1), slice_rows):
        try:
            frame = pl.scan_parquet(path).slice(offset, slice_rows).collect()
        except Exception as err:  # polars raises several error types for a bad page
            if offset == 0:
                yield parse_dcgm_parquet(path.read_bytes(), source_file)
                return
            raise UnreadableSlice(f"{source_file}: rows from {offset + 1} on: {err}") from err
        yield _parse_rows(frame, source_file, first_line=offset + 1)


def _missing_columns(columns: list[str]) -> list[str]:
    # source and source_file describe where the rows were loaded from: always set here.
    return [c for c in contract("dcgm_samples").required if c not in columns and c not in ("source", "source_file")]


def _parse_rows(frame: pl.DataFrame, source_file: str, first_line: int) -> ParseResult:
    """Conform a frame of the file's rows (its first being line `first_line`) and quarantine bad ones."""
    samples = contract("dcgm_samples")
    try:
        rows = samples.conform(
            frame.with_columns(
                source=pl.lit(SOURCE),
                source_file=pl.lit(source_file),
            )
        )
    except pl.exceptions.PolarsError as err:
        return _whole_file_rejected(source_file, f"columns do not cast to the contract's types: {err}")
    rows = rows.with_columns(line_number=pl.int_range(first_line, pl.len() + first_line, dtype=pl.Int32))
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
    return split_by_reason(rows.with_columns(reason=reason), SOURCE, source_file, "dcgm_samples")


def _whole_file_rejected(source_file: str, reason: str) -> ParseResult:
    return ParseResult(
        tables={"dcgm_samples": contract("dcgm_samples").empty_frame()},
        quarantine=quarantine_frame(SOURCE, source_file, [None], [reason], [None]),
        records_read=1,
        records_loaded=0,
    )
