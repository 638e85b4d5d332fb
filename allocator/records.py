"""The allocator's records in the formats the pipeline ingests (models/contracts/allocator_logs.md).

- `job_event(...)`: one `gpupool.event/v1` object; `audit_record(...)`: one `gpupool.audit/v1`
  object; `artifact_record(...)`: one `gpupool.artifact/v1` object (a checkpoint, artifact or
  model version a job reported); `pool_snapshot(...)`: the `gpupool.pool/v1` document. Fields that are None are left out
  (the parser treats a missing optional field as null).
- Sinks receive records as the engine makes them: `MemorySink` keeps them in lists;
  `JsonlDaySink(root)` appends them to `root/allocator_events/<YYYY-MM-DD>/events.jsonl`,
  `root/allocator_audit/<YYYY-MM-DD>/audit.jsonl` and
  `root/allocator_artifacts/<YYYY-MM-DD>/artifacts.jsonl`, by the UTC day of the record's `ts` (the landing
  layout). It buffers lines per file and writes them in chunks (a simulated month is some 10^5
  lines); `flush()` writes what is buffered and `close()` flushes. Files are opened in append mode,
  so a sink over an existing landing folder adds to it.

Ids are not made here: the engine numbers events, audit and artifact records (`ev-000000001`,
`au-000000001`, `ar-000000001`) so that a simulation is reproducible and ids never repeat across a restart.
"""
from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Protocol, Self

from allocator.model import PoolConfig, QueueSpec, ShareMode

EVENT_SCHEMA = "gpupool.event/v1"
AUDIT_SCHEMA = "gpupool.audit/v1"
POOL_SCHEMA = "gpupool.pool/v1"
ARTIFACT_SCHEMA = "gpupool.artifact/v1"
EVENTS_SOURCE = "allocator_events"
AUDIT_SOURCE = "allocator_audit"
POOL_SOURCE = "allocator_pool"
ARTIFACTS_SOURCE = "allocator_artifacts"
ARTIFACT_KINDS = ("checkpoint", "artifact", "model_version")
ARTIFACT_STATUSES = ("ok", "failed")


class RecordSink(Protocol):
    def event(self, record: dict) -> None: ...  # one gpupool.event/v1 object

    def audit(self, record: dict) -> None: ...  # one gpupool.audit/v1 object

    def artifact(self, record: dict) -> None: ...  # one gpupool.artifact/v1 object


def rfc3339(t: dt.datetime) -> str:
    """A naive UTC datetime as RFC 3339 with Z (microseconds only when there are some)."""
    if t.tzinfo is not None:
        t = t.astimezone(dt.UTC).replace(tzinfo=None)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{t.microsecond:06d}Z" if t.microsecond else f"{text}Z"


def _drop_none(record: dict) -> dict:
    return {k: v for k, v in record.items() if v is not None}


def job_event(event_id: str, ts: dt.datetime, event_type: str, job_id: str, attempt: int, **fields: object) -> dict:
    """One gpupool.event/v1 object; `fields` are the type's fields (tenant, gpus, state, reason, ...)."""
    record = {"schema": EVENT_SCHEMA, "event_id": event_id, "ts": rfc3339(ts), "type": event_type,
              "job_id": job_id, "attempt": attempt, **fields}
    return _drop_none(record)


def audit_record(
    audit_id: str,
    ts: dt.datetime,
    actor: str,
    action: str,
    object_kind: str,
    object_name: str,
    decision: str,
    *,
    actor_role: str | None = None,
    object_namespace: str | None = None,
    before: dict | None = None,
    after: dict | None = None,
    reason: str | None = None,
    request_id: str | None = None,
    idempotency_key: str | None = None,
) -> dict:
    """One gpupool.audit/v1 object."""
    record = {
        "schema": AUDIT_SCHEMA, "audit_id": audit_id, "ts": rfc3339(ts), "actor": actor, "actor_role": actor_role,
        "action": action, "object_kind": object_kind, "object_namespace": object_namespace,
        "object_name": object_name, "before": before, "after": after, "decision": decision,
        "reason": reason or None, "request_id": request_id, "idempotency_key": idempotency_key,
    }
    return _drop_none(record)


def artifact_record(
    artifact_id: str,
    ts: dt.datetime,
    job_id: str,
    attempt: int,
    kind: str,
    status: str,
    *,
    location: str | None = None,
    size_bytes: int | None = None,
    training_step: int | None = None,
    model_name: str | None = None,
    model_version: str | None = None,
    reported_by: str | None = None,
) -> dict:
    """One gpupool.artifact/v1 object; `ts` is when the checkpoint or artifact was written."""
    record = {
        "schema": ARTIFACT_SCHEMA, "artifact_id": artifact_id, "ts": rfc3339(ts), "job_id": job_id,
        "attempt": attempt, "kind": kind, "status": status, "location": location, "size_bytes": size_bytes,
        "training_step": training_step, "model_name": model_name, "model_version": model_version,
        "reported_by": reported_by,
    }
    return _drop_none(record)


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(float(value), 6)


def queue_snapshot(queue: QueueSpec, quota: Mapping[str, float] | None = None) -> dict:
    """A queue as the pool snapshot lists it. A queue without quota lists 0 for each of its models
    (the format needs at least one model in `quota`)."""
    quota = dict(queue.quota if quota is None else quota)
    for model in queue.gpu_models:
        quota.setdefault(model, 0)
    return _drop_none({
        "queue": queue.name, "tenant": queue.tenant, "priority": queue.priority,
        "preemptible": queue.preemptible, "max_gpus_per_request": queue.max_gpus_per_request,
        "max_runtime_s": queue.max_runtime_s, "retry_budget": queue.retry_budget,
        "quota": {m: _number(v) for m, v in sorted(quota.items())},
        "low_priority": queue.low_priority, "can_borrow": queue.can_borrow,
        "templates": [str(t) for t in queue.templates], "shared_with": list(queue.shared_with) or None,
    })


def pool_snapshot(pool: PoolConfig, engine_quotas: Mapping[str, Mapping[str, float]] | None,
                  at: dt.datetime) -> dict:
    """The `gpupool.pool/v1` document: the pool's GPUs and its queues with the quotas in force.

    `engine_quotas` maps queue name to quota per GPU model (the engine's current quotas, after
    approved changes); a queue it does not name keeps the quota of `pool`. Pass the engine's
    `current_pool()` as `pool` to list queue settings changed since start (priority, limits).
    """
    engine_quotas = engine_quotas or {}
    nodes = []
    for node in pool.nodes:
        gpus = []
        for g in node.gpus:
            entry: dict = {"gpu": g.index, "uuid": g.uuid, "gpu_model": g.gpu_model, "model_name": g.model.model_name,
                           "memory_mib": g.model.memory_mib, "share_mode": str(g.share_mode)}
            if g.share_mode == ShareMode.MIG:
                entry["instances"] = [
                    {"gpu_instance_id": s.gpu_instance_id, "profile": s.profile, "memory_mib": s.memory_mib,
                     "fraction": round(s.fraction, 6)}
                    for s in g.slots()
                ]
            elif g.share_mode == ShareMode.TIMESLICE:
                entry["replicas"] = g.replicas
            gpus.append(entry)
        nodes.append(_drop_none({"host": node.host, "node_pool": node.node_pool, "gpus": gpus}))
    return {
        "schema": POOL_SCHEMA,
        "snapshot_at": rfc3339(at),
        "nodes": nodes,
        "queues": [queue_snapshot(q, engine_quotas.get(q.name)) for q in pool.queues],
        "prices_per_gpu_hour": {m: _number(p) for m, p in sorted(pool.prices_per_gpu_hour.items())},
    }


def dumps(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


class MemorySink:
    """Keeps every record in order: `events`, `audits` and `artifacts`. `drain()` hands the events
    and audit records over and starts afresh, `drain_artifacts()` the artifact records (the store
    holds a command's records so until they are committed)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.audits: list[dict] = []
        self.artifacts: list[dict] = []

    def event(self, record: dict) -> None:
        self.events.append(record)

    def audit(self, record: dict) -> None:
        self.audits.append(record)

    def artifact(self, record: dict) -> None:
        self.artifacts.append(record)

    def drain(self) -> tuple[list[dict], list[dict]]:
        events, audits = self.events, self.audits
        self.events, self.audits = [], []
        return events, audits

    def drain_artifacts(self) -> list[dict]:
        artifacts, self.artifacts = self.artifacts, []
        return artifacts

    def events_jsonl(self) -> str:
        return "".join(dumps(r) + "\n" for r in self.events)

    def audits_jsonl(self) -> str:
        return "".join(dumps(r) + "\n" for r in self.audits)


class JsonlDaySink:
    """Appends records to the daily landing files under `root`, buffered; `close()` flushes."""

    FILES: ClassVar[dict[str, tuple[str, str]]] = {
        "event": (EVENTS_SOURCE, "events.jsonl"),
        "audit": (AUDIT_SOURCE, "audit.jsonl"),
        "artifact": (ARTIFACTS_SOURCE, "artifacts.jsonl"),
    }

    def __init__(self, root: Path | str, buffer_lines: int = 20_000) -> None:
        self.root = Path(root)
        self.buffer_lines = buffer_lines
        self._buffers: dict[tuple[str, str], list[str]] = defaultdict(list)
        self._buffered = 0
        self.paths: set[Path] = set()  # every file written to

    def path(self, kind: str, day: str) -> Path:
        source, name = self.FILES[kind]
        return self.root / source / day / name

    def _add(self, kind: str, record: dict) -> None:
        ts = record.get("ts")
        if not isinstance(ts, str) or len(ts) < 10:
            record_id = record.get("event_id") or record.get("audit_id") or record.get("artifact_id")
            raise ValueError(f"{kind} record {record_id}: no 'ts' to file it by")
        self._buffers[(kind, ts[:10])].append(dumps(record))
        self._buffered += 1
        if self._buffered >= self.buffer_lines:
            self.flush()

    def event(self, record: dict) -> None:
        self._add("event", record)

    def audit(self, record: dict) -> None:
        self._add("audit", record)

    def artifact(self, record: dict) -> None:
        self._add("artifact", record)

    def flush(self) -> None:
        for (kind, day), lines in self._buffers.items():
            if not lines:
                continue
            path = self.path(kind, day)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
            self.paths.add(path)
        self._buffers.clear()
        self._buffered = 0

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_pool_snapshot(root: Path | str, snapshot: dict) -> Path:
    """Writes a snapshot to `root/allocator_pool/<day of snapshot_at>/pool.json`."""
    path = Path(root) / POOL_SOURCE / snapshot["snapshot_at"][:10] / "pool.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(snapshot, indent=1) + "\n", encoding="utf-8")
    return path
