"""Artifacts: a job's reports of checkpoints, artifacts and model versions, and their log by cursor."""

from __future__ import annotations

from fastapi import APIRouter, Response

from allocator.api.bodies import ArtifactReportBody, Page
from allocator.api.deps import (
    Anyone,
    Cursor,
    IdempotencyKey,
    JobId,
    Limit,
    SettingsDep,
    StoreDep,
    Submitter,
    answer,
    request_key,
    tenant_filter,
    visible_job,
)
from allocator.api.wire import StrictJSONRoute

router = APIRouter(route_class=StrictJSONRoute)


@router.post("/v1/jobs/{job_id}/artifacts", status_code=201)
def report_artifact(
    job_id: JobId,
    body: ArtifactReportBody,
    who: Submitter,
    store: StoreDep,
    settings: SettingsDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """A job reports a checkpoint, artifact or model version: its tenant's token or an admin's."""
    with store.lock:
        visible_job(store, who, job_id)  # another tenant's job is 404, as on every route
        payload = {"job_id": job_id, "report": body.payload(), "reported_by": who.name}
        key = request_key(who, idempotency_key)
        return answer(store.execute("artifact", payload, who.name, settings.clock(), key), 201)


@router.get("/v1/artifacts", response_model=Page)
def artifacts(
    who: Anyone,
    store: StoreDep,
    cursor: Cursor = 0,
    limit: Limit = 1000,
) -> Page:
    """Checkpoint and artifact records (gpupool.artifact/v1) by cursor; a tenant member sees its tenant's."""
    records, next_cursor = store.artifacts(cursor, limit, tenant_filter(who))
    return Page(records=records, next_cursor=next_cursor)
