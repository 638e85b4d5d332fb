"""The API's route table: what `create_app` assembles from the routers of `allocator/api/routes/`."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.routing import APIRoute, iter_route_contexts

from allocator.api.wire import StrictJSONRoute
from allocator.auth import parse_tokens
from allocator.service import api_routes, create_app
from allocator.store import Store
from tests.allocator.conftest import T0, small_pool

TOKENS = {"admin-token-0123456789abcdef": {"role": "admin", "name": "alice"}}

EXPECTED = {
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    # jobs
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{job_id}"),
    ("POST", "/v1/jobs/{job_id}/cancel"),
    ("POST", "/v1/jobs/{job_id}/finish"),
    # artifacts
    ("POST", "/v1/jobs/{job_id}/artifacts"),
    ("GET", "/v1/artifacts"),
    # admin
    ("POST", "/v1/actions"),
    ("GET", "/v1/proposals"),
    ("POST", "/v1/proposals/{proposal_id}/approve"),
    # queues
    ("GET", "/v1/queues"),
    ("PATCH", "/v1/queues/{name}"),
    # nodes
    ("GET", "/v1/pool"),
    ("GET", "/v1/nodes"),
    ("GET", "/nodes/{host}/metrics"),
    # events
    ("GET", "/v1/events"),
    ("GET", "/v1/audit"),
}


def _app(tmp_path: Path):
    store = Store(tmp_path / "allocator.db", small_pool())
    return store, create_app(store, parse_tokens(json.dumps(TOKENS), "t"), clock=lambda: T0, tick_interval_s=None)


def test_the_app_serves_exactly_the_routes_of_every_router(tmp_path: Path) -> None:
    """A router left out of the assembly, a route lost or a route added unannounced fails here."""
    store, app = _app(tmp_path)
    try:
        routes = api_routes(app)
        assert len(routes) == len(set(routes)), f"a route is served twice: {sorted(routes)}"
        assert set(routes) == EXPECTED
    finally:
        store.close()


def test_every_route_reads_its_body_as_strict_json(tmp_path: Path) -> None:
    """A router made without `route_class=StrictJSONRoute` would take NaN and lone surrogates."""
    store, app = _app(tmp_path)
    try:
        lenient = [
            route.path
            for route in iter_route_contexts(app.routes)
            if isinstance(route.original_route, APIRoute) and not isinstance(route.original_route, StrictJSONRoute)
        ]
        assert lenient == []
    finally:
        store.close()
