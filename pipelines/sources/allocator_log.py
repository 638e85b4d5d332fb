"""Parsers for the built-in allocator's logs (models/contracts/allocator_logs.md).

- `parse_event_log`: `gpupool.event/v1` JSON Lines → raw.job_events (+ raw.job_gpus for the
  placement of `start` events). A record is a line. Only the fields a line carries are loaded:
  an admit, start, requeue, preempt or finish line does not inherit the submit's tenant, queue,
  ... (staging joins them from the submit).
- `parse_audit_log`: `gpupool.audit/v1` JSON Lines → raw.audit_events.
- `parse_pool_snapshot`: one `gpupool.pool/v1` document → raw.gpu_inventory and raw.queue_quotas.
  A record is one GPU (a MIG GPU gives one row per instance, a time-sliced GPU one row per
  replica, numbered from 0) or one queue (one row per GPU model in its quota). A document that is
  not JSON or has the wrong schema is one quarantined record.

Lines that are not JSON objects, lack a required field, have a field of the wrong type or an
unknown `schema` are quarantined with the reason; unknown extra fields are ignored.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import polars as pl

from allocator.model import TEMPLATES
from pipelines.contracts import contract
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import (
    Columns,
    DocumentError,
    JsonRecord,
    RecordError,
    Rejects,
    compact_json,
    decode_document,
    get,
    get_enum,
    get_int,
    get_str,
    get_time,
    json_type,
    load_json_document,
    parse_record_lines,
    read_json_lines,
)

SOURCE = "allocator"
EVENT_SCHEMA = "gpupool.event/v1"
AUDIT_SCHEMA = "gpupool.audit/v1"
POOL_SCHEMA = "gpupool.pool/v1"

EVENT_TYPES = ("submit", "admit", "start", "requeue", "preempt", "finish")
SHARE_MODES = ("whole", "mig", "timeslice")
FINISH_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")
ACTOR_ROLES = ("admin", "governance_bot", "tenant_member", "system")
DECISIONS = ("allow", "deny", "applied", "refused", "already_done", "dry_run", "proposed", "approved")
ENGINES = ("allocator", "slurm", "kueue")

MAX_REPLICAS = 1024
_MIG_SLICES = re.compile(r"(\d+)g\.")


def _as_object(value: object, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise RecordError(f"{what} is {json_type(value)}, expected a JSON object")
    return value


def _check_schema(obj: Mapping[str, object], expected: str) -> None:
    value = obj.get("schema")
    if value is None:
        raise RecordError(f"field 'schema' is missing, expected {expected!r}")
    if value != expected:
        raise RecordError(f"unknown schema {value!r}, expected {expected!r}")


def _fraction(obj: Mapping[str, object], key: str, where: str, *, required: bool) -> float | None:
    value = get(obj, key, "number", required=required)
    if value is None:
        return None
    if not 0 < value <= 1:
        raise RecordError(f"field '{where}{key}' is {value}, expected a share in (0, 1]")
    return float(value)


def _result(tables: dict[str, pl.DataFrame], rejects: Rejects, source: str, source_file: str,
            read: int, notes: list[str] | None = None) -> ParseResult:
    return ParseResult(
        tables=tables,
        quarantine=rejects.frame(source, source_file),
        records_read=read,
        records_loaded=read - len(rejects),
        notes=notes or [],
    )


# --- event log -------------------------------------------------------------------------------


def _placement(item: object, index: int, job_id: str, attempt: int, at: object) -> dict[str, object]:
    where = f"gpus[{index}]."
    gpu = _as_object(item, f"gpus[{index}]")
    return {
        "job_id": job_id,
        "attempt": attempt,
        "host": get_str(gpu, "host", required=True, where=where),
        "gpu": get_int(gpu, "gpu", where=where, minimum=0),
        "uuid": get_str(gpu, "uuid", where=where),
        "gpu_instance_id": get_int(gpu, "gpu_instance_id", where=where, minimum=0),
        "gpu_instance_profile": get_str(gpu, "gpu_instance_profile", where=where),
        "fraction": _fraction(gpu, "fraction", where, required=True),
        "assigned_at": at,
    }


def _event(record: JsonRecord) -> tuple[dict[str, object], list[dict[str, object]]]:
    """One event line → its job_events row and its job_gpus rows; RecordError if invalid."""
    line = _as_object(record.value, "line")
    _check_schema(line, EVENT_SCHEMA)
    kind = get_enum(line, "type", EVENT_TYPES, required=True)
    job_id = get_str(line, "job_id", required=True)
    attempt = get_int(line, "attempt", required=True, minimum=1)
    at = get_time(line, "ts", required=True)
    is_submit = kind == "submit"
    row: dict[str, object] = {
        "event_id": get_str(line, "event_id", required=True),
        "occurred_at": at,
        "event_type": kind,
        "job_id": job_id,
        "attempt": attempt,
        "tenant": get_str(line, "tenant", required=is_submit),
        "queue": get_str(line, "queue", required=is_submit),
        "user_name": get_str(line, "user", required=is_submit),
        "job_name": get_str(line, "job_name", required=is_submit),
        "template": get_enum(line, "template", TEMPLATES, required=is_submit),
        "gpu_model": get_str(line, "gpu_model", required=is_submit),
        "gpus_requested": get_int(line, "gpus", required=True, minimum=1) if is_submit else None,
        "share_mode": get_enum(line, "share_mode", SHARE_MODES) or ("whole" if is_submit else None),
        "mig_profile": get_str(line, "mig_profile"),
        "priority": get_int(line, "priority"),
        "state": get_enum(line, "state", FINISH_STATES, required=kind == "finish"),
        "reason": get_str(line, "reason"),
        "exit_code": get_int(line, "exit_code"),
        "spec_json": None,
        "source": SOURCE,
        "line_number": record.line_number,
    }
    if is_submit and row["share_mode"] == "mig" and row["mig_profile"] is None:
        raise RecordError("field 'mig_profile' is missing: a submit with share_mode mig names its MIG profile")
    spec = get(line, "spec", "object")
    if spec is not None:
        row["spec_json"] = compact_json(spec)
    placements: list[dict[str, object]] = []
    if kind == "start":
        gpus = get(line, "gpus", "array", required=True)
        placements = [_placement(item, i, job_id, attempt, at) for i, item in enumerate(gpus)]
    return row, placements


def parse_event_log(data: bytes | str, source_file: str) -> ParseResult:
    """`gpupool.event/v1` lines → job_events and job_gpus (one job_gpus row per placed GPU/share)."""
    source = "allocator_events"
    rejects = Rejects()
    records = read_json_lines(data, rejects)
    read = len(records) + len(rejects)
    events = Columns(contract("job_events").schema)
    gpus = Columns(contract("job_gpus").schema)
    for record in records:
        try:
            row, placements = _event(record)
        except RecordError as error:
            rejects.add(record.line_number, str(error), record.raw)
            continue
        events.append(**row, source_file=source_file)
        for placement in placements:
            gpus.append(**placement, source=SOURCE, source_file=source_file)
    tables = {"job_events": events.frame(), "job_gpus": gpus.frame()}
    return _result(tables, rejects, source, source_file, read)


# --- audit log -------------------------------------------------------------------------------


def _audit(record: JsonRecord) -> dict[str, object]:
    line = _as_object(record.value, "line")
    _check_schema(line, AUDIT_SCHEMA)
    before = get(line, "before", "object")
    after = get(line, "after", "object")
    return {
        "audit_id": get_str(line, "audit_id", required=True),
        "occurred_at": get_time(line, "ts", required=True),
        "actor": get_str(line, "actor", required=True),
        "actor_role": get_enum(line, "actor_role", ACTOR_ROLES),
        "action": get_str(line, "action", required=True),
        "object_kind": get_str(line, "object_kind", required=True),
        "object_namespace": get_str(line, "object_namespace"),
        "object_name": get_str(line, "object_name", required=True),
        "before_json": None if before is None else compact_json(before),
        "after_json": None if after is None else compact_json(after),
        "decision": get_enum(line, "decision", DECISIONS, required=True),
        "reason": get_str(line, "reason"),
        "request_id": get_str(line, "request_id"),
        "idempotency_key": get_str(line, "idempotency_key"),
        "api_version": AUDIT_SCHEMA,
        # the engine that took the action: the built-in allocator, or Slurm/Kueue through a connector
        "source": get_enum(line, "engine", ENGINES) or SOURCE,
        "line_number": record.line_number,
    }


def parse_audit_log(data: bytes | str, source_file: str) -> ParseResult:
    """`gpupool.audit/v1` lines → audit_events (before/after as compact JSON text)."""
    return parse_record_lines(data, source_file, "allocator_audit", "audit_events", contract("audit_events").schema,
                              _audit)


# --- pool snapshot ---------------------------------------------------------------------------


def _mig_fraction(profile: str, gpu_model: str, where: str) -> float:
    """Compute slices of a MIG profile over the parent's slices (7; 4 on an A30)."""
    match = _MIG_SLICES.match(profile)
    if match is None:
        raise RecordError(f"field '{where}profile' is {profile!r}, not a MIG profile like 3g.40gb")
    return min(int(match.group(1)) / (4 if gpu_model == "A30" else 7), 1.0)


def _gpu_rows(node: dict[str, object], gpu_obj: object) -> list[dict[str, object]]:
    """One GPU of the snapshot → its inventory rows (one per MIG instance or time-slice replica)."""
    gpu = _as_object(gpu_obj, "entry")
    base = {
        "host": node["host"],
        "node_pool": node.get("node_pool"),
        "gpu": get_int(gpu, "gpu", required=True, minimum=0),
        "uuid": get_str(gpu, "uuid"),
        "gpu_model": get_str(gpu, "gpu_model", required=True),
        "model_name": get_str(gpu, "model_name"),
        "memory_mib": get_int(gpu, "memory_mib", minimum=0),
        "share_mode": get_enum(gpu, "share_mode", SHARE_MODES) or "whole",
    }
    if base["share_mode"] == "whole":
        return [{**base, "fraction": 1.0}]
    if base["share_mode"] == "timeslice":
        replicas = get_int(gpu, "replicas", required=True, minimum=1)
        if replicas > MAX_REPLICAS:  # one row each: a huge count would hang the parser
            raise RecordError(f"field 'replicas' is {replicas}, more than {MAX_REPLICAS} time-sliced replicas")
        # replicas share the whole memory: each row carries the parent's memory_mib
        return [{**base, "gpu_instance_id": r, "fraction": 1 / replicas} for r in range(replicas)]
    instances = get(gpu, "instances", "array", required=True)
    if not instances:
        raise RecordError("field 'instances' is empty: a MIG GPU needs at least one instance")
    rows = []
    for i, instance_obj in enumerate(instances):
        inner = f"instances[{i}]."
        instance = _as_object(instance_obj, f"instances[{i}]")
        profile = get_str(instance, "profile", required=True, where=inner)
        fraction = _fraction(instance, "fraction", inner, required=False)
        rows.append({
            **base,
            "gpu_instance_id": get_int(instance, "gpu_instance_id", required=True, where=inner, minimum=0),
            "gpu_instance_profile": profile,
            "memory_mib": get_int(instance, "memory_mib", where=inner, minimum=0),
            "fraction": fraction if fraction is not None else _mig_fraction(profile, base["gpu_model"], inner),
        })
    return rows


def _quota_rows(queue_obj: object) -> list[dict[str, object]]:
    queue = _as_object(queue_obj, "entry")
    base = {
        "queue": get_str(queue, "queue", required=True),
        "tenant": get_str(queue, "tenant", required=True),
        "priority": get_int(queue, "priority"),
        "preemptible": get(queue, "preemptible", "boolean"),
        "max_gpus_per_request": get_int(queue, "max_gpus_per_request", minimum=1),
        "max_runtime_s": get_int(queue, "max_runtime_s", minimum=1, bits=64),
        "retry_budget": get_int(queue, "retry_budget", minimum=0),
    }
    quota: dict[str, object] = get(queue, "quota", "object", required=True)
    if not quota:
        raise RecordError("field 'quota' is empty: a queue needs a quota for at least one GPU model")
    rows = []
    for model in quota:
        gpus = get(quota, model, "number", required=True, where="quota.")
        if gpus < 0:
            raise RecordError(f"field 'quota.{model}' is {gpus}, expected at least 0")
        rows.append({**base, "gpu_model": model, "quota_gpus": float(gpus)})
    return rows


def parse_pool_snapshot(data: bytes | str, source_file: str) -> ParseResult:
    """A `gpupool.pool/v1` document → gpu_inventory and queue_quotas. A record is a GPU or a queue."""
    source = "allocator_pool"
    rejects = Rejects()
    inventory = Columns(contract("gpu_inventory").schema)
    quotas = Columns(contract("queue_quotas").schema)

    def tables() -> dict[str, pl.DataFrame]:
        return {"gpu_inventory": inventory.frame(), "queue_quotas": quotas.frame()}

    try:
        text = decode_document(data)
        if not text.strip():
            return _result(tables(), rejects, source, source_file, 0, ["empty file"])
        doc = _as_object(load_json_document(text), "document")
        _check_schema(doc, POOL_SCHEMA)
        snapshot_at = get_time(doc, "snapshot_at", required=True)
        nodes = get(doc, "nodes", "array", required=True)
        queues = get(doc, "queues", "array", required=True)
    except RecordError as error:
        is_syntax = isinstance(error, DocumentError)
        raw = data[:2000] if isinstance(data, str) else data[:2000].decode("utf-8", "replace")
        rejects.add(error.line_number if is_syntax else None, str(error), raw, "parse" if is_syntax else "validate")
        return _result(tables(), rejects, source, source_file, 1)

    index = 0
    seen_gpus: dict[tuple[str, int], str] = {}
    for n, node_obj in enumerate(nodes):
        node_path = f"nodes[{n}]"
        try:
            node = _as_object(node_obj, "entry")
            get_str(node, "host", required=True)
            get_str(node, "node_pool")
            gpu_list = get(node, "gpus", "array", required=True)
        except RecordError as error:
            # the node's GPUs cannot be placed: each is a rejected record (one if they cannot be counted)
            members = node_obj.get("gpus") if isinstance(node_obj, dict) else None
            for member in members if isinstance(members, list) and members else [node_obj]:
                index += 1
                rejects.add(index, f"{node_path}: {error}", compact_json(member))
            continue
        for g, gpu_obj in enumerate(gpu_list):
            index += 1
            path = f"{node_path}.gpus[{g}]"
            try:
                rows = _gpu_rows(node, gpu_obj)
                key = (rows[0]["host"], rows[0]["gpu"])
                if key in seen_gpus:
                    raise RecordError(f"duplicate GPU {key[1]} on host {key[0]} (first at {seen_gpus[key]})")
                seen_gpus[key] = path
            except RecordError as error:
                rejects.add(index, f"{path}: {error}", compact_json(gpu_obj))
                continue
            for row in rows:
                inventory.append(**row, snapshot_at=snapshot_at, source=SOURCE, source_file=source_file)

    seen_queues: dict[str, str] = {}
    for q, queue_obj in enumerate(queues):
        index += 1
        path = f"queues[{q}]"
        try:
            rows = _quota_rows(queue_obj)
            name = rows[0]["queue"]
            if name in seen_queues:
                raise RecordError(f"duplicate queue {name!r} (first at {seen_queues[name]})")
            seen_queues[name] = path
        except RecordError as error:
            rejects.add(index, f"{path}: {error}", compact_json(queue_obj))
            continue
        for row in rows:
            quotas.append(**row, snapshot_at=snapshot_at, source=SOURCE, source_file=source_file)
    return _result(tables(), rejects, source, source_file, index)
