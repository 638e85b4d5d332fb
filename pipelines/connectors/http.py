"""The HTTP plumbing the connectors share: sessions, status errors and the bounded retry.

Every HTTP client (scrape, prometheus, slurmrestd, the allocator) uses one `requests.Session`
with a connection pool sized for its concurrency, per-request timeouts, and the retry below:
retried are connection failures (refused, reset, connect timeout) and 5xx answers, never 4xx
(the request itself is wrong; asking again gives the same answer) nor a read timeout (a slow
server asked again is slow again, and the round's time is spent).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import requests
import urllib3
from requests.adapters import HTTPAdapter

T = TypeVar("T")
USER_AGENT = "gpupool-connector/1"


class HttpStatusError(Exception):
    """A response other than 200; `body` is the start of what the server said."""

    def __init__(self, url: str, status: int, reason: str, body: str = ""):
        self.url, self.status, self.reason, self.body = url, status, reason, body
        detail = f": {body.strip()}" if body.strip() else ""
        super().__init__(f"{url}: HTTP {status} {reason}{detail}")


@dataclass(frozen=True)
class RetryPolicy:
    """At most `retries` more attempts, waiting backoff_s, 2 x backoff_s, ... (capped) between them."""

    retries: int = 2
    backoff_s: float = 0.25
    max_backoff_s: float = 5.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the failed attempt number `attempt` (0-based)."""
        return min(self.backoff_s * 2**attempt, self.max_backoff_s)


def is_read_timeout(exc: BaseException) -> bool:
    """A read timeout, whether requests raised it as ReadTimeout (waiting for the headers) or as
    ConnectionError wrapping urllib3's ReadTimeoutError (while streaming the body)."""
    if isinstance(exc, requests.ReadTimeout):
        return True
    return isinstance(exc, requests.ConnectionError) and any(
        isinstance(arg, urllib3.exceptions.ReadTimeoutError) for arg in exc.args
    )


def describe(exc: BaseException, limit: int = 500) -> str:
    """The innermost useful message: requests wraps urllib3's reason in two layers of repr."""
    reason: object = exc
    while isinstance(reason, requests.RequestException) and reason.args:
        inner = reason.args[0]
        reason = getattr(inner, "reason", inner)
        if isinstance(reason, str):
            break
    text = str(reason) or type(reason).__name__
    if ": " in text and text.startswith("<"):  # "<urllib3.connection.HTTPConnection object at 0x..>: ..."
        text = text.split(": ", 1)[1]
    return text[:limit]


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, HttpStatusError):
        return exc.status >= 500
    return isinstance(exc, requests.ConnectionError) and not is_read_timeout(exc)


def with_retries(
    attempt: Callable[[], T],
    policy: RetryPolicy,
    *,
    deadline: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """(attempt()'s result, attempts made). Retries what `is_retryable` allows, while a retry can
    still start before `deadline` (time.monotonic()); otherwise the last error is raised."""
    for n in range(policy.retries + 1):
        try:
            return attempt(), n + 1
        except Exception as exc:
            if n == policy.retries or not is_retryable(exc):
                raise
            delay = policy.delay(n)
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise
            sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")


def new_session(pool_maxsize: int, pool_connections: int = 10) -> requests.Session:
    """A Session whose adapter keeps `pool_connections` host pools of `pool_maxsize` connections
    each (urllib3 pools per scheme/host/port). Retries are ours, not urllib3's."""
    session = requests.Session()
    adapter = HTTPAdapter(
        pool_connections=max(pool_connections, 1), pool_maxsize=max(pool_maxsize, 1), max_retries=0
    )
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = USER_AGENT
    return session
