"""Bounded pulls: what every connector that pages through an outside system's answers keeps to.

An outside system's answer is untrusted input. A pull (`Budget`) therefore has
- a deadline for the whole pull: checked between reads, and every body is read with `read1`
  (whatever the socket has, not "wait for 64 KiB"), so a server dripping a byte every 2 s cannot
  stretch it: a request starts only while time is left, its socket timeout is at most the time
  left, and the body read stops at the deadline;
- a page cap (`max_pages`) and a repeated-cursor check (`Cursor`): a server answering the same
  `next_page_token` (or `continue`, or cursor) again, or paging forever, ends the pull;
- a body size cap (`max_body_bytes`);
- a JSON depth limit (`MAX_JSON_DEPTH`): what is too deep for the parser itself (RecursionError) or
  deeper than the limit once parsed (`deeper_than`, iterative) is refused.
What breaks a bound, or an answer that is not the documented shape, is a `SourceAnswerError`
naming the endpoint and what was wrong; the connectors land nothing from a pull that raised it
(their landing files are written whole after the pull, temp file then rename), and the CLI turns
it into one line and a non-zero exit.

The one known gap: a server that drips the *headers* (before the body) is bounded by the socket
timeout per read only, as `requests` reads them (see docs/connectors.md).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import requests
import urllib3

from pipelines.connectors.http import describe

MAX_JSON_DEPTH = 64  # nesting of an answer's objects and arrays; every API we read stays under 12
MAX_PAGES = 10_000  # pages of one listing in one pull
MAX_BODY_MIB = 64.0  # one answer's body (Prometheus' query_range sets its own, larger)
PULL_DEADLINE_S = 600.0  # default time for one whole pull
_CHUNK = 64 * 1024


class SourceAnswerError(Exception):
    """An outside system's answer broke a bound or is not the documented shape: the pull fails,
    nothing lands. `endpoint` names what was asked, `what` what was wrong."""

    def __init__(self, endpoint: str, what: str):
        self.endpoint, self.what = endpoint, what
        super().__init__(f"{endpoint}: {what}")


class NotJson(SourceAnswerError):
    """The answer is not JSON at all (a login page, a proxy's error)."""


def deeper_than(value: object, limit: int) -> bool:
    """Whether a parsed JSON value nests objects and arrays more than `limit` deep (without recursing)."""
    stack: list[tuple[object, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node  # type: ignore[union-attr]
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def loads_bounded(data: bytes, endpoint: str, max_depth: int = MAX_JSON_DEPTH) -> object:
    """json.loads of an answer, refusing one nested deeper than `max_depth` and one that is not JSON;
    SourceAnswerError names the endpoint."""
    collecting = gc.isenabled()
    gc.disable()  # a collection at the parser's recursion limit would run other objects' finalizers with no
    # stack left (CI saw a weakref.finalize fail there, and pytest report it)
    try:
        value = json.loads(data)
    except RecursionError:  # the C parser stops long before a deep body costs anything
        value = _TOO_DEEP
    except ValueError:
        preview = data[:120].decode("utf-8", "replace")
        raise NotJson(endpoint, f"the answer is not JSON ({preview!r})") from None
    finally:
        if collecting:
            gc.enable()
    if value is _TOO_DEEP or deeper_than(value, max_depth):
        raise SourceAnswerError(endpoint, f"the answer is JSON nested more than {max_depth} levels deep")
    return value


_TOO_DEEP = object()


@dataclass
class Budget:
    """The bounds of one pull (module doc); `clock` is time.monotonic."""

    deadline_s: float = PULL_DEADLINE_S
    max_pages: int = MAX_PAGES
    max_body_bytes: int = int(MAX_BODY_MIB * 2**20)
    max_depth: int = MAX_JSON_DEPTH
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def deadline(self) -> float:
        return self.started + self.deadline_s

    def left(self, endpoint: str) -> float:
        """Seconds left; SourceAnswerError when none are."""
        left = self.deadline - self.clock()
        if left <= 0:
            raise SourceAnswerError(
                endpoint, f"the pull did not finish within its deadline of {self.deadline_s:g} s "
                f"(a slow or stuck server; raise the connector's deadline_s if it is only large)")
        return left

    def timeout(self, endpoint: str, per_request: float | tuple[float, float]) -> tuple[float, float]:
        """(connect, read) timeouts for a request starting now: each at most the time left."""
        connect, read = per_request if isinstance(per_request, tuple) else (per_request, per_request)
        left = self.left(endpoint)
        return min(connect, left), min(read, left)

    def read(self, response: requests.Response | urllib3.BaseHTTPResponse, endpoint: str) -> bytes:
        """The body of a `stream=True` response (or a urllib3 one not preloaded), read as it arrives
        (read1): stops at the deadline or past max_body_bytes, whatever the server's pace. Closes it."""
        raw = getattr(response, "raw", response)
        chunks, size = [], 0
        try:
            while True:
                self.left(endpoint)
                chunk = raw.read1(_CHUNK, decode_content=True)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise SourceAnswerError(
                        endpoint, f"the answer is larger than {self.max_body_bytes / 2**20:g} MiB")
                chunks.append(chunk)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            if isinstance(err, urllib3.exceptions.ReadTimeoutError) or "timed out" in str(err):
                self.left(endpoint)  # the deadline, if that is what ran out
            raise SourceAnswerError(endpoint, f"reading the answer failed: {describe(err)}") from None
        finally:
            response.close()
        return b"".join(chunks)

    def json(self, response: requests.Response, endpoint: str) -> object:
        """The body (`read`), parsed with the depth limit (`loads_bounded`)."""
        return loads_bounded(self.read(response, endpoint), endpoint, self.max_depth)

    def cursor(self, endpoint: str) -> Cursor:
        return Cursor(endpoint, self.max_pages)

    def document(self, answer: object, endpoint: str) -> object:
        """An API client's answer as JSON: a urllib3 response not preloaded (`read`, then
        `loads_bounded`), the bytes of one (`.data`), or what a client already parsed (as it is)."""
        if hasattr(answer, "read1"):
            return loads_bounded(self.read(answer, endpoint), endpoint, self.max_depth)  # type: ignore[arg-type]
        data = getattr(answer, "data", None)
        if isinstance(data, bytes | str):
            return loads_bounded(data.encode() if isinstance(data, str) else data, endpoint, self.max_depth)
        return answer


@dataclass
class Cursor:
    """Follows one listing's page tokens: `advance(token)` after each page answers whether there is
    another; a token seen before, or more than `max_pages` pages, is a SourceAnswerError."""

    endpoint: str
    max_pages: int = MAX_PAGES
    pages: int = 0
    seen: set[Hashable] = field(default_factory=set)

    def advance(self, token: object) -> bool:
        self.pages += 1
        if token in (None, "", 0) and not isinstance(token, bool):
            return False
        if not isinstance(token, str | int) or isinstance(token, bool):
            raise SourceAnswerError(self.endpoint, f"the next-page token is a {type(token).__name__}, not a string")
        if token in self.seen:
            raise SourceAnswerError(
                self.endpoint, f"the server answered a page token it gave before ({str(token)[:60]!r}): "
                "it would page forever")
        if self.pages >= self.max_pages:
            raise SourceAnswerError(self.endpoint, f"more than {self.max_pages} pages: the listing does not end")
        self.seen.add(token)
        return True
