"""Parser for the MLflow connector's pulls (`gpupool.artifact/v1` JSON lines with `run_id`,
pipelines/connectors/mlflow.py) → raw.artifact_events, one row per line, source `mlflow`.

A line that is not a JSON object, has another `schema`, lacks a required field, or has one of the
wrong type or outside its values is quarantined with the reason; unknown fields are ignored.
"""
from __future__ import annotations

from functools import partial

from pipelines.contracts import contract
from pipelines.sources.allocator_artifacts import artifact_row
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import parse_record_lines

SOURCE = "mlflow"


def parse_mlflow_pull(data: bytes | str, source_file: str) -> ParseResult:
    """One pull file of the MLflow connector → artifact_events (the allocator's record reader, source mlflow:
    the attempt may be absent, the run id may not)."""
    return parse_record_lines(data, source_file, SOURCE, "artifact_events", contract("artifact_events").schema,
                              partial(artifact_row, source=SOURCE))
