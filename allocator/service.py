"""The allocator's HTTP service: `create_app` assembles the API of `allocator.api` (its settings, one
router per resource, strict JSON in and safe JSON out, the access log of refused requests) over a
store; `serve` runs it.

Every mutation goes through `Store.execute`, which logs and commits it before the answer; the
scheduler runs with each one and a background timer runs the engine's timers (run-time caps,
preemption grace, reservations).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException

from allocator.access import AccessLog
from allocator.api.docs_page import add_docs_page
from allocator.api.routes import admin, artifacts, events, health, jobs, nodes, queues
from allocator.api.settings import Settings, utcnow
from allocator.api.wire import SafeJSONResponse, http_error, invalid_request
from allocator.auth import TokenTable, load_tokens
from allocator.inputs import MAX_BODY_BYTES
from allocator.metrics import AllocatorMetrics, RequestMetrics
from allocator.model import PoolConfig
from allocator.store import Store
from allocator.telemetry import ActivityProfile

log = logging.getLogger(__name__)

# every router of the API, in the order their routes are matched
ROUTERS = (
    health.router, jobs.router, artifacts.router, admin.router, queues.router, nodes.router, events.router
)


class _AllocatorAPI(FastAPI):
    """FastAPI with the request metrics (`allocator.metrics`) and the access log (`allocator.access`)
    around everything else, so that they see every answer, the 413 of the body limit included; the log
    names callers from the settings' tokens."""

    def build_middleware_stack(self):
        stack = AccessLog(super().build_middleware_stack(), self.state.settings.tokens)
        return RequestMetrics(stack, self.state.metrics)


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
    settings = Settings(
        tokens=tokens if tokens is not None else load_tokens(),
        clock=clock,
        tick_interval_s=tick_interval_s,
        profiles=profiles,
    )
    store.sync_principals(
        [{"name": p.name, "role": p.role.value, "tenant": p.tenant} for p in settings.tokens.principals()],
        clock(),
    )
    app = _AllocatorAPI(
        title="gpupool allocator",
        version="1",
        docs_url=None,  # Swagger UI and ReDoc load from a public CDN: add_docs_page serves an offline page
        redoc_url=None,
        lifespan=_lifespan,
        max_body_size=MAX_BODY_BYTES,  # 413 beyond, before the body is parsed
        default_response_class=SafeJSONResponse,
        exception_handlers={StarletteHTTPException: http_error, RequestValidationError: invalid_request},
    )
    app.state.store = store
    app.state.settings = settings
    app.state.metrics = AllocatorMetrics(store)
    for router in ROUTERS:
        app.include_router(router)
    add_docs_page(app)
    return app


def api_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route of the API's routers, in the order they are matched."""
    return [
        (method, route.path)
        for route in iter_route_contexts(app.routes)
        if isinstance(route.original_route, APIRoute)  # not the docs' own routes
        for method in sorted(route.methods or ())
    ]


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI):
    store: Store = app.state.store
    settings: Settings = app.state.settings
    interval = settings.tick_interval_s
    task = asyncio.create_task(_ticker(store, settings.clock, interval)) if interval else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # here, not after uvicorn.run: uvicorn re-raises SIGTERM once the app has shut down
        await asyncio.to_thread(store.checkpoint)


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
