"""Parser for gpupool's own decision log (`gpupool.governance/v1`, models/contracts/allocator_logs.md)
→ raw.governance_actions, one row per line (a decision or an engine's answer).

A line that is not a JSON object, has an unknown `schema`, lacks a required field or has one of
the wrong type or outside its values is quarantined with the reason; unknown fields are ignored
(`effects` of an answer among them). `evidence` is kept as compact JSON text.
"""
from __future__ import annotations

from pipelines.contracts import DECISION_SCHEMA_NAME, DecisionStatus, Mode, PolicyKind, StepAction, contract
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import (
    JsonRecord,
    RecordError,
    compact_json,
    get,
    get_enum,
    get_int,
    get_str,
    get_time,
    json_type,
    parse_record_lines,
)

SOURCE = "governance_actions"
RECORDS = ("decision", "answer")
KINDS = tuple(k.value for k in PolicyKind)
MODES = tuple(m.value for m in Mode)
ACTIONS = tuple(a.value for a in StepAction)
STATUSES = tuple(s.value for s in DecisionStatus)
ENGINES = ("allocator", "slurm", "kueue")
OUTCOMES = ("applied", "refused", "already_done", "dry_run", "proposed")


def _row(record: JsonRecord) -> dict[str, object]:
    line = record.value
    if not isinstance(line, dict):
        raise RecordError(f"line is {json_type(line)}, expected a JSON object")
    schema = line.get("schema")
    if schema != DECISION_SCHEMA_NAME:
        raise RecordError("field 'schema' is missing" if schema is None else
                          f"unknown schema {schema!r}, expected {DECISION_SCHEMA_NAME!r}")
    kind = get_enum(line, "record", RECORDS, required=True)
    policy_kind = get_enum(line, "policy_kind", KINDS, required=True)
    # a gpu_health decision targets a node or GPU, not an attempt: attempt 0; work's attempts are 1-based
    attempt = get_int(line, "attempt", required=True, minimum=0 if policy_kind == PolicyKind.GPU_HEALTH else 1)
    evidence = get(line, "evidence", "object")
    gpu_hours = get(line, "gpu_hours", "number")
    return {
        "record": kind,
        "occurred_at": get_time(line, "ts", required=True),
        "idempotency_key": get_str(line, "idempotency_key", required=True),
        "finding_id": get_str(line, "finding_id", required=True),
        "policy": get_str(line, "policy", required=True),
        "policy_version": get_str(line, "policy_version", required=True),
        "policy_kind": policy_kind,
        "mode": get_enum(line, "mode", MODES, required=True),
        "step_index": get_int(line, "step_index", required=True, minimum=0),
        "action": get_enum(line, "action", ACTIONS, required=True),
        "engine": get_enum(line, "engine", ENGINES, required=True),
        "job_id": get_str(line, "job_id", required=True),
        "attempt": attempt,
        "tenant": get_str(line, "tenant", required=True),
        "queue": get_str(line, "queue"),
        "status": get_enum(line, "status", STATUSES, required=True),
        "status_reason": get_str(line, "status_reason"),
        "reason": get_str(line, "reason"),
        "evidence_json": None if evidence is None else compact_json(evidence),
        "detected_at": get_time(line, "detected_at"),
        "window_start_at": get_time(line, "window_start_at"),
        "window_end_at": get_time(line, "window_end_at"),
        "gpus_flagged": get_int(line, "gpus_flagged", minimum=0),
        "gpus_held": get_int(line, "gpus_held", minimum=0),
        "gpu_hours": None if gpu_hours is None else float(gpu_hours),
        "recommendation": get_str(line, "recommendation"),
        "outcome": get_enum(line, "outcome", OUTCOMES, required=kind == "answer"),
        "outcome_reason": get_str(line, "outcome_reason"),
        "delivery_attempts": get_int(line, "delivery_attempts", minimum=0),
        "api_version": DECISION_SCHEMA_NAME,
        "line_number": record.line_number,
    }


def parse_governance_log(data: bytes | str, source_file: str) -> ParseResult:
    """`gpupool.governance/v1` lines → governance_actions."""
    return parse_record_lines(data, source_file, SOURCE, "governance_actions", contract("governance_actions").schema,
                              _row)
