"""What the parser fuzz tests share: hypothesis settings, the real samples they mutate, the
strategies that mutate bytes and JSON, and the invariants every parse result must satisfy."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from pipelines.contracts import contract
from pipelines.paths import REPO_ROOT
from pipelines.sources import (
    allocator_artifacts,
    allocator_log,
    dcgm_text,
    governance,
    kueue,
    prometheus,
    slurm_sacct,
)
from pipelines.sources.base import ParseResult
from pipelines.sources.slurm_squeue import parse_squeue_job_gpus
from tests.conftest import REAL_DATA

# FUZZ_EXAMPLES=2000 for a longer hunt; the default keeps the suite well under two minutes.
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
SCRAPED = dt.datetime(2026, 3, 10, 12, 0, 0)
FIXTURES = Path(__file__).parent / "fixtures"
K8S_FIXTURES = REPO_ROOT / "tests" / "kubernetes" / "fixtures"
SKIPPED_SOURCES = {"k8s_audit"}  # fuzzed with the audit webhook, by its owner


def read_sample(path: Path) -> bytes:
    return path.read_bytes()


DCGM_SAMPLES = sorted((REAL_DATA / "dcgm-exporter").glob("*.prom"))
PROM_SAMPLES = sorted((REAL_DATA / "prometheus").glob("*.json"))
SACCT_JSON_SAMPLES = sorted((REAL_DATA / "slurm").glob("sacct_json_*.json"))
PARSABLE2_SAMPLE = FIXTURES / "sacct_parsable2_duplicates.txt"
WORKLOADS_SAMPLE = K8S_FIXTURES / "workloads.json"
PODS_SAMPLE = K8S_FIXTURES / "pods.json"
GOVERNANCE_LINE = {
    "schema": "gpupool.governance/v1", "record": "answer", "ts": "2026-11-02T09:00:00Z",
    "idempotency_key": "gp-remind-0-x", "finding_id": "f", "policy": "idle-allocation", "policy_version": "1",
    "policy_kind": "idle_allocation", "mode": "enforce", "step_index": 0, "action": "remind",
    "engine": "allocator", "job_id": "j-1", "attempt": 1, "tenant": "vision", "status": "answered",
    "outcome": "applied", "evidence": {"idle_minutes": 42}, "gpu_hours": 1.5, "gpus_held": 8,
    "window_start_at": "2026-11-02T08:18:00Z", "delivery_attempts": 1, "queue": "vision-train",
}
GOVERNANCE_SAMPLE = (
    "\n".join(json.dumps({**GOVERNANCE_LINE, "job_id": f"j-{i}"}) for i in range(4)) + "\n"
).encode()

# -- strategies: arbitrary input ------------------------------------------------------------------
NASTY_TEXT = [
    "\x00", "\ud800", "\udfff", "NaN", "nan", "+Inf", "-Inf", "Inf", "1e309", "-1e309", "-1", "-0", "0x10",
    "1_000", "99999999999999999999999999999", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "2147483648", "-2147483649", "140737488355328", "9223372036854775794", "1e-400",
    "\ufeff", "é", "𝔘", "\u2028", "\u0085", "\u202e", "\u00a0", "\r", "\r\n", "\n", '"', "\\", '\\"', "{",
    "}", "[", "]", ",", "=", "#", " ", "\t", "|", ":", ".", "null", "true", "", "a" * 3000, "\x1f", "\x0b",
    "0", "1", "-", "T", "Z", "2026-13-45T25:61:61", "1970-01-01T00:00:00", "9999-12-31T23:59:59Z",
]
NASTY_BYTES = [t.encode("utf-8", "surrogatepass") for t in NASTY_TEXT] + [
    b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\x80\x80", b"\xf4\x90\x80\x80",
    b"1e400", b"-1e400", b"1" + b"0" * 400, b"2147483647", b"4294967296", b"-2147483648",
]
NUMBERS = re.compile(rb"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")

any_bytes = st.one_of(
    st.binary(max_size=400),
    st.text(max_size=300).map(str.encode),
    st.lists(st.sampled_from(NASTY_BYTES) | st.binary(max_size=12), max_size=30).map(b"".join),
)


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """A real file with a few line- and byte-level mutations: drop, duplicate, swap, truncate lines,
    flip or insert bytes, swap numbers for odd ones, then maybe CRLF, a BOM, a cut-off end."""
    lines = data.split(b"\n")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["drop", "dup", "swap", "cut", "flip", "insert", "number", "nasty_line"]))
        if not lines:
            lines = [b""]
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        k = draw(st.integers(0, len(line)))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, line)
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], line
        elif op == "cut":
            lines[i] = line[:k]
        elif op == "flip" and line:
            k = min(k, len(line) - 1)
            lines[i] = line[:k] + bytes([draw(st.integers(0, 255))]) + line[k + 1 :]
        elif op == "insert":
            lines[i] = line[:k] + draw(st.sampled_from(NASTY_BYTES)) + line[k:]
        elif op == "number":
            found = list(NUMBERS.finditer(line))
            if found:
                m = draw(st.sampled_from(found))
                lines[i] = line[: m.start()] + draw(st.sampled_from(NASTY_BYTES)) + line[m.end() :]
        elif op == "nasty_line":
            lines.insert(i, draw(st.sampled_from(NASTY_BYTES)) * draw(st.integers(1, 3)))
    out = b"\n".join(lines)
    if draw(st.booleans()):
        out = out.replace(b"\n", b"\r\n")
    if draw(st.integers(0, 4)) == 0:
        out = b"\xef\xbb\xbf" + out
    if draw(st.integers(0, 4)) == 0:
        out = out[: draw(st.integers(0, len(out)))]
    return out


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(NASTY_TEXT),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _paths(child, (*prefix, index))
    return out


def _set(doc: object, path: tuple, op: str, new: object) -> object:
    if not path:
        return new if op == "replace" else doc
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if op == "delete":
        del parent[last]
    elif op == "dup" and isinstance(parent, list):
        parent.insert(last, json.loads(json.dumps(parent[last])))
    elif op == "wrap":
        parent[last] = [parent[last]]
    else:
        parent[last] = new
    return doc


@st.composite
def json_mutated(draw: st.DrawFn, value: object) -> object:
    """The JSON value with a few nodes replaced by random shapes, deleted, duplicated or wrapped."""
    doc = json.loads(json.dumps(value))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "replace", "delete", "dup", "wrap"]))
        doc = _set(doc, path, op, draw(json_values))
    return doc


def dump(value: object) -> bytes:
    """JSON text; NaN/Infinity are written as Python does (not JSON: the parsers must refuse them)."""
    return json.dumps(value, allow_nan=True).encode()


@st.composite
def json_lines_mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """JSON Lines where some lines' values are mutated structurally; then maybe byte mutations."""
    lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    out = []
    for line in lines:
        out.append(dump(draw(json_mutated(line))) if draw(st.booleans()) else dump(line))
    text = b"\n".join(out) + b"\n"
    return draw(mutated(text)) if draw(st.booleans()) else text


# -- invariants -----------------------------------------------------------------------------------
def check(result: ParseResult, tables: tuple[str, ...], one_row_per_record: bool = False) -> None:
    """What every parser result must satisfy, whatever the input."""
    assert isinstance(result, ParseResult)
    assert result.records_read >= 0 and result.records_loaded >= 0
    assert result.records_read == result.records_loaded + result.quarantine.height, (
        result.records_read, result.records_loaded, result.quarantine.height)
    q = result.quarantine
    assert q.schema == contract("quarantine").schema
    assert q.select(pl.col("reason").is_null() | (pl.col("reason").str.strip_chars() == "")).sum().item() == 0
    assert q.get_column("stage").is_in(["parse", "validate"]).all()
    assert q.get_column("source").null_count() == 0 and q.get_column("source_file").null_count() == 0
    assert (q.get_column("raw").str.len_chars().fill_null(0) <= 2000).all()
    located = q.get_column("line_number").drop_nulls()
    assert located.n_unique() == located.len(), "a record quarantined twice"
    for name in tables:
        frame = result.tables[name]
        c = contract(name)
        assert frame.schema == c.schema, name
        nulls = frame.select(c.required).null_count().row(0, named=True)
        assert not any(nulls.values()), (name, nulls)
        for column, dtype in frame.schema.items():
            if dtype == pl.Float64:
                values = frame.get_column(column).drop_nulls()
                assert values.is_finite().all(), (name, column, "NaN or infinite value loaded")
            if isinstance(dtype, pl.Datetime):  # what a Python datetime (and every consumer) can hold
                years = frame.get_column(column).drop_nulls().dt.year()
                assert years.is_between(1, 9999).all(), (name, column, "time outside years 1 to 9999")
    if one_row_per_record:
        assert result.tables[tables[0]].height == result.records_loaded


def is_unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def nonblank_lines(data: bytes) -> list[bytes]:
    return [
        line.removesuffix(b"\r")
        for line in data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
        if line.removesuffix(b"\r").strip()
    ]


# -- one checked parse per format: the parser, then the invariants above ---------------------------
def _dcgm_records(data: bytes) -> int:
    """Sample lines: not blank, not a comment (after leading blanks). A byte order mark starts the
    file; Polars' CSV reader drops one more right after it (harmless: it only ever removes a BOM)."""
    count = 0
    for line in data.removeprefix(b"\xef\xbb\xbf").removeprefix(b"\xef\xbb\xbf").split(b"\n"):
        stripped = line.removesuffix(b"\r").lstrip(b" \t")
        if stripped and not stripped.startswith(b"#"):
            count += 1
    return count


def check_dcgm(data: bytes) -> ParseResult:
    result = dcgm_text.parse_dcgm_text(data, "fuzz.prom", scraped_at=SCRAPED)
    check(result, ("dcgm_samples",), one_row_per_record=True)
    assert result.records_read == _dcgm_records(data)
    return result


def check_prometheus(data: bytes) -> ParseResult:
    result = prometheus.parse_query_range(data, "fuzz.json")
    check(result, ("dcgm_samples",), one_row_per_record=True)
    assert result.records_read >= 1 or data.strip()
    return result


def check_parsable2(data: bytes) -> ParseResult:
    result = slurm_sacct.parse_sacct_parsable2(data, "fuzz.txt")
    check(result, ("job_events", "job_gpus"))
    lines = nonblank_lines(data)
    steps = sum(int(n) for note in result.notes for n in re.findall(r"^(\d+) step rows ignored", note))
    utf8 = [line for line in lines if _is_utf8(line)]
    expected = len(lines) - steps - (1 if utf8 else 0)
    assert result.records_read == expected, (result.records_read, expected)
    return result


def _is_utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def check_sacct_json(data: bytes) -> ParseResult:
    result = slurm_sacct.parse_sacct_json(data, "fuzz.json")
    check(result, ("job_events", "job_gpus"))
    return result


SQUEUE_SAMPLES = sorted((REPO_ROOT / "tests" / "slurm" / "fixtures").glob("squeue*.json"))


def check_squeue(data: bytes) -> ParseResult:
    result = parse_squeue_job_gpus(data, "fuzz.json")
    check(result, ("job_gpus",))
    return result


PODS_DOC = json.loads(PODS_SAMPLE.read_bytes())


def check_kueue(data: bytes) -> ParseResult:
    result = kueue.parse_kueue_workloads(data, "fuzz.json", [PODS_DOC])
    check(result, ("job_events", "job_gpus"))
    return result


JSONL_PARSERS = {
    "allocator_events": (allocator_log.parse_event_log, FIXTURES / "allocator_events.jsonl", ("job_events", "job_gpus")),
    "allocator_audit": (allocator_log.parse_audit_log, FIXTURES / "allocator_audit.jsonl", ("audit_events",)),
    "governance_actions": (governance.parse_governance_log, None, ("governance_actions",)),
    "allocator_artifacts": (allocator_artifacts.parse_artifact_log, FIXTURES / "allocator_artifacts.jsonl",
                            ("artifact_events",)),
}


def jsonl_sample(name: str) -> bytes:
    path = JSONL_PARSERS[name][1]
    return GOVERNANCE_SAMPLE if path is None else path.read_bytes()


def check_jsonl(name: str, data: bytes) -> ParseResult:
    parse, _, tables = JSONL_PARSERS[name]
    result = parse(data, "fuzz.jsonl")
    check(result, tables, one_row_per_record=True)
    assert result.records_read == len(nonblank_lines(data)), "a line neither loaded nor quarantined"
    if "line_number" in contract(tables[0]).column_names:
        loaded = set(result.tables[tables[0]].get_column("line_number").to_list())
        quarantined = set(result.quarantine.get_column("line_number").to_list())
        assert not loaded & quarantined
    return result


def check_pool(data: bytes) -> ParseResult:
    result = allocator_log.parse_pool_snapshot(data, "fuzz.json")
    check(result, ("gpu_inventory", "queue_quotas"))
    return result
