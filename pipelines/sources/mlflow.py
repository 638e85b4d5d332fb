"""Parser for the MLflow connector's pulls (`gpupool.artifact/v1` JSON lines with `run_id`,
pipelines/connectors/mlflow.py) → raw.artifact_events, one row per line, source `mlflow`.

A line that is not a JSON object, has another `schema`, lacks a required field, or has one of the
wrong type or outside its values is quarantined with the reason; unknown fields are ignored.
A `refused` line is the connector's stand-in for a run whose records it could not land (a job id
tag too long, an artifact tree too deep): quarantined with the connector's reason. The run's user
(`reported_by`) is the tenant its quarantine counts against (`TENANT_FIELD`, pipelines/checks.py).
"""
from __future__ import annotations

from pipelines.contracts import contract
from pipelines.sources.allocator_artifacts import artifact_row
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import JsonRecord, RecordError, parse_record_lines

SOURCE = "mlflow"
TENANT_FIELD = "reported_by"  # who set the run's tags: MLflow's user of the run


def _row(record: JsonRecord) -> dict[str, object]:
    line = record.value
    if isinstance(line, dict) and "refused" in line:
        raise RecordError(f"refused by the MLflow connector: {str(line['refused'])[:300]}")
    return artifact_row(record, source=SOURCE)


def parse_mlflow_pull(data: bytes | str, source_file: str) -> ParseResult:
    """One pull file of the MLflow connector → artifact_events (the allocator's record reader, source mlflow:
    the attempt may be absent, the run id may not)."""
    return parse_record_lines(data, source_file, SOURCE, "artifact_events", contract("artifact_events").schema,
                              _row)
