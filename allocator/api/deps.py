"""What the routes share: who is asking, the store and the settings (from `app.state`), the path and
query parameters, and the answer to a command.

Roles (`allocator.auth`): an admin does everything; the governance bot reads everything, sends
enforcement actions and reports finished work; a tenant member sees and changes only its tenant's
jobs, and another tenant's job answers 404 on every route, with the very body an unknown id gets
(`visible_job`), so that neither ids nor their tenants leak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from allocator.access import Refusal
from allocator.api.settings import Settings
from allocator.api.wire import SafeJSONResponse
from allocator.auth import Principal, Role, TokenTable
from allocator.inputs import MAX_CURSOR, MAX_NAME
from allocator.model import Job, JobState
from allocator.store import CommandResult, Store

# Route modules import these names at run time, not under TYPE_CHECKING: FastAPI resolves their
# postponed annotations in the module's globals.


async def store_of(request: Request) -> Store:
    return request.app.state.store


async def settings_of(request: Request) -> Settings:
    return request.app.state.settings


StoreDep = Annotated[Store, Depends(store_of)]
SettingsDep = Annotated[Settings, Depends(settings_of)]

# -- who is asking ------------------------------------------------------------------------------

bearer = HTTPBearer(auto_error=False, description="a token of $GPUPOOL_ALLOCATOR_TOKENS or the tokens file")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def principal(request: Request, credentials: Credentials) -> Principal:
    """The caller: 401 without a bearer token or with one that is not configured."""
    if credentials is None:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    return request_principal(request.app.state.settings.tokens, credentials)


def request_principal(tokens: TokenTable, credentials: HTTPAuthorizationCredentials) -> Principal:
    """The holder of a presented bearer token; 401 if it is not configured."""
    found = tokens.authenticate(credentials.credentials)
    if found is None:
        raise HTTPException(401, "invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
    return found


def role(*allowed: Role) -> Callable[..., Principal]:
    """A dependency that lets only `allowed` roles through (403 for the others)."""

    def check(who: Annotated[Principal, Depends(principal)]) -> Principal:
        if who.role not in allowed:
            needed = " or ".join(allowed)
            raise HTTPException(403, f"role {who.role.value} may not do this (needs {needed})")
        return who

    return check


Anyone = Annotated[Principal, Depends(principal)]
Submitter = Annotated[Principal, Depends(role(Role.ADMIN, Role.TENANT_MEMBER))]
Enforcer = Annotated[Principal, Depends(role(Role.ADMIN, Role.GOVERNANCE_BOT))]
Admin = Annotated[Principal, Depends(role(Role.ADMIN))]


def tenant_filter(who: Principal) -> str | None:
    """The tenant a listing is limited to: a tenant member's own; none for the other roles."""
    return who.tenant if who.role == Role.TENANT_MEMBER else None


# -- parameters ---------------------------------------------------------------------------------

JobId = Annotated[str, PathParam(min_length=1, max_length=MAX_NAME)]
ProposalId = Annotated[str, PathParam(min_length=1, max_length=MAX_NAME)]
QueueName = Annotated[str, PathParam(min_length=1, max_length=MAX_NAME)]
HostName = Annotated[str, PathParam(min_length=1, max_length=MAX_NAME)]
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=MAX_NAME)]
Cursor = Annotated[
    int, Query(ge=0, le=MAX_CURSOR, description="the next_cursor of the previous page; 0 for the start")
]
Limit = Annotated[int, Query(ge=1, le=10000)]
NameFilter = Annotated[str | None, Query(min_length=1, max_length=MAX_NAME)]
StateFilter = Annotated[list[JobState] | None, Query(max_length=len(JobState))]


# -- jobs and commands --------------------------------------------------------------------------


def visible_job(store: Store, who: Principal, job_id: str) -> Job:
    """The job if the caller may see it; 404 otherwise, for unknown and foreign jobs alike: the same
    status and body, so a tenant member cannot tell another tenant's job from no job. Only the
    access log says that it was another tenant's. Called under `store.lock`, with the command it
    guards."""
    job = store.engine.jobs.get(job_id)
    if job is None:
        raise HTTPException(404, f"job {job_id} not found")
    if not who.sees_tenant(job.spec.tenant):
        raise Refusal(
            404,
            f"job {job_id} not found",
            note=f"job of another tenant ({job.spec.tenant}), answered as unknown",
        )
    return job


def request_key(who: Principal, key: str | None) -> str | None:
    """The store's idempotency key: the caller's `Idempotency-Key`, per caller."""
    return f"{who.name}:{key}" if key else None


def answer(result: CommandResult, ok_status: int = 200) -> Response:
    """A committed command's answer; a replay says so in `Idempotent-Replayed`."""
    status = ok_status if result.status == 200 else result.status
    headers = {"Idempotent-Replayed": "true"} if result.replayed else None
    # the command is committed: this answer must not fail (SafeJSONResponse escapes what it cannot send)
    return SafeJSONResponse(result.body, status_code=status, headers=headers)
