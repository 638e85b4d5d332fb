"""The Kubernetes audit webhook cannot be broken by what a client sends (issue 11, section 3).

One bad item of an EventList (a lone surrogate, nesting 100,000 deep, an item over the size
limit) no longer costs the whole batch: the good items land, the bad one lands as a RefusedEvent
that ingest quarantines with the reason, and the API server gets its 200. A body that is not an
EventList gets a 400, an oversized one a 413, never a dropped connection; the server refuses to
start without a bearer token unless --insecure-no-auth, and then says so loudly. Real loopback
HTTP, as in tests/kubernetes/test_audit_webhook.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from pipelines.connectors.k8s_audit import AuditWebhookServer, MissingTokenError
from pipelines.ingest import ingest_partition
from pipelines.paths import REPO_ROOT
from tests.kubernetes.webhook import running_webhook

pytestmark = pytest.mark.slow  # hostile batches through the webhook and the ingest

TOKEN = "audit-webhook-hostile-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
ENVELOPE = '{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[%s]}'


def serve(landing: Path, **options):
    return running_webhook(landing, options.pop("token", TOKEN), **{"instance": "test", **options})


@pytest.fixture
def webhook(warehouse) -> Iterator[AuditWebhookServer]:
    with serve(warehouse.landing, max_item_bytes=64 * 1024) as server:
        yield server


@pytest.fixture
def events(real_data) -> list[dict]:
    """The real events of 2018-10-26 (one landing day, one ingest)."""
    lines = (real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, filter(str.strip, lines)) if e["stageTimestamp"].startswith("2018-10-26")]


def batch(*items: str) -> bytes:
    """An EventList of item texts, written as the JSON text given (which json.dumps may not write)."""
    return (ENVELOPE % ",".join(items)).encode("utf-8", "surrogateescape")


def ingest_all(warehouse) -> tuple[int, int, int, list[str]]:
    """Ingest every day the webhook landed; (read, loaded, quarantined, quarantine reasons)."""
    days = sorted(p.name for p in (warehouse.landing / "k8s_audit").iterdir())
    reports = [ingest_partition(warehouse, "k8s_audit", dt.date.fromisoformat(day)) for day in days]
    for report in reports:
        assert report.records_read == report.records_loaded + report.records_quarantined, report.summary()
    with warehouse.connect(read_only=True) as con:
        reasons = [r for (r,) in con.execute("select reason from ops.quarantine order by reason").fetchall()]
    return (
        sum(r.records_read for r in reports),
        sum(r.records_loaded for r in reports),
        sum(r.records_quarantined for r in reports),
        reasons,
    )


def post_keeps_good_items(webhook, warehouse, events, bad_item: str, reason: str) -> None:
    good = [json.dumps(e) for e in events[:3]]
    response = requests.post(webhook.url, data=batch(good[0], bad_item, good[1], good[2]), headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["events"] == 4
    assert [r["index"] for r in answer["refused"]] == [1]
    assert reason in answer["refused"][0]["reason"]
    read, loaded, quarantined, reasons = ingest_all(warehouse)
    assert (read, loaded, quarantined) == (4, 3, 1)
    assert len(reasons) == 1 and reason in reasons[0] and reasons[0].startswith("refused by the audit webhook")
    with warehouse.connect(read_only=True) as con:
        ids = sorted(r for (r,) in con.execute("select audit_id from raw.audit_events").fetchall())
    assert ids == sorted(e["auditID"] for e in events[:3])


def test_a_lone_surrogate_item_is_quarantined_and_the_others_kept(webhook, warehouse, events):
    hostile = json.dumps({**events[3], "user": {"username": "\ud800"}})  # ensure_ascii writes "\ud800"
    assert "\\ud800" in hostile
    post_keeps_good_items(webhook, warehouse, events, hostile, "lone UTF-16 surrogate")


def test_bytes_that_are_not_utf8_cost_only_their_item(webhook, warehouse, events):
    hostile = json.dumps(events[3]).replace("system:", "sys\udcfftem:", 1)  # a raw 0xff byte in the body
    post_keeps_good_items(webhook, warehouse, events, hostile, "not Unicode")


def test_an_item_nested_100000_deep_is_quarantined_and_the_others_kept(webhook, warehouse, events):
    post_keeps_good_items(webhook, warehouse, events, "[" * 100_000 + "]" * 100_000, "nested too deeply")


def test_an_item_nested_past_the_depth_limit_is_quarantined(warehouse, events):
    with serve(warehouse.landing, max_depth=20) as server:
        deep = {**events[3], "requestObject": json.loads('{"a":' * 30 + "1" + "}" * 30)}
        post_keeps_good_items(server, warehouse, events, json.dumps(deep), "nested deeper than 20 levels")


def test_an_oversized_item_is_quarantined_and_the_others_kept(webhook, warehouse, events):
    big = json.dumps({**events[3], "requestObject": {"blob": "x" * 100_000}})
    post_keeps_good_items(webhook, warehouse, events, big, "over the limit of 65536")


def test_an_item_that_is_not_json_is_quarantined_and_the_others_kept(webhook, warehouse, events):
    post_keeps_good_items(webhook, warehouse, events, '{"auditID": 12345678901234567890' + "9" * 5000 + "}",
                          "item is not JSON")


def test_an_oversized_body_is_413_not_a_reset_connection(warehouse, events):
    with serve(warehouse.landing, max_body_bytes=1 * 2**20) as server:
        body = batch(*[json.dumps({**events[0], "requestObject": {"blob": "x" * 2**20}})] * 8)  # 8 MiB
        response = requests.post(server.url, data=body, headers=HEADERS, timeout=30)
        assert response.status_code == 413
        assert "over the limit of 1048576" in response.json()["error"]
        # the server still answers the next batch
        ok = requests.post(server.url, data=batch(json.dumps(events[0])), headers=HEADERS, timeout=30)
        assert ok.status_code == 200
    assert ingest_all(warehouse)[:3] == (1, 1, 0)


def raw_request(url: str, head: bytes, body: bytes = b"") -> bytes:
    """Send bytes as they are (requests would fix the headers) and read the status line."""
    host, port = url.split("//")[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head + b"\r\n\r\n" + body)
        return conn.makefile("rb").readline()


@pytest.mark.parametrize(
    ("length", "status"),
    [(b"9" * 5000, b"413"), ("\u00b2".encode("latin-1"), b"411"), (b"-1", b"411"), (b"", b"411"), (b"1e3", b"411")],
    ids=["5000-digits", "superscript-two", "negative", "empty", "exponent"],
)
def test_a_hostile_content_length_is_answered(webhook, length, status):
    head = b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: " + length
    assert raw_request(webhook.url, head, b"{}").split()[1] == status
    unauthenticated = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + length
    assert raw_request(webhook.url, unauthenticated, b"{}").split()[1] == b"401"


def test_a_batch_of_too_many_items_is_413(warehouse, events):
    with serve(warehouse.landing, max_items=100) as server:
        response = requests.post(server.url, data=batch(*['"\\ud800"'] * 101), headers=HEADERS, timeout=30)
        assert response.status_code == 413 and "101 items is over the limit of 100" in response.json()["error"]
        assert requests.post(server.url, data=batch(*['"\\ud800"'] * 100), headers=HEADERS, timeout=30).ok
    assert ingest_all(warehouse)[:3] == (100, 0, 100)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe\x00garbage",
        b"[" * 100_000,
        b"{" * 100_000,
        b'{"kind": "EventList", "items": [' + b"[" * 100_000,
        b'{"kind": "EventList", "metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b', "items": []}',
        b'{"kind": "Event\xff", "items": []}',
        b'{"kind": "EventList", "items": [{}]} trailing',
        b"",
    ],
    ids=["text", "bytes", "deep-list", "deep-object", "unterminated-deep", "deep-metadata", "kind-bytes",
         "trailing", "empty"],
)
def test_a_body_that_is_not_an_event_list_is_a_clear_400(webhook, warehouse, body):
    response = requests.post(webhook.url, data=body, headers=HEADERS, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"].startswith("body ")
    assert not (warehouse.landing / "k8s_audit").exists()


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer nope", f"bearer {TOKEN}", f"Token {TOKEN}", f"Bearer {TOKEN} ", f"Bearer {TOKEN[:-1]}", "Bearer "],
)
def test_a_wrong_token_is_401_and_lands_nothing(webhook, warehouse, events, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    response = requests.post(webhook.url, data=batch("[" * 100_000 + "]" * 100_000), headers=headers, timeout=30)
    assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer"
    assert not (warehouse.landing / "k8s_audit").exists()


def test_the_server_will_not_start_without_a_token(warehouse):
    for token in (None, "", "   "):
        with pytest.raises(MissingTokenError, match="insecure_no_auth"):
            AuditWebhookServer(warehouse.landing, "127.0.0.1", 0, token)


# --- the command ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUPOOL_AUDIT_TOKEN", "GPUPOOL_CONFIG")}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def webhook_command(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "k8s-audit-webhook", "--home", str(tmp_path / "home"), *args]


def test_the_command_refuses_to_start_without_a_token(tmp_path):
    result = subprocess.run(
        webhook_command(tmp_path, "--port", str(free_port())),
        cwd=tmp_path, env=command_env(), capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode != 0
    assert "no bearer token" in result.stderr
    assert "GPUPOOL_AUDIT_TOKEN" in result.stderr and "--insecure-no-auth" in result.stderr


def run_webhook(tmp_path: Path, env: dict[str, str], *args: str, term_ignored: bool = False) -> tuple[str, str]:
    """Start the command, wait for /healthz, return (url, its stderr after it is stopped with SIGTERM).
    term_ignored: start it with SIGTERM ignored, as a parent that ignores it leaves it."""
    port = free_port()
    command = webhook_command(tmp_path, "--port", str(port), *args)
    if term_ignored:  # the shell ignores TERM, then becomes the command (exec): the same pid, TERM still ignored
        command = ["sh", "-c", 'trap "" TERM; exec "$@"', "sh", *command]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()
            try:
                if requests.get(url + "healthz", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the webhook did not start"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
        yield stderr


def test_the_command_with_insecure_no_auth_serves_anyone_and_says_so(tmp_path, events):
    steps = run_webhook(tmp_path, command_env(), "--insecure-no-auth")
    url = next(steps)
    response = requests.post(url, data=batch(json.dumps(events[0])), timeout=30)
    assert response.status_code == 200 and response.json()["events"] == 1
    stderr = next(steps)
    assert "INSECURE" in stderr and "WITHOUT authentication" in stderr


def test_the_command_with_a_token_requires_it(tmp_path, events):
    steps = run_webhook(tmp_path, command_env(GPUPOOL_AUDIT_TOKEN=TOKEN))
    url = next(steps)
    assert requests.post(url, data=batch(json.dumps(events[0])), timeout=30).status_code == 401
    assert requests.post(url, data=batch(json.dumps(events[0])), headers=HEADERS, timeout=30).status_code == 200
    assert "INSECURE" not in next(steps)


def test_the_command_stops_on_sigterm_even_when_started_with_it_ignored(tmp_path, events):
    """An ignored signal survives exec: a server started by a parent that ignores SIGTERM must still stop
    on it (else a supervisor's stop hangs, and a test run leaks the process)."""
    steps = run_webhook(tmp_path, command_env(), "--insecure-no-auth", term_ignored=True)
    url = next(steps)
    assert requests.post(url, data=batch(json.dumps(events[0])), timeout=30).status_code == 200
    next(steps)  # terminate() then communicate(timeout=30): raises if the process does not stop
