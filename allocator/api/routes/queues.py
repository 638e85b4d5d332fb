"""Queues: the ones a caller may see or submit to, and an admin's change to a queue's rules."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response

from allocator.api.bodies import QueuePatch
from allocator.api.deps import Admin, Anyone, QueueName, SettingsDep, StoreDep, answer
from allocator.api.wire import StrictJSONRoute
from allocator.store import queue_view

router = APIRouter(route_class=StrictJSONRoute)


@router.get("/v1/queues")
def list_queues(who: Anyone, store: StoreDep) -> dict:
    with store.lock:
        queues = [
            q
            for q in store.engine.queues.values()
            if who.sees_tenant(q.tenant) or who.tenant in q.shared_with or "*" in q.shared_with
        ]
        return {"queues": [queue_view(q, store.engine.usage(q.name)) for q in queues]}


@router.patch("/v1/queues/{name}")
def update_queue(
    name: QueueName, body: QueuePatch, who: Admin, store: StoreDep, settings: SettingsDep
) -> Response:
    changes = body.model_dump(mode="json", exclude_unset=True)
    with store.lock:
        if name not in store.engine.queues:
            raise HTTPException(404, f"queue {name} not found")
        payload = {"queue": name, "changes": changes, "actor_role": who.role.value}
        return answer(store.execute("update_queue", payload, who.name, settings.clock()))
