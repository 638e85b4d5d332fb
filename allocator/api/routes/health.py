"""`/healthz`: open to anyone, it says the service answers and how far its store got."""

from __future__ import annotations

from fastapi import APIRouter

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
