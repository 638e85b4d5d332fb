"""What every parser returns, and how it reports rejected records."""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from pipelines.contracts import contract

RAW_TEXT_LIMIT = 2000
# What one field of a record may hold, in characters; a longer one is a writer gone wrong (or an attack
# on the warehouse's size), and its record is quarantined, not stored. No real value comes near them:
# a label value or name (a node_exporter label, a host, an actor) is an identifier, a version string or
# at most a path (PATH_MAX 4096 bytes); free text (sacctmgr's Info and Where, which slurmdbd keeps in a
# BLOB/TEXT column of 65,535 bytes; labels joined) fits 64 KiB.
MAX_LABEL_VALUE_CHARS = 16 * 1024
MAX_FREE_TEXT_CHARS = 64 * 1024


@dataclass
class ParseResult:
    """Rows per contract table, the quarantined records, and how many records were read.

    Invariant each parser keeps: records_read == records_loaded + len(quarantine), where a record
    is the parser's unit of input (a sample line, a JSON line, a sacct job row).
    """

    tables: dict[str, pl.DataFrame]
    quarantine: pl.DataFrame
    records_read: int
    records_loaded: int
    notes: list[str] = field(default_factory=list)
    # per table, a boolean mask over its rows: True where the row's time is not its own (a DCGM line
    # without a timestamp, given the scrape time); the ingest puts those rows in the day it loads
    untimed: dict[str, pl.Series] = field(default_factory=dict)
    # the input is a well-formed answer that holds no record (a header-only sacct, slurmrestd's "Nothing
    # found", an empty `jobs` or `items` list): a quiet day, which the blocking check does not count against
    # the batch as it does a non-empty file nothing could be read from (pipelines/checks.py)
    empty_answer: bool = False

    @property
    def records_quarantined(self) -> int:
        return self.quarantine.height


def quarantine_frame(
    source: str,
    source_file: str,
    line_numbers: list[int | None] | pl.Series,
    reasons: list[str] | pl.Series,
    raws: list[str | None] | pl.Series,
    stage: str = "parse",
) -> pl.DataFrame:
    """Build quarantine rows (the ops.quarantine contract) from parallel lists or Series."""
    frame = pl.DataFrame(
        {
            "line_number": pl.Series(line_numbers, dtype=pl.Int32),
            "reason": pl.Series(reasons, dtype=pl.String),
            "raw": pl.Series(raws, dtype=pl.String).str.slice(0, RAW_TEXT_LIMIT),
        }
    ).with_columns(
        source=pl.lit(source), source_file=pl.lit(source_file), stage=pl.lit(stage)
    )
    return contract("quarantine").conform(frame)


def empty_quarantine() -> pl.DataFrame:
    return contract("quarantine").empty_frame()


def split_by_reason(rows: pl.DataFrame, source: str, source_file: str, table: str) -> ParseResult:
    """Rows of a file already in a raw contract, with `reason` (null = sound) and `line_number`: the sound
    ones loaded into `table`, the others quarantined with the row as JSON (Parquet readers)."""
    bad = rows.filter(pl.col("reason").is_not_null())
    good = rows.filter(pl.col("reason").is_null()).drop("reason", "line_number")
    quarantine = quarantine_frame(
        source, source_file, bad["line_number"], bad["reason"],
        bad.drop("reason", "line_number").select(pl.struct(pl.all()).struct.json_encode())[:, 0],
    ) if bad.height else empty_quarantine()
    return ParseResult(tables={table: good}, quarantine=quarantine, records_read=rows.height,
                       records_loaded=good.height, empty_answer=rows.height == 0)
