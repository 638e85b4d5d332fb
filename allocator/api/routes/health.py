"""`/healthz` and `/metrics`: open to anyone, like a Prometheus scrape. `/healthz` says the service
answers and how far its store got; `/metrics` holds counts only (`allocator.metrics`): no job, user
or tenant is named there, so it needs no token (docs/operators.md, "Metrics and alerts")."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from allocator.api.deps import StoreDep
from allocator.api.wire import StrictJSONRoute

router = APIRouter(route_class=StrictJSONRoute)


@router.get("/healthz")
def healthz(store: StoreDep) -> dict:
    with store.lock:
        return {
            "status": "ok",
            "commands": store.command_count(),
            "jobs": len(store.engine.jobs),
            "replayed_at_start": store.replayed_commands,
            "replay_divergences": store.replay_divergences,
        }


@router.get("/metrics", response_class=Response, include_in_schema=False)
def metrics(request: Request) -> Response:
    """The app's registry in Prometheus' text format."""
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
