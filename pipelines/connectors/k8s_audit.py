"""The Kubernetes audit-log webhook backend, into the landing zone.

The API server's webhook backend (`--audit-webhook-config-file`) POSTs batches of audit events as an
`audit.k8s.io/v1` `EventList`. `serve_audit_webhook` answers them: each event becomes one JSON line
in `landing/k8s_audit/<day>/webhook-<instance>.jsonl`, the day taken from the event's
stageTimestamp (else timestamp, else requestReceivedTimestamp, as the k8s_audit parser reads it;
else the day the batch arrived), where the `k8s_audit` ingest source reads it. A batch is written
whole or not at all (appended under a file lock, fsynced, truncated back on failure) before the
200, so the API server's retry of a failed batch does not leave half of it twice. 400 for a body
that is not an EventList, 401 without the bearer token (API server kubeconfig:
`users[].user.token`; the server refuses to start without one unless `insecure_no_auth`), 411/413
for a missing or oversized body or a batch of over `max_items` (an oversized body is read and
discarded first, so the client gets the answer instead of a reset connection). Items are taken one
by one: an event is written as it came (a malformed one is quarantined at ingest, with the reason);
an item that cannot be written as a line (a lone UTF-16 surrogate or bytes that are not UTF-8,
nesting deeper than `max_depth`, over `max_item_bytes`, an item that is not JSON, an EventList
inside the list) is written as a `RefusedEvent` stand-in with the reason and its start, which
ingest quarantines; the others of the batch are kept and the batch answered 200. Nothing a client
sends drops the connection unanswered. Its settings are `kubernetes.audit_webhook` in gpupool.yml.
`GET /healthz` and `GET /metrics` (counts only: pipelines/connectors/k8s_audit_metrics.py) need no token.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hmac
import http.server
import json
import logging
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pipelines.clock import utc_naive
from pipelines.connectors.bounded import deeper_than
from pipelines.connectors.k8s_audit_metrics import WebhookMetrics
from pipelines.sources.jsonl import RecordError, parse_rfc3339, plausible_time
from pipelines.sources.k8s_audit import QUARANTINE_SOURCE as AUDIT_SOURCE
from pipelines.sources.k8s_audit import REFUSED_API_VERSION, REFUSED_KIND, TIME_FIELDS

log = logging.getLogger(__name__)


class AuditBodyError(ValueError):
    """A webhook POST body that is not an audit EventList; str(error) is the 400 answer."""



def event_day(event: object, default: dt.date) -> dt.date:
    """The UTC day an audit event belongs to, read as the k8s_audit parser reads its time; a time
    outside the plausible window is passed over (a folder of year 9999 is never ingested: the event
    lands under the day the batch arrived, and its ingest quarantines it with the reason)."""
    if isinstance(event, dict):
        for name in TIME_FIELDS:
            text = event.get(name)
            if isinstance(text, str):
                try:
                    return plausible_time(parse_rfc3339(text, name), name).date()
                except RecordError:
                    continue
    return default


MAX_ITEM_BYTES = 4 * 2**20
MAX_DEPTH = 128
MAX_ITEMS = 10_000  # per batch (the API server sends 400 by default): bounds what one body can land
PREVIEW_CHARS = 2000  # the start of a refused item kept as its quarantine raw (the contract cuts raw there)
DRAIN_LIMIT = 2**30  # an oversized body up to this is read and discarded before the 413; beyond, closed


class MissingTokenError(ValueError):
    """The webhook was asked to serve without a bearer token and without insecure_no_auth."""


@dataclass(frozen=True)
class Unreadable:
    """An EventList item that could not be parsed on its own: its text and why."""

    text: str
    reason: str


@dataclass(frozen=True)
class BatchWritten:
    """What a batch became: lines per file (events and refused stand-ins), and the refused items
    as (index in the batch, reason)."""

    files: dict[str, int]
    refused: list[tuple[int, str]]


def _unicode(text: str, limit: int = PREVIEW_CHARS) -> str:
    """text cut to limit, valid Unicode: a lone surrogate (or an undecodable byte) as its escape."""
    return text[:limit].encode("utf-8", "backslashreplace").decode("utf-8")


def _text_of(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)[:PREVIEW_CHARS]
    except (RecursionError, ValueError):
        return ""


class AuditWriter:
    """Appends batches of audit events to landing/k8s_audit/<day>/webhook-<instance>.jsonl, whole or
    not at all; an item that cannot be kept as a line is written as a RefusedEvent stand-in."""

    def __init__(
        self,
        landing: Path,
        instance: str | None = None,
        *,
        max_item_bytes: int = MAX_ITEM_BYTES,
        max_depth: int = MAX_DEPTH,
    ):
        self.landing = Path(landing)
        self.instance = instance or socket.gethostname()
        self.max_item_bytes = max_item_bytes
        self.max_depth = max_depth
        self._lock = threading.Lock()

    def path(self, day: dt.date) -> Path:
        return self.landing / AUDIT_SOURCE / day.isoformat() / f"webhook-{self.instance}.jsonl"

    def _refusal(self, item: object) -> tuple[str, str] | bytes:
        """The item's line, or (reason, its text) when it cannot be kept."""
        if isinstance(item, Unreadable):
            return item.reason, item.text
        if deeper_than(item, self.max_depth):
            return f"item nested deeper than {self.max_depth} levels", _text_of(item)
        if isinstance(item, dict) and item.get("kind") == "EventList":
            return "item is an EventList inside the EventList", _text_of(item)
        try:
            text = json.dumps(item, separators=(",", ":"), ensure_ascii=False)
        except (RecursionError, ValueError) as error:
            return f"item cannot be written as JSON: {error}", ""
        try:
            line = text.encode()
        except UnicodeEncodeError as error:
            char = error.object[error.start]
            reason = f"item is not Unicode: it holds {char!r}, a lone UTF-16 surrogate (or a byte that is not UTF-8)"
            return reason, text
        if len(line) > self.max_item_bytes:
            return f"item is {len(line)} bytes, over the limit of {self.max_item_bytes}", text
        return line

    def lines(self, items: list, received: dt.datetime) -> tuple[dict[dt.date, list[bytes]], list[tuple[int, str]]]:
        """Each item's line by day (a refused one as a RefusedEvent), and the refused (index, reason)."""
        groups: dict[dt.date, list[bytes]] = {}
        refused: list[tuple[int, str]] = []
        for index, item in enumerate(items):
            outcome = self._refusal(item)
            if not isinstance(outcome, bytes):
                reason, text = _unicode(outcome[0], 500), _unicode(outcome[1])
                refused.append((index, reason))
                stand_in = {
                    "apiVersion": REFUSED_API_VERSION,
                    "kind": REFUSED_KIND,
                    "reason": reason,
                    "index": index,
                    "receivedAt": received.isoformat() + "Z",
                    "raw": text,
                }
                outcome = json.dumps(stand_in, separators=(",", ":"), ensure_ascii=False).encode()
            groups.setdefault(event_day(item, received.date()), []).append(outcome + b"\n")
        return groups, refused

    def write(self, events: list, received: dt.datetime) -> BatchWritten:
        """Write the batch (one line per item). On any failure every file is truncated back to
        where it was, and it raises."""
        groups, refused = self.lines(events, received)
        opened: list[tuple[int, int]] = []
        with self._lock:
            try:
                for day, lines in sorted(groups.items()):
                    path = self.path(day)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
                    fcntl.flock(fd, fcntl.LOCK_EX)  # other processes writing the same file
                    size = os.fstat(fd).st_size
                    opened.append((fd, size))
                    data = b"".join(lines)
                    if size and os.pread(fd, 1, size - 1) != b"\n":  # a writer died mid-line: end that line
                        data = b"\n" + data
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                for fd, _ in opened:
                    os.fsync(fd)
            except BaseException:
                for fd, size in opened:
                    os.ftruncate(fd, size)
                raise
            finally:
                for fd, _ in opened:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
        return BatchWritten({str(self.path(day)): len(lines) for day, lines in sorted(groups.items())}, refused)


_SCAN = re.compile(r'[",]|[\[{]+|[\]}]+')
_STRING_TAIL = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BLANK = re.compile(r"[ \t\r\n]*")


def _is_items_key(key: str) -> bool:
    try:
        return json.loads(key) == "items"
    except ValueError:
        return False


def split_event_list(text: str) -> tuple[str, list[str]] | None:
    """(the body with its top-level `items` array emptied, the text of each item), found by scanning
    brackets, strings and commas without parsing: one item that cannot be parsed (too deep, not JSON)
    does not take the others with it. None when the body has no such array to split."""
    depth = 0
    key: str | None = None  # the last key read in the top-level object
    in_items = False
    parts: list[str] = []
    opened_at = start = 0
    found: tuple[int, int, list[str]] | None = None
    pos = 0
    while (match := _SCAN.search(text, pos)) is not None:
        token, at, pos = match.group(), match.start(), match.end()
        first = token[0]
        if first == '"':
            tail = _STRING_TAIL.match(text, pos)
            if tail is None:
                return None  # a string that never ends
            pos = tail.end()
            if depth == 1:
                colon = _BLANK.match(text, pos).end()  # type: ignore[union-attr]
                key = text[at:pos] if text.startswith(":", colon) else None
        elif first == ",":
            if in_items and depth == 2:
                parts.append(text[start:at])
                start = pos
            elif depth == 1:
                key = None
        elif first in "[{":
            if depth == 1 and first == "[" and key is not None and _is_items_key(key):
                in_items, parts, opened_at, start = True, [], at, at + 1
            depth += len(token)
        else:
            closing = depth - 2  # the index in this run of the bracket that closes the items array
            if in_items and 0 <= closing < len(token):
                if token[closing] != "]":
                    return None
                parts.append(text[start : at + closing])
                in_items = False
                found = (opened_at, at + closing + 1, parts)
            depth -= len(token)
            if depth < 0:
                return None
    if found is None or in_items:
        return None
    begin, end, parts = found
    if len(parts) == 1 and not parts[0].strip():
        parts = []
    return text[:begin] + "[]" + text[end:], parts


def _load_item(text: str) -> object:
    try:
        return json.loads(text)
    except RecursionError:
        return Unreadable(text[:PREVIEW_CHARS], "item nested too deeply to parse")
    except ValueError as error:
        return Unreadable(text[:PREVIEW_CHARS], f"item is not JSON: {error}")


def _not_json(error: BaseException) -> str:
    if isinstance(error, RecursionError):
        return "body is not JSON this server can read: nested too deeply"
    return f"body is not JSON: {error}"


def check_event_list(body: bytes) -> list:
    """The items of an audit.k8s.io EventList body; AuditBodyError says what the body is instead.

    Bytes that are not UTF-8 are kept as lone surrogates, so that only the item holding them is
    refused. When the body does not parse as a whole, its items are split out and parsed one by
    one; an item that does not parse is returned as `Unreadable`.
    """
    text = body.decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    items: list | None = None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as error:
        split = split_event_list(text)
        if split is None:
            raise AuditBodyError(_not_json(error)) from None
        try:
            doc = json.loads(split[0])
        except (ValueError, RecursionError):
            raise AuditBodyError(_not_json(error)) from None
        items = [_load_item(part) for part in split[1]]
    if not isinstance(doc, dict):
        raise AuditBodyError(
            f"body is a JSON {type(doc).__name__}, expected an audit.k8s.io/v1 EventList object"
        )
    if doc.get("kind") != "EventList":
        raise AuditBodyError(
            f"body kind is {_unicode(repr(doc.get('kind')), 200)}, expected 'EventList' (audit.k8s.io/v1)"
        )
    api_version = doc.get("apiVersion")
    if api_version is not None and not (
        isinstance(api_version, str) and api_version.startswith("audit.k8s.io/")
    ):
        raise AuditBodyError(f"body apiVersion is {_unicode(repr(api_version), 200)}, expected audit.k8s.io/v1")
    if items is not None:
        return items
    items = doc.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise AuditBodyError("body 'items' is not a list")
    return items


def _content_length(text: str | None) -> int | None:
    """The Content-Length header as a number (None when absent or not ASCII digits; a number too long
    to be real is returned as 2**63 rather than parsed)."""
    text = (text or "").strip()
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= 18 else 2**63


class _AuditHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connection
    timeout = 120  # seconds a connection may stall mid-request
    server: AuditWebhookServer

    def _answer(self, status: int, payload: Mapping, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _send(self, status: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        self.answered = status
        self._count()  # before the answer leaves: a client holding its answer finds the request counted
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    @contextmanager
    def _measured(self) -> Iterator[None]:
        """Count the request in the server's metrics with its answer's status and the time until its answer
        was ready (counted once: when the answer is sent, else when the handler ends without one)."""
        self.started, self.answered, self.counted = time.perf_counter(), None, False
        try:
            yield
        finally:
            self._count()

    def _count(self) -> None:
        if not self.counted:
            self.counted = True
            self.server.metrics.observe(self.command, self.path, self.answered, time.perf_counter() - self.started)

    def do_GET(self) -> None:
        with self._measured():
            path = self.path.rstrip("/")
            if path in ("/healthz", "/readyz"):
                self._answer(200, {"status": "ok"})
            elif path == "/metrics":
                self._send(200, generate_latest(self.server.metrics.registry), CONTENT_TYPE_LATEST)
            else:
                self._answer(404, {"error": f"no such path {self.path}: POST audit EventLists, GET /healthz or /metrics"})

    def do_POST(self) -> None:
        with self._measured():
            try:
                self._post()
            except (TimeoutError, ConnectionError):
                self.close_connection = True  # the client stalled or went away: no one to answer
            except Exception:  # a bug: still answer, never drop the API server's connection
                log.exception("audit webhook: failed on a batch")
                self.close_connection = True
                self._answer(500, {"error": "the webhook failed on this batch; see its log"})

    def _post(self) -> None:
        server = self.server
        length = _content_length(self.headers.get("Content-Length"))
        if server.token is not None:
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {server.token}".encode()):
                self._drain(length, server.max_body_bytes)
                self._answer(401, {"error": "missing or wrong bearer token"}, {"WWW-Authenticate": "Bearer"})
                return
        if length is None:
            self.close_connection = True
            self._answer(411, {"error": "Content-Length is required"})
            return
        if length > server.max_body_bytes:
            self._drain(length, DRAIN_LIMIT)
            self.close_connection = True
            self._answer(
                413, {"error": f"body of {length} bytes is over the limit of {server.max_body_bytes}"}
            )
            return
        body = self.rfile.read(length)
        if len(body) < length:
            self.close_connection = True  # the client closed mid-body
            return
        try:
            events = check_event_list(body)
        except AuditBodyError as error:
            self._answer(400, {"error": str(error)})
            return
        if len(events) > server.max_items:
            self._answer(413, {"error": f"batch of {len(events)} items is over the limit of {server.max_items} "
                               "(the API server's --audit-webhook-batch-max-size)"})
            return
        try:
            written = server.writer.write(events, utc_naive())
        except OSError as error:
            log.error("audit webhook: could not write a batch of %d events: %s", len(events), error)
            self._answer(500, {"error": f"could not write the batch: {error}"})
            return
        server.metrics.events.inc(len(events))
        server.metrics.refused.inc(len(written.refused))
        if written.refused:
            index, reason = written.refused[0]
            log.warning(
                "audit webhook: %d of %d items refused (quarantined at ingest); item %d: %s",
                len(written.refused), len(events), index, reason,
            )
        self._answer(
            200,
            {
                "events": len(events),
                "refused": [{"index": i, "reason": r} for i, r in written.refused[:100]],
                "files": written.files,
            },
        )

    def _drain(self, length: int | None, limit: int) -> None:
        """Read and discard a body of up to limit bytes (so the client reads the answer rather than a
        reset); a longer or unknown one: close the connection after answering."""
        if length is None or length > limit:
            self.close_connection = True
            return
        left = length
        while left > 0:
            chunk = self.rfile.read(min(left, 2**20))
            if not chunk:
                self.close_connection = True
                return
            left -= len(chunk)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("audit webhook %s: " + format, self.address_string(), *args)


class AuditWebhookServer(http.server.ThreadingHTTPServer):
    """The audit webhook backend; `server_address` has the bound port (port 0 picks a free one).

    Refuses to start (MissingTokenError) without a bearer token unless insecure_no_auth=True."""

    daemon_threads = True

    def __init__(
        self,
        landing: Path,
        host: str,
        port: int,
        token: str | None = None,
        *,
        insecure_no_auth: bool = False,
        instance: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        max_body_bytes: int = 64 * 2**20,
        max_item_bytes: int = MAX_ITEM_BYTES,
        max_depth: int = MAX_DEPTH,
        max_items: int = MAX_ITEMS,
    ):
        token = (token or "").strip() or None
        if token is None and not insecure_no_auth:
            raise MissingTokenError(
                "the audit webhook needs a bearer token (set $GPUPOOL_AUDIT_TOKEN or "
                "kubernetes.audit_webhook.token); to accept any client, pass insecure_no_auth"
            )
        super().__init__((host, port), _AuditHandler)
        self.writer = AuditWriter(landing, instance, max_item_bytes=max_item_bytes, max_depth=max_depth)
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.max_items = max_items
        self.metrics = WebhookMetrics()
        if token is None:
            log.warning("audit webhook WITHOUT authentication: any client that reaches it may POST events")
        if certfile:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certfile, keyfile)
            self.socket = context.wrap_socket(self.socket, server_side=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        scheme = "https" if isinstance(self.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://{host}:{port}/"


def serve_audit_webhook(
    landing: Path, host: str, port: int, token: str | None = None, **options: object
) -> None:
    """Serve the audit webhook until interrupted (options: insecure_no_auth, instance, certfile,
    keyfile, max_body_bytes, max_item_bytes, max_depth, max_items)."""
    server = AuditWebhookServer(Path(landing), host, port, token, **options)  # type: ignore[arg-type]
    log.info("audit webhook listening on %s, writing to %s", server.url, Path(landing) / AUDIT_SOURCE)
    try:
        server.serve_forever()
    finally:
        server.server_close()
