"""Fuzzing the Kubernetes audit webhook and the k8s_audit parser (issue 11, section 6).

Webhook: batches mixing real events (tests/fixtures/real-data/k8s-audit) with hostile items (lone
surrogates, bytes that are not UTF-8, deep nesting, oversized items), arbitrary JSON and arbitrary
bytes, posted over loopback HTTP. Whatever is sent: an answer (never a dropped connection), never
a 5xx; after a 200 every item is one landed line, and the ingest of what landed accounts for every
record (read = loaded + quarantined; real events loaded, the rest quarantined with a reason).

Parser: arbitrary lines (bytes, JSON, real lines, hostile lines): no exception escapes, every line
is loaded or quarantined with a reason, what loads has the contract's schema.

FUZZ_EXAMPLES=500 for a longer hunt; the default keeps the file well under a minute.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
from pathlib import Path

import polars as pl
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.connectors.k8s_audit import AuditWebhookServer, AuditWriter
from pipelines.contracts import contract
from pipelines.ingest import ingest_partition
from pipelines.sources.k8s_audit import parse_k8s_audit
from pipelines.warehouse import Warehouse
from tests.conftest import REAL_DATA
from tests.kubernetes.webhook import running_webhook

pytestmark = pytest.mark.slow  # Hypothesis over the webhook, ingested

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "50")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
TOKEN = "audit-webhook-fuzz-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
MAX_ITEM_BYTES = 16 * 1024
MAX_BODY_BYTES = 512 * 1024
REAL_LINES = [
    line
    for line in (REAL_DATA / "k8s-audit" / "falco_k8s_audit_events.jsonl").read_text().splitlines()
    if line.strip()
]
REAL_EVENTS = [json.loads(line) for line in REAL_LINES]
ONE_DAY = [i for i, e in enumerate(REAL_EVENTS) if e["stageTimestamp"].startswith("2018-10-26")]  # fewer ingests

HOSTILE = [
    '"\\ud800"',
    '{"user": {"username": "\\udc00"}}',
    '{"\\ud800": 1}',
    "[" * 5000 + "]" * 5000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    "[" * 100_000 + "]" * 100_000,
    json.dumps({"blob": "x" * (MAX_ITEM_BYTES + 1)}),
    '{"kind": "EventList", "items": []}',
    '{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [' + REAL_LINES[0] + "]}",
    '{"kind": "RefusedEvent", "apiVersion": "gpupool.io/v1", "reason": 5, "raw": ["x"]}',
    "1" + "0" * 5000,
    "null",
    '"\\u0000"',
    json.dumps({**REAL_EVENTS[0], "stageTimestamp": "0001-01-01T00:00:00+01:00"}),
    json.dumps({**REAL_EVENTS[0], "stageTimestamp": "9999-12-31T23:59:59-01:00"}),
    json.dumps({**REAL_EVENTS[ONE_DAY[0]], "responseStatus": {"code": 2**70}}),
    json.dumps({**REAL_EVENTS[ONE_DAY[0]], "user": {"username": "\ud800"}}),
]
ODD_BUT_VALID = [  # they load
    json.dumps({**REAL_EVENTS[ONE_DAY[0]], "user": {"username": "a\x00b"}}),
    json.dumps({**REAL_EVENTS[ONE_DAY[0]], "user": {"username": "\U0001f600 \u2028"}}, ensure_ascii=False),
    json.dumps({**REAL_EVENTS[ONE_DAY[0]], "user": {"username": "\U0001f600"}}),  # a surrogate pair, escaped
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
json_texts = st.builds(lambda v, ascii_: json.dumps(v, ensure_ascii=ascii_), json_values, st.booleans())
# (item text, kind): kind "real" must load, "bad" must be quarantined, "bytes" may break the body
items = st.one_of(
    st.sampled_from(ONE_DAY).map(lambda i: (json.dumps(REAL_EVENTS[i]), "real")),
    st.sampled_from(HOSTILE).map(lambda text: (text, "bad")),
    st.sampled_from(ODD_BUT_VALID).map(lambda text: (text, "real")),
    json_texts.map(lambda text: (text, "bad")),
    st.binary(max_size=64).map(lambda raw: (raw.decode("utf-8", "surrogateescape"), "bytes")),
)


@pytest.fixture(scope="module")
def home() -> Path:
    with tempfile.TemporaryDirectory(prefix="audit-fuzz-") as folder:
        yield Path(folder)


@pytest.fixture(scope="module")
def warehouse(home: Path) -> Warehouse:
    """One warehouse for the module; each example starts from an empty landing folder."""
    return Warehouse(home / "gpupool")


@pytest.fixture(scope="module")
def server(home: Path) -> AuditWebhookServer:
    """One server for the module; each example gives it a writer into a fresh home."""
    with running_webhook(home, TOKEN, instance="fuzz", max_body_bytes=MAX_BODY_BYTES) as server:
        yield server


def _fresh(warehouse: Warehouse) -> Warehouse:
    shutil.rmtree(warehouse.landing / "k8s_audit", ignore_errors=True)
    return warehouse


def _ingest(warehouse: Warehouse) -> tuple[int, int, int]:
    root = warehouse.landing / "k8s_audit"
    totals = [0, 0, 0]
    for day in sorted(p.name for p in root.iterdir()) if root.exists() else []:
        report = ingest_partition(warehouse, "k8s_audit", dt.date.fromisoformat(day))
        assert report.records_read == report.records_loaded + report.records_quarantined, report.summary()
        totals = [totals[0] + report.records_read, totals[1] + report.records_loaded,
                  totals[2] + report.records_quarantined]
    if warehouse.db_path.exists():
        with warehouse.connect(read_only=True) as con:
            sql = "select count(*) from ops.quarantine where coalesce(trim(reason), '') = ''"
            assert con.execute(sql).fetchone() == (0,), "a quarantine row without a reason"
    return totals[0], totals[1], totals[2]


def _landed_lines(warehouse: Warehouse) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in (warehouse.landing / "k8s_audit").glob("*/*.jsonl"))


@FUZZ
@given(batch=st.lists(items, max_size=8), unique_real=st.booleans())
def test_any_batch_is_answered_and_everything_landed_ingests(warehouse, server, batch, unique_real):
    if unique_real:  # the same event twice is still two records; check the plain case too
        seen: set[str] = set()
        batch = [b for b in batch if b[1] != "real" or not (b[0] in seen or seen.add(b[0]))]
    warehouse = _fresh(warehouse)
    body = '{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[' + ",".join(t for t, _ in batch) + "]}"
    server.writer = AuditWriter(warehouse.landing, "fuzz", max_item_bytes=MAX_ITEM_BYTES)
    # a dropped connection raises here: the property is that it never does
    response = requests.post(server.url, data=body.encode("utf-8", "surrogateescape"), headers=HEADERS, timeout=60)
    assert response.status_code in (200, 400, 413), response.text
    answer = response.json()
    if response.status_code != 200:
        assert answer["error"]
        assert _landed_lines(warehouse) == 0
        assert any(kind == "bytes" for _, kind in batch) or len(body) > MAX_BODY_BYTES, answer
        return
    assert sum(answer["files"].values()) == answer["events"] == _landed_lines(warehouse)
    read, loaded, quarantined = _ingest(warehouse)
    assert read == answer["events"]
    assert len(answer["refused"]) <= quarantined
    if not any(kind == "bytes" for _, kind in batch):
        real = sum(kind == "real" for _, kind in batch)
        assert (answer["events"], loaded, quarantined) == (len(batch), real, len(batch) - real)


@FUZZ
@given(body=st.binary(max_size=512) | json_texts.map(str.encode))
def test_any_body_is_answered_never_dropped(warehouse, server, body):
    warehouse = _fresh(warehouse)
    server.writer = AuditWriter(warehouse.landing, "fuzz", max_item_bytes=MAX_ITEM_BYTES)
    response = requests.post(server.url, data=body, headers=HEADERS, timeout=60)
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert response.json()["error"].startswith("body ")
        assert _landed_lines(warehouse) == 0
    else:
        assert _ingest(warehouse)[0] == response.json()["events"]


# --- the file parser ---------------------------------------------------------------------------

lines = st.one_of(
    st.sampled_from(REAL_LINES),
    st.sampled_from(HOSTILE),
    json_texts,
    st.binary(max_size=80).map(lambda raw: raw.decode("utf-8", "surrogateescape")),
    st.sampled_from(REAL_LINES).flatmap(
        lambda line: st.tuples(st.integers(0, len(line)), st.integers(0, 20), st.binary(max_size=8)).map(
            lambda cut: line[: cut[0]] + cut[2].decode("utf-8", "surrogateescape") + line[cut[0] + cut[1] :]
        )
    ),
)


def _record_lines(data: bytes) -> set[int]:
    """The numbers of the lines that carry a record, by the parser's rule (blank lines carry none)."""
    numbers = set()
    for index, line in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n")):
        if line.removesuffix(b"\r").strip():
            numbers.add(index + 1)
    return numbers


def _empty_event_lists(data: bytes) -> set[int]:
    """Lines holding an EventList with no items: they carry no event (and no record)."""
    empty = set()
    for index, line in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n")):
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict) and value.get("kind") == "EventList" and value.get("items") == []:
            empty.add(index + 1)
    return empty


@FUZZ
@given(parts=st.lists(lines, max_size=12), ending=st.sampled_from(["\n", "\r\n"]), last_newline=st.booleans())
def test_the_parser_loads_or_quarantines_every_line(parts, ending, last_newline):
    data = ending.join(parts).encode("utf-8", "surrogateescape") + (ending.encode() if last_newline else b"")
    result = parse_k8s_audit(data, "fuzz.jsonl")
    frame = result.tables["audit_events"]
    assert result.records_read == result.records_loaded + result.quarantine.height
    assert frame.height == result.records_loaded
    assert frame.schema == contract("audit_events").schema
    assert result.quarantine.filter(pl.col("reason").str.strip_chars() == "").height == 0
    accounted = set(frame["line_number"].to_list()) | set(result.quarantine["line_number"].to_list())
    assert _record_lines(data) - _empty_event_lists(data) <= accounted
