"""Parser for the MLflow connector's pulls (`gpupool.artifact/v1` JSON lines with `run_id`,
pipelines/connectors/mlflow.py) → raw.artifact_events, one row per line, source `mlflow`.

A line that is not a JSON object, has another `schema`, lacks a required field, or has one of the
wrong type or outside its values is quarantined with the reason; unknown fields are ignored.
"""
from __future__ import annotations

from pipelines.contracts import contract
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import (
    JsonRecord,
    RecordError,
    get_enum,
    get_int,
    get_str,
    get_time,
    json_type,
    parse_record_lines,
)

SOURCE = "mlflow"
SCHEMA = "gpupool.artifact/v1"
KINDS = ("checkpoint", "artifact", "model_version")
STATUSES = ("ok", "failed")


def _row(record: JsonRecord) -> dict[str, object]:
    line = record.value
    if not isinstance(line, dict):
        raise RecordError(f"line is {json_type(line)}, expected a JSON object")
    schema = line.get("schema")
    if schema != SCHEMA:
        raise RecordError("field 'schema' is missing" if schema is None else
                          f"unknown schema {schema!r}, expected {SCHEMA!r}")
    kind = get_enum(line, "kind", KINDS, required=True)
    return {
        "event_id": get_str(line, "artifact_id", required=True),
        "occurred_at": get_time(line, "ts", required=True),
        "job_id": get_str(line, "job_id", required=True),
        "attempt": get_int(line, "attempt", minimum=1),
        "kind": kind,
        "status": get_enum(line, "status", STATUSES, required=True),
        "location": get_str(line, "location"),
        "size_bytes": get_int(line, "size_bytes", minimum=0, bits=64),
        "training_step": get_int(line, "training_step", minimum=0, bits=64),
        "model_name": get_str(line, "model_name", required=kind == "model_version"),
        "model_version": get_str(line, "model_version", required=kind == "model_version"),
        "run_id": get_str(line, "run_id", required=True),
        "reported_by": get_str(line, "reported_by"),
        "source": SOURCE,
    }


def parse_mlflow_pull(data: bytes | str, source_file: str) -> ParseResult:
    """One pull file of the MLflow connector → artifact_events."""
    return parse_record_lines(data, source_file, SOURCE, "artifact_events", contract("artifact_events").schema,
                              _row)
