"""Jobs: submit, list, read, cancel, and the report that one finished by itself."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response

from allocator.api.bodies import JobCancel, JobFinish, JobSubmit
from allocator.api.deps import (
    Anyone,
    Enforcer,
    IdempotencyKey,
    JobId,
    Limit,
    NameFilter,
    SettingsDep,
    StateFilter,
    StoreDep,
    Submitter,
    answer,
    request_key,
    visible_job,
)
from allocator.api.wire import SafeJSONResponse, StrictJSONRoute
from allocator.auth import Role
from allocator.store import job_view

router = APIRouter(route_class=StrictJSONRoute)


@router.post("/v1/jobs", status_code=201)
def submit(
    body: JobSubmit,
    who: Submitter,
    store: StoreDep,
    settings: SettingsDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    spec = body.model_dump(mode="json")
    if who.role == Role.TENANT_MEMBER:
        if spec["tenant"] not in (None, who.tenant):
            raise HTTPException(403, f"{who.name} may submit only to tenant {who.tenant}")
        if spec["user"] not in (None, who.name):
            raise HTTPException(403, f"{who.name} may submit only as itself")
        spec["tenant"] = who.tenant
    elif spec["tenant"] is None:
        with store.lock:
            queue = store.engine.queues.get(spec["queue"])
        if queue is None:  # the engine's rule, answered here: without a queue there is no tenant
            return SafeJSONResponse(
                {"rule": "queue.unknown", "message": f"queue {spec['queue']!r} does not exist"},
                status_code=422,
            )
        spec["tenant"] = queue.tenant
    spec["user"] = spec["user"] or who.name
    key = request_key(who, idempotency_key)
    result = store.execute("submit", {"spec": spec}, who.name, settings.clock(), key)
    return answer(result, 201)


@router.get("/v1/jobs")
def list_jobs(
    who: Anyone,
    store: StoreDep,
    state: StateFilter = None,
    queue: NameFilter = None,
    tenant: NameFilter = None,
    limit: Limit = 1000,
) -> dict:
    if who.role == Role.TENANT_MEMBER:
        if tenant not in (None, who.tenant):
            return {"jobs": [], "count": 0}
        tenant = who.tenant
    states = set(state or ())
    with store.lock:
        jobs = [
            j
            for j in store.engine.jobs.values()
            if (not states or j.state in states)
            and (queue is None or j.spec.queue == queue)
            and (tenant is None or j.spec.tenant == tenant)
        ]
        return {"jobs": [job_view(j) for j in jobs[:limit]], "count": len(jobs)}


@router.get("/v1/jobs/{job_id}")
def get_job(job_id: JobId, who: Anyone, store: StoreDep) -> dict:
    with store.lock:
        return job_view(visible_job(store, who, job_id))


@router.post("/v1/jobs/{job_id}/cancel")
def cancel(
    job_id: JobId,
    who: Submitter,
    store: StoreDep,
    settings: SettingsDep,
    body: JobCancel | None = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    with store.lock:
        visible_job(store, who, job_id)
        payload = {"job_id": job_id, "reason": (body or JobCancel()).reason}
        key = request_key(who, idempotency_key)
        return answer(store.execute("cancel", payload, who.name, settings.clock(), key))


@router.post("/v1/jobs/{job_id}/finish")
def finish(
    job_id: JobId,
    body: JobFinish,
    who: Enforcer,
    store: StoreDep,
    settings: SettingsDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    with store.lock:
        visible_job(store, who, job_id)
        payload = {"job_id": job_id, **body.model_dump(mode="json")}
        key = request_key(who, idempotency_key)
        return answer(store.execute("finish", payload, who.name, settings.clock(), key))
