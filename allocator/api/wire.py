"""What goes in and out: request bodies parsed as strict JSON, answers that always render, and the
answers to refused requests."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from allocator.access import note_refusal
from allocator.inputs import dumps_safe, parse_strict_json


class StrictJSONRequest(Request):
    """A request whose JSON body is parsed strictly (`allocator.inputs.parse_strict_json`): NaN,
    Infinity, lone surrogates, non-UTF-8 bytes and deep nesting are refused (422) before validation."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_strict_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """The route class of every router: its handler reads the body as a `StrictJSONRequest`."""

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


def http_error(request: Request, exc: StarletteHTTPException) -> Response:
    note_refusal(request, exc)  # what the access log says beyond the answer
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    return SafeJSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def invalid_request(request: Request, exc: RequestValidationError) -> Response:
    return SafeJSONResponse({"detail": jsonable_encoder(exc.errors())}, status_code=422)
