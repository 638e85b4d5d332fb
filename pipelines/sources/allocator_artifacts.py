"""Parser for the allocator's artifact log: `gpupool.artifact/v1` JSON Lines → raw.artifact_events.

One line per checkpoint, artifact or model version a job reported (`POST /v1/jobs/{id}/artifacts`,
or the simulator's training jobs), as `allocator.records.artifact_record` writes it to
`allocator_artifacts/<day>/artifacts.jsonl` (the simulator) or `api.jsonl` (pulled from
`GET /v1/artifacts`). A line that is not a JSON object, lacks a required field, has a field of the
wrong type or out of range, or an unknown `schema` is quarantined with the reason; unknown extra
fields are ignored.
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

SOURCE = "allocator"
ARTIFACT_SCHEMA = "gpupool.artifact/v1"
KINDS = ("checkpoint", "artifact", "model_version")
STATUSES = ("ok", "failed")


def artifact_row(record: JsonRecord, source: str = SOURCE) -> dict[str, object]:
    """One `gpupool.artifact/v1` line as an artifact_events row. The allocator knows the attempt of every
    report; MLflow (source mlflow) may not, but always names its run."""
    line = record.value
    if not isinstance(line, dict):
        raise RecordError(f"line is {json_type(line)}, expected a JSON object")
    schema = line.get("schema")
    if schema != ARTIFACT_SCHEMA:
        found = "missing" if schema is None else repr(schema)
        raise RecordError(f"field 'schema' is {found}, expected {ARTIFACT_SCHEMA!r}")
    kind = get_enum(line, "kind", KINDS, required=True)
    model_name, model_version = get_str(line, "model_name"), get_str(line, "model_version")
    if kind == "model_version" and (model_name is None or model_version is None):
        raise RecordError("kind model_version needs fields 'model_name' and 'model_version'")
    return {
        "event_id": get_str(line, "artifact_id", required=True),
        "occurred_at": get_time(line, "ts", required=True),
        "job_id": get_str(line, "job_id", required=True),
        "attempt": get_int(line, "attempt", required=source == SOURCE, minimum=1),
        "kind": kind,
        "status": get_enum(line, "status", STATUSES, required=True),
        "location": get_str(line, "location"),
        "size_bytes": get_int(line, "size_bytes", minimum=0, bits=64),
        "training_step": get_int(line, "training_step", minimum=0, bits=64),
        "model_name": model_name,
        "model_version": model_version,
        "run_id": get_str(line, "run_id", required=source != SOURCE),
        "reported_by": get_str(line, "reported_by"),
        "source": source,
    }


def parse_artifact_log(data: bytes | str, source_file: str) -> ParseResult:
    """`gpupool.artifact/v1` lines → artifact_events (one row per line)."""
    return parse_record_lines(data, source_file, "allocator_artifacts", "artifact_events",
                              contract("artifact_events").schema, artifact_row)
