"""The allocator's HTTP API (FastAPI): jobs, their checkpoint and artifact reports, enforcement actions,
queues, nodes and their drains, the logs by cursor, node metrics.

Roles (see `allocator.auth`): an admin does everything; the governance bot reads everything, sends
enforcement actions and reports finished work; a tenant member sees and changes only its tenant's
jobs, and another tenant's job answers 404 on every route, with the very body an unknown id gets, so
that neither ids nor their tenants leak. Every refused request is logged with the token holder's name
(`allocator.access`), never the token. Every mutation goes through
`Store.execute`, which logs and commits it before the answer; the scheduler runs with each one and
a background timer runs the engine's timers (run-time caps, preemption grace, reservations).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from allocator.access import AccessLog, Refusal, note_refusal
from allocator.artifacts import MAX_BIGINT
from allocator.auth import Principal, Role, TokenTable, load_tokens
from allocator.inputs import (
    MAX_BODY_BYTES,
    MAX_CURSOR,
    MAX_LIST,
    MAX_NAME,
    MAX_PRIORITY,
    MAX_REPLICAS,
    MAX_RETRY_BUDGET,
    Evidence,
    Flag,
    Gpus,
    Name,
    Quota,
    Seconds,
    Text,
    dumps_safe,
    parse_strict_json,
)
from allocator.model import NODE_ACTIONS, ActionKind, JobState, PoolConfig, ShareMode, Template, drain_target
from allocator.records import pool_snapshot
from allocator.store import CommandResult, Store, job_view, queue_view
from allocator.telemetry import ActivityProfile, render_node_metrics

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


# -- request bodies ------------------------------------------------------------------------------


class _Body(BaseModel):
    # a misspelt field is an error, not silently ignored; the field types are allocator.inputs' strict,
    # bounded ones, so nothing reaches the store that it could not log and answer (issue 11)
    model_config = ConfigDict(extra="forbid")


class JobSubmit(_Body):
    """A job to submit. `tenant` defaults to the queue's (admin) or the caller's (tenant member);
    `user` to the caller's name."""

    queue: Name
    template: Template
    gpu_model: Name
    tenant: Name | None = None
    user: Name | None = None
    gpus: Gpus = 1
    share_mode: ShareMode = ShareMode.WHOLE
    mig_profile: Name | None = None
    job_name: Annotated[Text, Field(max_length=MAX_NAME)] = ""
    expected_runtime_s: Seconds | None = None
    checkpoint_policy: Name | None = None
    min_replicas: Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)] | None = None
    rollback: Name | None = None
    reservation: Name | None = None
    time_limit_s: Seconds | None = None
    idle_reminder_s: Seconds | None = None


class JobCancel(_Body):
    reason: Text = ""


class JobFinish(_Body):
    """A node agent's report that the work ended by itself."""

    state: JobState = JobState.COMPLETED
    exit_code: Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)] | None = 0
    reason: Text | None = None

    @model_validator(mode="after")
    def _final(self) -> JobFinish:
        if not self.state.is_final:
            raise ValueError(f"state must be a final state, not {self.state.value}")
        return self


class ArtifactReportBody(_Body):
    """A checkpoint, artifact or registered model version the job wrote. The engine checks the rest
    (`allocator.artifacts`: model fields of the kind, the attempt, the time)."""

    kind: Literal["checkpoint", "artifact", "model_version"]
    status: Literal["ok", "failed"] = "ok"
    location: Text | None = None  # URI or path
    size_bytes: Annotated[StrictInt, Field(ge=0, le=MAX_BIGINT)] | None = None
    training_step: Annotated[StrictInt, Field(ge=0, le=MAX_BIGINT)] | None = None
    written_at: dt.datetime | None = None  # RFC 3339; without an offset it is UTC; default now
    attempt: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = None  # default the running/last attempt
    model_name: Name | None = None  # kind model_version
    model_version: Name | None = None

    @field_validator("written_at")
    @classmethod
    def _utc(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is None or value.tzinfo is None:
            return value
        try:
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        except OverflowError:
            raise ValueError("written_at is out of range once converted to UTC") from None

    def payload(self) -> dict:
        """As the store logs it: written_at as naive UTC ISO text."""
        out = self.model_dump(mode="json")
        if self.written_at is not None:
            out["written_at"] = self.written_at.isoformat()
        return out


class ActionRequest(_Body):
    """An enforcement action; the idempotency key makes a repeat answer `already_done`."""

    kind: ActionKind
    idempotency_key: Name
    target: Name  # a job id; for quota_change a queue name; for drain/undrain a node or node/gpu
    reason: Text = ""
    policy: Name | None = None
    policy_version: Name | None = None
    evidence: Evidence = Field(default_factory=dict)
    runtime_s: Seconds | None = None
    quota: Quota | None = None
    dry_run: Flag = False

    @model_validator(mode="after")
    def _fields_of_kind(self) -> ActionRequest:
        if self.kind == ActionKind.CAP_RUNTIME and self.runtime_s is None:
            raise ValueError("cap_runtime needs runtime_s")
        if self.kind == ActionKind.QUOTA_CHANGE and not self.quota:
            raise ValueError("quota_change needs quota (GPUs per GPU model)")
        if self.kind in NODE_ACTIONS:
            if self.runtime_s is not None or self.quota is not None:
                raise ValueError(f"{self.kind.value} takes no runtime_s or quota")
            drain_target(self.target)  # its ValueError says the form expected
        return self


class QueuePatch(_Body):
    """An admin change to a queue's rules; only the fields given change."""

    quota: Quota | None = None
    priority: Annotated[StrictInt, Field(ge=0, le=MAX_PRIORITY)] | None = None
    preemptible: Flag | None = None
    max_gpus_per_request: Gpus | None = None
    max_runtime_s: Seconds | None = None
    retry_budget: Annotated[StrictInt, Field(ge=0, le=MAX_RETRY_BUDGET)] | None = None
    can_borrow: Flag | None = None
    templates: Annotated[list[Template], Field(max_length=len(Template))] | None = None
    gpu_models: Annotated[list[Name], Field(max_length=MAX_LIST)] | None = None
    # tenants that may also submit here; ["*"] for all
    shared_with: Annotated[list[Name], Field(max_length=MAX_LIST)] | None = None

    @model_validator(mode="after")
    def _something(self) -> QueuePatch:
        if not self.model_fields_set:
            raise ValueError("no field to change")
        return self


# -- responses -----------------------------------------------------------------------------------


class Page(BaseModel):
    """Records with seq > cursor, oldest first; ask again with `cursor=next_cursor`."""

    records: list[dict[str, Any]]
    next_cursor: int


# -- who is asking ------------------------------------------------------------------------------
# Module level: with postponed annotations FastAPI resolves these names in the module's globals.

_bearer = HTTPBearer(auto_error=False, description="a token of $GPUPOOL_ALLOCATOR_TOKENS or the tokens file")


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """The caller: 401 without a bearer token or with one that is not configured."""
    if credentials is None:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    return request_principal(request.app.state.tokens, credentials)


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


# -- what goes in and out ------------------------------------------------------------------------


class StrictJSONRequest(Request):
    """A request whose JSON body is parsed strictly (`allocator.inputs.parse_strict_json`): NaN,
    Infinity, lone surrogates, non-UTF-8 bytes and deep nesting are refused (422) before validation."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_strict_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict


class SafeJSONResponse(JSONResponse):
    """JSON whose rendering cannot fail on a lone surrogate or a NaN (`allocator.inputs.dumps_safe`
    escapes them): the answer to a committed command is always sent."""

    def render(self, content: Any) -> bytes:
        return dumps_safe(content)


def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    note_refusal(request, exc)  # what the access log says beyond the answer
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    return SafeJSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def _invalid_request(request: Request, exc: RequestValidationError) -> Response:
    return SafeJSONResponse({"detail": jsonable_encoder(exc.errors())}, status_code=422)


# -- the app -------------------------------------------------------------------------------------


class _AllocatorAPI(FastAPI):
    """FastAPI with the access log (`allocator.access`) around everything else, so that it sees every
    answer, the 413 of the body limit included; it names callers from `state.tokens`."""

    def build_middleware_stack(self):
        return AccessLog(super().build_middleware_stack(), self.state.tokens)


def create_app(
    store: Store,
    tokens: TokenTable | None = None,
    *,
    clock: Callable[[], dt.datetime] = utcnow,
    tick_interval_s: float | None = 1.0,
    profiles: Mapping[str, ActivityProfile] | None = None,
) -> FastAPI:
    """The API over `store`. Tokens default to $GPUPOOL_ALLOCATOR_TOKENS. `clock` gives the engine's
    `now` (tz-naive UTC); `tick_interval_s=None` turns the background timer off (tests tick by hand).
    Creating the app audits any change of who holds tokens (permission.grant / permission.revoke)."""
    tokens = tokens if tokens is not None else load_tokens()
    store.sync_principals(
        [{"name": p.name, "role": p.role.value, "tenant": p.tenant} for p in tokens.principals()], clock()
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        task = asyncio.create_task(_ticker(store, clock, tick_interval_s)) if tick_interval_s else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # here, not after uvicorn.run: uvicorn re-raises SIGTERM once the app has shut down
            await asyncio.to_thread(store.checkpoint)

    app = _AllocatorAPI(
        title="gpupool allocator",
        version="1",
        lifespan=lifespan,
        max_body_size=MAX_BODY_BYTES,  # 413 beyond, before the body is parsed
        default_response_class=SafeJSONResponse,
        exception_handlers={StarletteHTTPException: _http_error, RequestValidationError: _invalid_request},
    )
    app.router.route_class = StrictJSONRoute
    app.state.tokens = tokens

    def visible_job(who: Principal, job_id: str):
        """The job if the caller may see it; 404 otherwise, for unknown and foreign jobs alike: the same
        status and body, so a tenant member cannot tell another tenant's job from no job. Only the
        access log says that it was another tenant's."""
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

    def answer(result: CommandResult, ok_status: int = 200) -> Response:
        status = ok_status if result.status == 200 else result.status
        headers = {"Idempotent-Replayed": "true"} if result.replayed else None
        # the command is committed: this answer must not fail (SafeJSONResponse escapes what it cannot send)
        return SafeJSONResponse(result.body, status_code=status, headers=headers)

    def request_key(who: Principal, key: str | None) -> str | None:
        return f"{who.name}:{key}" if key else None

    @app.get("/healthz")
    def healthz() -> dict:
        with store.lock:
            return {
                "status": "ok",
                "commands": store.command_count(),
                "jobs": len(store.engine.jobs),
                "replayed_at_start": store.replayed_commands,
                "replay_divergences": store.replay_divergences,
            }

    @app.post("/v1/jobs", status_code=201)
    def submit(body: JobSubmit, who: Submitter, idempotency_key: IdempotencyKey = None) -> Response:
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
        result = store.execute("submit", {"spec": spec}, who.name, clock(), request_key(who, idempotency_key))
        return answer(result, 201)

    @app.get("/v1/jobs")
    def list_jobs(
        who: Anyone,
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

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: JobId, who: Anyone) -> dict:
        with store.lock:
            return job_view(visible_job(who, job_id))

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel(
        job_id: JobId, who: Submitter, body: JobCancel | None = None, idempotency_key: IdempotencyKey = None
    ) -> Response:
        with store.lock:
            visible_job(who, job_id)
            payload = {"job_id": job_id, "reason": (body or JobCancel()).reason}
            return answer(
                store.execute("cancel", payload, who.name, clock(), request_key(who, idempotency_key))
            )

    @app.post("/v1/jobs/{job_id}/finish")
    def finish(
        job_id: JobId, body: JobFinish, who: Enforcer, idempotency_key: IdempotencyKey = None
    ) -> Response:
        with store.lock:
            visible_job(who, job_id)
            payload = {"job_id": job_id, **body.model_dump(mode="json")}
            return answer(
                store.execute("finish", payload, who.name, clock(), request_key(who, idempotency_key))
            )

    @app.post("/v1/jobs/{job_id}/artifacts", status_code=201)
    def report_artifact(
        job_id: JobId, body: ArtifactReportBody, who: Submitter, idempotency_key: IdempotencyKey = None
    ) -> Response:
        """A job reports a checkpoint, artifact or model version: its tenant's token or an admin's."""
        with store.lock:
            visible_job(who, job_id)  # another tenant's job is 404, as on every route
            payload = {"job_id": job_id, "report": body.payload(), "reported_by": who.name}
            return answer(
                store.execute("artifact", payload, who.name, clock(), request_key(who, idempotency_key)), 201
            )

    @app.post("/v1/actions")
    def action(body: ActionRequest, who: Enforcer) -> Response:
        payload = {
            "action": {**body.model_dump(mode="json"), "actor": who.name},
            "actor_role": who.role.value,
        }
        return answer(store.execute("action", payload, who.name, clock()))

    @app.get("/v1/proposals")
    def list_proposals(who: Enforcer) -> dict:
        """Quota-change proposals, pending and approved."""
        with store.lock:
            return {"proposals": [{"proposal_id": pid, **p} for pid, p in store.engine.proposals().items()]}

    @app.post("/v1/proposals/{proposal_id}/approve")
    def approve(proposal_id: ProposalId, who: Admin) -> Response:
        with store.lock:
            if proposal_id not in store.engine.proposals():
                raise HTTPException(404, f"proposal {proposal_id} not found")
            payload = {"proposal_id": proposal_id, "actor_role": who.role.value}
            return answer(store.execute("approve", payload, who.name, clock()))

    @app.get("/v1/queues")
    def list_queues(who: Anyone) -> dict:
        with store.lock:
            queues = [
                q
                for q in store.engine.queues.values()
                if who.sees_tenant(q.tenant) or who.tenant in q.shared_with or "*" in q.shared_with
            ]
            return {"queues": [queue_view(q, store.engine.usage(q.name)) for q in queues]}

    @app.patch("/v1/queues/{name}")
    def update_queue(name: QueueName, body: QueuePatch, who: Admin) -> Response:
        changes = body.model_dump(mode="json", exclude_unset=True)
        with store.lock:
            if name not in store.engine.queues:
                raise HTTPException(404, f"queue {name} not found")
            payload = {"queue": name, "changes": changes, "actor_role": who.role.value}
            return answer(store.execute("update_queue", payload, who.name, clock()))

    @app.get("/v1/pool")
    def pool(who: Anyone) -> dict:
        with store.lock:
            return pool_snapshot(store.engine.current_pool(), None, store.now(clock()))

    @app.get("/v1/nodes")
    def nodes(who: Anyone) -> dict:
        """The pool's nodes and GPUs with their drains: `drained` on a GPU is true when it or its node
        is drained (it takes no new work); `drain` says how that target itself was drained."""
        with store.lock:
            drained = store.engine.drained()
        out = []
        for node in store.pool.nodes:
            node_drain = drained.get(node.host)
            gpus = []
            for g in node.gpus:
                drain = drained.get(f"{node.host}/{g.index}")
                gpus.append(
                    {
                        "gpu": g.index,
                        "uuid": g.uuid,
                        "gpu_model": g.gpu_model,
                        "drained": bool(drain or node_drain),
                        "drain": drain,
                    }
                )
            out.append(
                {
                    "host": node.host,
                    "node_pool": node.node_pool,
                    "drained": node_drain is not None,
                    "drain": node_drain,
                    "gpus": gpus,
                }
            )
        return {"nodes": out}

    @app.get("/v1/events", response_model=Page)
    def events(
        who: Anyone,
        cursor: Cursor = 0,
        limit: Limit = 1000,
    ) -> Page:
        records, next_cursor = store.events(
            cursor, limit, who.tenant if who.role == Role.TENANT_MEMBER else None
        )
        return Page(records=records, next_cursor=next_cursor)

    @app.get("/v1/audit", response_model=Page)
    def audit(
        who: Anyone,
        cursor: Cursor = 0,
        limit: Limit = 1000,
    ) -> Page:
        records, next_cursor = store.audit(
            cursor, limit, who.tenant if who.role == Role.TENANT_MEMBER else None
        )
        return Page(records=records, next_cursor=next_cursor)

    @app.get("/v1/artifacts", response_model=Page)
    def artifacts(
        who: Anyone,
        cursor: Cursor = 0,
        limit: Limit = 1000,
    ) -> Page:
        """Checkpoint and artifact records (gpupool.artifact/v1) by cursor; a tenant member sees its tenant's."""
        records, next_cursor = store.artifacts(
            cursor, limit, who.tenant if who.role == Role.TENANT_MEMBER else None
        )
        return Page(records=records, next_cursor=next_cursor)

    @app.get("/nodes/{host}/metrics", response_class=PlainTextResponse)
    def node_metrics(
        host: HostName, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> PlainTextResponse:
        """dcgm-exporter's exposition of one node as it is now. Open like the real exporter, but job ids
        are tenants' data: without a token no series names its job (`hpc_job`); an admin's or the
        governance bot's token names every job, a tenant member's its tenant's jobs only. A token that
        is not configured is 401, so a scraper with a wrong token fails loudly instead of losing labels."""
        who = None
        if credentials is not None:
            who = request_principal(tokens, credentials)
        if host not in {n.host for n in store.pool.nodes}:
            raise HTTPException(404, f"node {host} not found")

        def show_job(job) -> bool:
            return who is not None and who.sees_tenant(job.spec.tenant)

        with store.lock:
            holders = dict(store.engine.holders())
            text = render_node_metrics(
                store.pool, holders, host, store.now(clock()), profiles=profiles, show_job=show_job
            )
        return PlainTextResponse(text, media_type=METRICS_CONTENT_TYPE)

    return app


async def _ticker(store: Store, clock: Callable[[], dt.datetime], interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await asyncio.to_thread(store.tick, clock())
        except Exception:  # a failed tick must not stop the timer; the next one retries
            log.exception("allocator tick failed")


def load_pool_config(pool_path: Path | str | None) -> PoolConfig:
    from allocator.pool import default_pool, load_pool

    return load_pool(Path(pool_path)) if pool_path else default_pool()


def serve(
    db_path: Path | str,
    pool_path: Path | str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    tokens_path: Path | str | None = None,
    *,
    tick_interval_s: float = 1.0,
    snapshot_every: int = 500,
) -> None:
    """Run the allocator service until interrupted; a clean stop snapshots the engine."""
    import uvicorn

    # the access log of refused requests (allocator.access) and the tick's failures go to stderr,
    # unless the embedding process configured logging itself (basicConfig leaves that alone)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tokens = load_tokens(tokens_path)
    store = Store(db_path, load_pool_config(pool_path), snapshot_every=snapshot_every)
    try:
        app = create_app(store, tokens, tick_interval_s=tick_interval_s)
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
    finally:
        store.close()
