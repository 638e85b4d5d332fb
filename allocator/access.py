"""The allocator API's log of refused requests (logger `allocator.access`).

Every request answered 4xx (401, 403, 404, 405, 409, 413, 422) is logged as one line, before the
last byte of the answer is sent: who asked (the token holder's `name`, role and tenant from the
token configuration; "no token" or "unknown token" otherwise, never the token or its digest), the
method, the path, the status and the reason the caller was given. A route may add a `note` for the
operator that the caller is not told (`Refusal`): another tenant's job is answered 404 as if it did
not exist, and the log says whose it is, so that a tenant probing for ids shows up here.

401, 403 and 404 are logged at WARNING (who may do what, and what they looked for); the other
refusals (a malformed body, a conflict, a body too large) at INFO. Answered requests are not
logged. Text that came from the request (the path, reasons that echo it) is written as JSON
strings, so a newline in a path cannot forge a line.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import HTTPException, Request
from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from allocator.auth import TokenTable

ACCESS_LOGGER = "allocator.access"
MAX_LOGGED_CHARS = 500  # each text field of a log line (path, reason, note); longer ones are cut
MAX_LOGGED_BODY_BYTES = 16 * 1024  # of a refused answer, read for its reason
WARNING_STATUSES = frozenset({401, 403, 404})  # access control; the other 4xx are logged at INFO

log = logging.getLogger(ACCESS_LOGGER)

_SCOPE_KEY = "gpupool.access"  # the request's own dict, where a route leaves its note


class Refusal(HTTPException):
    """An HTTPException whose `note` goes to the access log only: what the caller is not told."""

    def __init__(self, status_code: int, detail: str, note: str, headers: dict[str, str] | None = None):
        super().__init__(status_code, detail, headers=headers)
        self.note = note


def note_refusal(request: Request, exc: Exception) -> None:
    """Keep a Refusal's note for the log line of this request (the exception handler calls this)."""
    holder = request.scope.get(_SCOPE_KEY)
    if isinstance(exc, Refusal) and holder is not None:
        holder["note"] = exc.note


def who_asked(tokens: TokenTable, authorization: str | None) -> dict[str, str | None]:
    """The token holder as the log names it: name, role, tenant. No token material leaves here."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not authorization or scheme.lower() != "bearer" or not credentials:
        return {"holder": "no token", "role": None, "tenant": None}
    found = tokens.authenticate(credentials)
    if found is None:
        return {"holder": "unknown token", "role": None, "tenant": None}
    return {"holder": found.name, "role": found.role.value, "tenant": found.tenant}


def reason_of(body: bytes) -> str:
    """What the refused answer told the caller: its `detail`, a rule and message, or field errors
    (location and message; never the input, which may be anything the caller sent)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()
    if not isinstance(data, dict):
        return ""
    detail = data.get("detail")
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in detail
            if isinstance(e, dict)
        )
    if detail is not None:
        return str(detail)
    if "rule" in data:
        return f"{data['rule']}: {data.get('message', '')}"
    return ""


def _text(value: str | None) -> str:
    """A JSON string (quoted, control characters escaped), cut to MAX_LOGGED_CHARS."""
    if value is None:
        return "-"
    cut = value if len(value) <= MAX_LOGGED_CHARS else value[:MAX_LOGGED_CHARS] + "…"
    return json.dumps(cut)


def log_refusal(fields: dict[str, Any]) -> None:
    """One line for one refused request; `fields` also travel as the record's `access` attribute."""
    message = (
        f"refused {fields['status']} {fields['method']} {_text(fields['path'])} "
        f"holder={_text(fields['holder'])} role={fields['role'] or '-'} tenant={_text(fields['tenant'])} "
        f"reason={_text(fields['reason'])}"
    )
    if fields.get("note"):
        message += f" note={_text(fields['note'])}"
    level = logging.WARNING if fields["status"] in WARNING_STATUSES else logging.INFO
    log.log(level, "%s", message, extra={"access": fields})


class AccessLog:
    """ASGI middleware: logs each refused (4xx) request of the app, as the module docstring says."""

    def __init__(self, app: ASGIApp, tokens: TokenTable):
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        mine: dict[str, Any] = {}
        scope[_SCOPE_KEY] = mine
        status = 0
        body = bytearray()

        async def logging_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and 400 <= status < 500:
                if len(body) < MAX_LOGGED_BODY_BYTES:
                    body.extend(message.get("body", b"")[: MAX_LOGGED_BODY_BYTES - len(body)])
                if not message.get("more_body", False):
                    self._log(scope, status, bytes(body), mine.get("note"))
            await send(message)

        await self.app(scope, receive, logging_send)

    def _log(self, scope: Scope, status: int, body: bytes, note: str | None) -> None:
        try:
            # the first Authorization header, as the API reads it
            raw = next((v for k, v in scope.get("headers") or () if k.lower() == b"authorization"), b"")
            authorization = raw.decode("latin-1") or None
            fields = {
                "status": status,
                "method": scope.get("method", ""),
                "path": scope.get("path", ""),
                **who_asked(self.tokens, authorization),
                "reason": reason_of(body),
                "note": note,
            }
            log_refusal(fields)
        except Exception:  # the log must never stop an answer
            log.exception("could not log a refused request")
