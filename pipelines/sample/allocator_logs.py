"""The workload as the allocator writes it: gpupool.event/v1, gpupool.audit/v1 and gpupool.pool/v1.

Formats: models/contracts/allocator_logs.md. Records are few (hundreds a day), so they are built as
dicts and serialised with json; the bulk telemetry is in telemetry.py.
"""
from __future__ import annotations

import datetime as dt
import json

from pipelines.sample.pool import NODES, QUEUES
from pipelines.sample.workload import AuditRecord, Job

EVENT_SCHEMA = "gpupool.event/v1"
AUDIT_SCHEMA = "gpupool.audit/v1"
POOL_SCHEMA = "gpupool.pool/v1"


def rfc3339(t: dt.datetime, millis: bool = False) -> str:
    if millis:
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def dumps(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def _drop_none(record: dict) -> dict:
    return {k: v for k, v in record.items() if v is not None}


def _job_events(job: Job) -> list[tuple[dt.datetime, str, dict]]:
    """(time, type, fields) of every event of a job, in the order the allocator writes them."""
    out = [(job.submit_at, "submit", {
        "attempt": 1, "tenant": job.tenant, "queue": job.queue, "user": job.user, "job_name": job.job_name,
        "template": job.template, "gpu_model": job.gpu_model, "gpus": job.gpus, "share_mode": job.share_mode,
        "mig_profile": job.mig_profile, "priority": job.priority, "spec": job.spec,
    })]
    for a in job.attempts:
        out.append((a.admit_at, "admit", {"attempt": a.number}))
        out.append((a.start_at, "start", {"attempt": a.number, "gpus": [s.placement() for s in a.slots]}))
        if a.ending:
            e = a.ending
            out.append((e.at, e.event, {"attempt": a.number, "state": e.state, "reason": e.reason,
                                        "exit_code": e.exit_code}))
    return out


def event_records(jobs: tuple[Job, ...], window_end: dt.datetime) -> list[tuple[dt.datetime, dict]]:
    """Every event before window_end as (time, record), ordered by time, with sequential event ids.

    Ids are assigned in time order over the whole workload, so a longer window keeps the ids of the
    days it shares with a shorter one.
    """
    raw = [(t, i, kind, job.job_id, fields)
           for job in jobs for i, (t, kind, fields) in enumerate(_job_events(job))]
    raw.sort(key=lambda r: (r[0], r[3], r[1]))
    out = []
    for n, (t, _, kind, job_id, fields) in enumerate(raw, start=1):
        if t >= window_end:
            continue
        record = {"schema": EVENT_SCHEMA, "event_id": f"ev-{n:09d}", "ts": rfc3339(t), "type": kind,
                  "job_id": job_id, **fields}
        out.append((t, _drop_none(record)))
    return out


def audit_records(audit: tuple[AuditRecord, ...], window_end: dt.datetime) -> list[tuple[dt.datetime, dict]]:
    ordered = sorted(audit, key=lambda a: a.at)
    out = []
    for n, a in enumerate(ordered, start=1):
        if a.at >= window_end:
            continue
        record = {
            "schema": AUDIT_SCHEMA, "audit_id": f"au-{n:06d}", "ts": rfc3339(a.at, millis=True),
            "actor": a.actor, "actor_role": a.actor_role, "action": a.action, "object_kind": a.object_kind,
            "object_namespace": a.object_namespace, "object_name": a.object_name, "before": a.before,
            "after": a.after, "decision": a.decision, "reason": a.reason, "request_id": a.request_id,
            "idempotency_key": a.idempotency_key,
        }
        out.append((a.at, _drop_none(record)))
    return out


def pool_snapshot(at: dt.datetime, audit: tuple[AuditRecord, ...]) -> dict:
    """The pool at `at`: fixed nodes, and queue quotas with every allowed quota.update before `at` applied."""
    quotas = {q.queue: dict(q.quota) for q in QUEUES}
    for a in sorted(audit, key=lambda a: a.at):
        if a.action == "quota.update" and a.decision == "allow" and a.at < at and a.after:
            quotas[a.object_name] = dict(a.after["quota"])
    return {
        "schema": POOL_SCHEMA,
        "snapshot_at": rfc3339(at),
        "nodes": [{"host": n.host, "node_pool": n.node_pool, "gpus": [g.snapshot() for g in n.gpus]} for n in NODES],
        "queues": [q.snapshot(quotas[q.queue]) for q in QUEUES],
    }
