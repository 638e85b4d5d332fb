"""Run a raw table's suite on a Polars frame; split a frame into loadable rows and quarantine rows.

A frame the screen passes (expectations/screen.py: every row passes every rule) is answered without
GX, which is then not even imported; GX runs on the others and names their failing rows.
GX 1.x reads pandas, not Polars: frames are converted with `.to_pandas()`, whose default RangeIndex
makes GX's `unexpected_index_list` the 0-based row positions of the Polars frame. The data context
is created once per process (it is slow to build) and guarded by a lock (it is not thread-safe).
Batches are validated with `batch.validate(suite)` rather than a stored ValidationDefinition: the
latter also writes every COMPLETE result, index lists included, into the context's in-memory
results store, which only grows in a long-lived Dagster process.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import polars as pl

from expectations import screen
from expectations.suites import SUITE_TABLES, UNIQUE, build_suite, reason_of, rules
from pipelines.contracts import contract
from pipelines.sources.base import RAW_TEXT_LIMIT, empty_quarantine

if TYPE_CHECKING:
    import great_expectations as gx

EXAMPLES_LIMIT = 5
STAGE = "validate"
_DATASOURCE = "gpupool_raw"
# COMPLETE is the format that returns every failing row's index; the index query string is skipped
# because for pandas it is just the same list again, as text.
_RESULT_FORMAT: dict[str, Any] = {
    "result_format": "COMPLETE",
    "partial_unexpected_count": EXAMPLES_LIMIT,
    "return_unexpected_index_query": False,
}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class ExpectationOutcome:
    """One failed expectation: what it checks, why it matters, and which rows broke it."""

    expectation_type: str
    column: str | None
    reason: str
    unexpected_count: int
    examples: list[Any]  # up to EXAMPLES_LIMIT distinct offending values, in row order
    unexpected_index: list[int]  # 0-based row positions in the validated frame

    def to_metadata(self) -> dict[str, Any]:
        return {
            "expectation": self.expectation_type,
            "column": self.column,
            "reason": self.reason,
            "unexpected_count": self.unexpected_count,
            "examples": [_jsonable(v) for v in self.examples],
            "first_rows": self.unexpected_index[:EXAMPLES_LIMIT],
        }


@dataclass(frozen=True)
class SuiteOutcome:
    """A suite's verdict on one frame. `unexpected_rows` counts distinct rows failing any expectation."""

    table: str
    success: bool
    rows: int
    evaluated: int
    failed: list[ExpectationOutcome] = field(default_factory=list)
    unexpected_rows: int = 0

    def row_reasons(self) -> pl.DataFrame:
        """One row per failing row: `row` (0-based position) and `reason` (every failed rule, in suite order)."""
        parts = [
            pl.DataFrame(
                {"row": pl.Series(o.unexpected_index, dtype=pl.Int64), "reason": o.reason, "order": i},
                schema={"row": pl.Int64, "reason": pl.String, "order": pl.Int32},
            )
            for i, o in enumerate(self.failed)
        ]
        if not parts:
            return pl.DataFrame(schema={"row": pl.Int64, "reason": pl.String})
        return (
            pl.concat(parts).group_by("row").agg(pl.col("reason").sort_by("order").str.join("; ")).sort("row")
        )

    def to_metadata(self) -> dict[str, Any]:
        """JSON-able summary for Dagster asset checks and run logs."""
        return {
            "table": self.table,
            "success": self.success,
            "rows": self.rows,
            "evaluated_expectations": self.evaluated,
            "unexpected_count": self.unexpected_rows,
            "failed": [o.to_metadata() for o in self.failed],
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


@cache
def _batch_definitions() -> dict[str, Any]:
    """The process's one ephemeral context, with a whole-dataframe batch definition per raw table."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    context = gx.get_context(
        mode="ephemeral",
        project_config=DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(),
            analytics_enabled=False,
            progress_bars=ProgressBarsConfig(globally=False),
        ),
    )
    datasource = context.data_sources.add_pandas(_DATASOURCE)
    return {
        table: datasource.add_dataframe_asset(table).add_batch_definition_whole_dataframe(f"{table}_whole")
        for table in SUITE_TABLES
    }


@cache
def _suite(table: str) -> gx.ExpectationSuite:
    _batch_definitions()  # GX suites resolve a context when used: make sure the process has one
    return build_suite(table)


@cache
def _suite_columns(table: str) -> tuple[str, ...]:
    """The columns the suite reads (its rules' columns and those their row conditions read), so only
    those are converted to pandas."""
    used = {rule.column for rule in rules(table)} | {rule.where[0] for rule in rules(table) if rule.where}
    return tuple(c for c in contract(table).column_names if c in used)


def _check_columns(table: str, frame: pl.DataFrame) -> None:
    if table not in SUITE_TABLES:
        raise ValueError(f"no expectation suite for table {table!r}; known: {', '.join(SUITE_TABLES)}")
    missing = [c for c in contract(table).column_names if c not in frame.columns]
    if missing:
        raise ValueError(f"raw.{table}: frame lacks contract columns {missing}; conform it first")


def _exception_message(info: Any) -> str | None:
    """GX reports an expectation that raised either flat ({raised_exception, exception_message}) or,
    when a metric failed, as {metric id: that same shape}."""
    if not isinstance(info, dict):
        return None
    if "raised_exception" in info:
        return str(info.get("exception_message")) if info["raised_exception"] else None
    messages = [m for m in (_exception_message(v) for v in info.values()) if m is not None]
    return "; ".join(messages) if messages else None


def _examples(frame: pl.DataFrame, column: str | None, index: list[int]) -> list[Any]:
    if column is None or column not in frame.columns or not index:
        return []
    values = frame.get_column(column).gather(pl.Series(index, dtype=pl.Int64))
    return values.unique(maintain_order=True).head(EXAMPLES_LIMIT).to_list()


@cache
def _distinct_columns(table: str) -> tuple[str, ...]:
    """The columns the suite expects to hold distinct values (ExpectColumnValuesToBeUnique)."""
    return tuple(rule.column for rule in rules(table) if rule.kind == UNIQUE)


def _for_pandas(table: str, frame: pl.DataFrame) -> Any:
    """The frame as pandas, with the same values in the dtypes GX's pandas engine is fast on:
    - narrow integers widened to int64: `between` compares int64 and float64 columns vectorised but maps
      a Python function over every value of any other dtype (an int32 GPU index: twice the time of the
      whole dcgm_samples suite);
    - strings as categoricals: a row condition (`metric` in a set) is filtered again for each metric GX
      computes, and each filter copies the suite's columns; codes make the `isin` and the copies cheap
      (the dcgm_samples suite in about half the time). A column expected to be unique stays a string:
      its dictionary would be the column again."""
    narrow = (pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32)
    strings = pl.col(pl.String).exclude(_distinct_columns(table))
    return frame.with_columns(pl.col(*narrow).cast(pl.Int64), strings.cast(pl.Categorical)).to_pandas()


def validate_frame(table: str, frame: pl.DataFrame) -> SuiteOutcome:
    """Run raw.<table>'s suite on a frame conforming to the table's contract."""
    _check_columns(table, frame)
    if frame.is_empty():
        return SuiteOutcome(table=table, success=True, rows=0, evaluated=0)
    verdict = screen.passes(table, frame)
    if verdict:  # every row passes: what GX would answer, without its fixed cost (expectations/screen.py)
        return SuiteOutcome(table=table, success=True, rows=frame.height, evaluated=len(rules(table)))
    with _LOCK:  # also makes the first call's context and suite creation happen once
        suite = _suite(table)
        data = _for_pandas(table, frame.select(_suite_columns(table)))
        batch = _batch_definitions()[table].get_batch(batch_parameters={"dataframe": data})
        result = batch.validate(suite, result_format=_RESULT_FORMAT)
    failed: list[ExpectationOutcome] = []
    for r in result.results:
        config = r.expectation_config
        column = config.kwargs.get("column")
        error = _exception_message(r.exception_info)
        if error is not None:
            raise RuntimeError(f"raw.{table}: {config.type} on {column} could not run: {error}")
        if r.success:
            continue
        index = [int(i) for i in r.result.get("unexpected_index_list") or []]
        failed.append(
            ExpectationOutcome(
                expectation_type=config.type,
                column=column,
                reason=reason_of(config),
                unexpected_count=int(r.result.get("unexpected_count") or 0),
                examples=_examples(frame, column, index),
                unexpected_index=index,
            )
        )
    distinct_rows = len(set().union(*(o.unexpected_index for o in failed))) if failed else 0
    return SuiteOutcome(
        table=table,
        success=bool(result.success),
        rows=frame.height,
        evaluated=len(result.results),
        failed=failed,
        unexpected_rows=distinct_rows,
    )


def split_valid(
    table: str,
    frame: pl.DataFrame,
    source: str,
    source_file_col: str = "source_file",
    line_col: str | None = "line_number",
) -> tuple[pl.DataFrame, pl.DataFrame, SuiteOutcome]:
    """(rows passing every expectation, ops.quarantine rows for the others, the suite's outcome).

    Each quarantined row has stage "validate", every rule it broke in `reason`, and the row as JSON
    in `raw`; `line_number` comes from `line_col` when the frame has it. Row order is kept.
    """
    _check_columns(table, frame)
    if source_file_col not in frame.columns:
        raise ValueError(f"raw.{table}: frame has no column {source_file_col!r} to name the source file")
    outcome = validate_frame(table, frame)
    if outcome.success:
        return frame, empty_quarantine(), outcome
    for o in outcome.failed:
        if len(o.unexpected_index) != o.unexpected_count:
            raise RuntimeError(
                f"raw.{table}: {o.expectation_type} on {o.column} failed without naming every failing row "
                f"({len(o.unexpected_index)} of {o.unexpected_count}); split_valid needs row-level expectations"
            )
    # private names: job_events has a reason column of its own
    reasons = outcome.row_reasons().rename({"row": "_row", "reason": "_why"})
    indexed = frame.with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64))
    bad = indexed.join(reasons, on="_row", how="inner", maintain_order="left")
    good = indexed.join(reasons, on="_row", how="anti", maintain_order="left").drop("_row")
    line = pl.col(line_col) if line_col is not None and line_col in frame.columns else pl.lit(None)
    quarantine = bad.select(
        source=pl.lit(source),
        source_file=pl.col(source_file_col),
        line_number=line.cast(pl.Int32),
        reason=pl.col("_why"),
        stage=pl.lit(STAGE),
        # columns named _* are the caller's bookkeeping (the ingest's own-day column), not the record
        raw=pl.struct([c for c in frame.columns if not c.startswith("_")]).struct.json_encode()
        .str.slice(0, RAW_TEXT_LIMIT),
    )
    return good, contract("quarantine").conform(quarantine), outcome
