"""Enforcement actions (admin or governance bot) and quota-change proposals (approved by an admin)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response

from allocator.api.bodies import ActionRequest
from allocator.api.deps import Admin, Enforcer, ProposalId, SettingsDep, StoreDep, answer
from allocator.api.wire import StrictJSONRoute

router = APIRouter(route_class=StrictJSONRoute)


@router.post("/v1/actions")
def action(body: ActionRequest, who: Enforcer, store: StoreDep, settings: SettingsDep) -> Response:
    payload = {
        "action": {**body.model_dump(mode="json"), "actor": who.name},
        "actor_role": who.role.value,
    }
    return answer(store.execute("action", payload, who.name, settings.clock()))


@router.get("/v1/proposals")
def list_proposals(who: Enforcer, store: StoreDep) -> dict:
    """Quota-change proposals, pending and approved."""
    with store.lock:
        return {"proposals": [{"proposal_id": pid, **p} for pid, p in store.engine.proposals().items()]}


@router.post("/v1/proposals/{proposal_id}/approve")
def approve(proposal_id: ProposalId, who: Admin, store: StoreDep, settings: SettingsDep) -> Response:
    with store.lock:
        if proposal_id not in store.engine.proposals():
            raise HTTPException(404, f"proposal {proposal_id} not found")
        payload = {"proposal_id": proposal_id, "actor_role": who.role.value}
        return answer(store.execute("approve", payload, who.name, settings.clock()))
