"""The engine's event and audit logs by cursor; a tenant member reads its tenant's records."""

from __future__ import annotations

from fastapi import APIRouter

from allocator.api.bodies import Page
from allocator.api.deps import Anyone, Cursor, Limit, StoreDep, tenant_filter
from allocator.api.wire import StrictJSONRoute

router = APIRouter(route_class=StrictJSONRoute)


@router.get("/v1/events", response_model=Page)
def events(
    who: Anyone,
    store: StoreDep,
    cursor: Cursor = 0,
    limit: Limit = 1000,
) -> Page:
    records, next_cursor = store.events(cursor, limit, tenant_filter(who))
    return Page(records=records, next_cursor=next_cursor)


@router.get("/v1/audit", response_model=Page)
def audit(
    who: Anyone,
    store: StoreDep,
    cursor: Cursor = 0,
    limit: Limit = 1000,
) -> Page:
    records, next_cursor = store.audit(cursor, limit, tenant_filter(who))
    return Page(records=records, next_cursor=next_cursor)
