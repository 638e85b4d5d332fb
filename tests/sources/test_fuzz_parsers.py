"""Fuzzing the parsers (issue 11, section 6): whatever the input, no exception escapes a parser,
every record is accounted for (read = loaded + quarantined), every quarantine row says why, and
what loads satisfies the raw table's contract.

Three kinds of input per parser: arbitrary bytes, mutations of real samples (tests/fixtures/real-data,
and the project's own fixtures where no public sample exists), and structured inputs built from
the format's grammar. The k8s audit parser is fuzzed elsewhere. Regression tests for the bugs
these properties found are at the end, as plain tests.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from expectations.suites import PERCENT_METRICS, RATIO_METRICS
from pipelines.contracts import contract
from pipelines.paths import REPO_ROOT
from pipelines.sources import allocator_log, dcgm_text, governance, kueue, labels, prometheus, slurm_sacct
from pipelines.sources.base import ParseResult
from pipelines.sources.registry import SOURCES
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


def _read(path: Path) -> bytes:
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


def _is_unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _nonblank_lines(data: bytes) -> list[bytes]:
    return [
        line.removesuffix(b"\r")
        for line in data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
        if line.removesuffix(b"\r").strip()
    ]


# -- dcgm-exporter text ---------------------------------------------------------------------------
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


@FUZZ
@given(any_bytes)
def test_dcgm_text_arbitrary_bytes(data: bytes) -> None:
    check_dcgm(data)


@FUZZ
@given(st.sampled_from(DCGM_SAMPLES).map(_read).flatmap(mutated))
def test_dcgm_text_mutated_real_scrapes(data: bytes) -> None:
    check_dcgm(data)


LABEL_NAMES = [
    "gpu", "UUID", "uuid", "Hostname", "hostname", "device", "modelName", "GPU_I_ID", "GPU_I_PROFILE",
    "namespace", "pod", "container", "exported_pod", "instance", "hpc_job", "jobid", "pci_bus_id",
    "minor_number", "pod_name", "container_name",
]
METRICS = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS"]
label_values = st.one_of(st.text(max_size=20), st.integers(-3, 300).map(str), st.sampled_from(NASTY_TEXT))
sample_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(NASTY_TEXT),
)
timestamps = st.one_of(
    st.none(),
    st.integers(min_value=-(2**66), max_value=2**66).map(str),
    st.integers(0, 4_000_000_000_000).map(str),
    st.sampled_from(NASTY_TEXT),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def exposition_lines(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(METRICS) | st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True))
    labels = draw(
        st.lists(st.tuples(st.sampled_from(LABEL_NAMES) | st.from_regex(r"[a-zA-Z_]\w{0,8}", fullmatch=True),
                           label_values), max_size=6)
    )
    sep = draw(st.sampled_from([",", ", ", ",\t"]))
    block = sep.join(f'{k}="{_escape(v)}"' for k, v in labels)
    if labels and draw(st.booleans()):
        block += ","
    key = f"{name}{{{block}}}" if labels or draw(st.booleans()) else name
    space = draw(st.sampled_from([" ", " ", "  ", "\t"]))
    line = f"{key}{space}{draw(sample_values)}"
    ts = draw(timestamps)
    if ts is not None:
        line += f"{space}{ts}"
    return line


@FUZZ
@given(st.lists(exposition_lines() | st.sampled_from(["", "# HELP x y", "# TYPE x gauge", "  "]), max_size=12))
def test_dcgm_text_lines_from_the_grammar(lines: list[str]) -> None:
    check_dcgm("\n".join(lines).encode("utf-8", "surrogatepass"))


@FUZZ
@given(
    host=st.text(min_size=1, max_size=30).filter(lambda s: "\x00" not in s),
    gpu=st.integers(0, 2**31 - 1),
    value=st.floats(allow_nan=False, allow_infinity=False),
    ts=st.integers(0, 4_000_000_000_000),
    extra=label_values,
)
def test_dcgm_text_valid_line_loads_exactly(host: str, gpu: int, value: float, ts: int, extra: str) -> None:
    """A well-formed line loads, whatever the label text: escapes round-trip, values are exact."""
    if value in dcgm_text.FP64_SENTINELS or value == 2.0**63:
        return
    line = f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",Hostname="{_escape(host)}",pod="{_escape(extra)}"}} {value!r} {ts}\n'
    try:
        data = line.encode()
    except UnicodeEncodeError:
        return
    result = check_dcgm(data)
    assert result.quarantine.is_empty(), result.quarantine.to_dicts()
    row = result.tables["dcgm_samples"].row(0, named=True)
    assert (row["host"], row["gpu"], row["value"]) == (host, gpu, value)
    assert row["sampled_at"] == dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ts)
    assert row["k8s_pod"] == (extra or None)


# -- DCGM Parquet (the contract's columns, any values) --------------------------------------------
@st.composite
def dcgm_parquet_files(draw: st.DrawFn) -> bytes:
    import io

    rows = draw(st.integers(0, 6))
    columns = {
        "sampled_at": st.none() | st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)),
        "host": st.none() | st.text(max_size=8),
        "gpu": st.none() | st.integers(-(2**31), 2**31 - 1),
        "metric": st.none() | st.sampled_from(METRICS),
        "value": st.none() | st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from([float(v) for v in dcgm_text.INT64_SENTINELS] + list(dcgm_text.FP64_SENTINELS)),
        "k8s_pod": st.none() | st.text(max_size=8),
    }
    chosen = draw(st.lists(st.sampled_from(sorted(columns)), unique=True))
    frame = pl.DataFrame(
        {name: draw(st.lists(columns[name], min_size=rows, max_size=rows)) for name in chosen},
        schema={name: contract("dcgm_samples").schema[name] for name in chosen},
    )
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


@FUZZ
@given(dcgm_parquet_files())
def test_dcgm_parquet_any_values(data: bytes) -> None:
    result = SOURCES["dcgm_parquet"].parse_bytes(data, "fuzz.parquet")
    check(result, ("dcgm_samples",), one_row_per_record=True)


# -- labels.py: the label mapping both exposition parsers share -------------------------------------
@FUZZ
@given(st.lists(st.lists(st.tuples(st.sampled_from(LABEL_NAMES) | st.text(max_size=6), label_values), max_size=6),
                max_size=5))
def test_label_mapping_any_label_sets(series: list[list[tuple[str, str]]]) -> None:
    rows = [
        {"series_id": i, "position": p, "key": k, "value": v, "text": f'{k}="{v}"'}
        for i, label_set in enumerate(series)
        for p, (k, v) in enumerate(label_set)
    ]
    assume(all(_is_unicode(r["key"]) and _is_unicode(r["value"]) for r in rows))  # Polars strings are UTF-8
    pairs = pl.DataFrame(rows, schema=labels.PAIRS_SCHEMA)
    ids = pl.Series("series_id", range(len(series)), dtype=pl.UInt32)
    out = labels.map_labels(ids, pairs)
    assert out.get_column("series_id").to_list() == ids.to_list()  # one row per series, in order
    fine = out.filter(pl.col("label_error").is_null())
    assert fine.get_column("host").null_count() == 0 and fine.get_column("gpu").null_count() == 0
    errors = out.get_column("label_error").drop_nulls()
    assert (errors.str.strip_chars() != "").all()


# -- Prometheus query_range / query ---------------------------------------------------------------
def check_prometheus(data: bytes) -> ParseResult:
    result = prometheus.parse_query_range(data, "fuzz.json")
    check(result, ("dcgm_samples",), one_row_per_record=True)
    assert result.records_read >= 1 or data.strip()
    return result


@FUZZ
@given(any_bytes)
def test_prometheus_arbitrary_bytes(data: bytes) -> None:
    check_prometheus(data)


@FUZZ
@given(st.sampled_from(PROM_SAMPLES).map(_read).flatmap(mutated))
def test_prometheus_mutated_real_responses(data: bytes) -> None:
    check_prometheus(data)


@FUZZ
@given(st.sampled_from(PROM_SAMPLES).map(lambda p: json.loads(p.read_bytes())).flatmap(json_mutated).map(dump))
def test_prometheus_real_responses_with_random_shapes(data: bytes) -> None:
    check_prometheus(data)


prom_times = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(0, 4e9),
    st.text(max_size=8),
    st.none(),
)
prom_points = st.one_of(
    st.tuples(prom_times, sample_values).map(list),
    st.lists(json_scalars, max_size=3),
)


@st.composite
def prometheus_documents(draw: st.DrawFn) -> tuple[bytes, int]:
    """A success response built from the grammar, and its number of points (the records)."""
    kind = draw(st.sampled_from(["matrix", "vector"]))
    series, points = [], 0
    for _ in range(draw(st.integers(0, 4))):
        metric = draw(st.dictionaries(st.sampled_from([*LABEL_NAMES, "__name__"]) | st.text(max_size=6),
                                      label_values, max_size=6))
        if draw(st.booleans()):  # a series that maps, so that the points themselves are tested
            metric = {**metric, "__name__": draw(st.sampled_from(METRICS)), "gpu": "0", "Hostname": "node-1"}
        if kind == "matrix":
            values = draw(st.lists(prom_points, max_size=4))
            points += len(values)
            series.append({"metric": metric, "values": values})
        else:
            series.append({"metric": metric, "value": draw(prom_points)})
            points += 1
    doc = {"status": "success", "data": {"resultType": kind, "result": series}}
    return dump(doc), points


@FUZZ
@given(prometheus_documents())
def test_prometheus_documents_from_the_grammar(case: tuple[bytes, int]) -> None:
    data, points = case
    result = check_prometheus(data)
    whole_document = result.quarantine.get_column("line_number").null_count() == 1
    assert result.records_read == (1 if whole_document else points)


# -- Slurm sacct --parsable2 ----------------------------------------------------------------------
def check_parsable2(data: bytes) -> ParseResult:
    result = slurm_sacct.parse_sacct_parsable2(data, "fuzz.txt")
    check(result, ("job_events", "job_gpus"))
    lines = _nonblank_lines(data)
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


@FUZZ
@given(any_bytes)
def test_parsable2_arbitrary_bytes(data: bytes) -> None:
    check_parsable2(data)


@FUZZ
@given(st.sampled_from([PARSABLE2_SAMPLE, *sorted((REAL_DATA / "slurm").glob("*.txt"))]).map(_read).flatmap(mutated))
def test_parsable2_mutated_sample(data: bytes) -> None:
    # the fixture is sacct output; the real-data texts (sacct's man page, the TRES examples) are not
    check_parsable2(data)


SACCT_FIELDS = {
    "JobID": st.one_of(st.from_regex(r"\d{1,6}(_\d{1,3}|\+\d)?(\.(batch|extern|\d))?", fullmatch=True),
                       st.text(max_size=8)),
    "State": st.one_of(st.sampled_from(["COMPLETED", "FAILED", "RUNNING", "PENDING", "REQUEUED", "PREEMPTED",
                                        "CANCELLED by 0", "CANCELLED+", "TIMEOUT", "NODE_FAIL"]),
                       st.text(max_size=10)),
    "Submit": st.one_of(st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)).map(
        lambda d: d.strftime("%Y-%m-%dT%H:%M:%S")), st.sampled_from(["Unknown", "None", "", *NASTY_TEXT])),
    "ExitCode": st.one_of(st.from_regex(r"\d{1,25}:\d{1,25}", fullmatch=True), st.sampled_from(NASTY_TEXT)),
    "Timelimit": st.one_of(st.from_regex(r"(\d{1,20}-)?\d{1,20}(:\d{1,20}){0,2}", fullmatch=True),
                           st.sampled_from(["UNLIMITED", "Partition_Limit", "INVALID", *NASTY_TEXT])),
    "TimelimitRaw": st.one_of(st.integers(0, 2**70).map(str), st.sampled_from(NASTY_TEXT)),
    "Priority": st.one_of(st.integers(-(2**40), 2**70).map(str), st.sampled_from(NASTY_TEXT)),
    "NodeList": st.one_of(st.from_regex(r"[a-z]{1,4}(\[\d{1,3}(-\d{1,3})?(,\d{1,3})*\])?(,[a-z]{1,3}\d?)*",
                                        fullmatch=True),
                          st.sampled_from(["None assigned", "gpu[1-100000000]", "a[1-3][2-4]", *NASTY_TEXT])),
    "ReqTRES": st.one_of(
        st.lists(st.tuples(st.sampled_from(["gres/gpu", "gres/gpu:a100", "gres/gpu:a100_3g.20gb", "cpu",
                                            "gres/gpu:nvidia_a30_1g.6gb", "gres/gpu:0g.0gb", "mem",
                                            "gres/gpumem", "gres/gpuutil", "fs/disk"]),
                           st.integers(0, 2**40).map(str) | st.sampled_from(NASTY_TEXT)),
                 max_size=4).map(lambda pairs: ",".join(f"{k}={v}" for k, v in pairs)),
        st.sampled_from(NASTY_TEXT)),
}
SACCT_FIELDS["Start"] = SACCT_FIELDS["End"] = SACCT_FIELDS["Eligible"] = SACCT_FIELDS["Submit"]
SACCT_FIELDS["AllocTRES"] = SACCT_FIELDS["ReqTRES"]
for _name in ("JobName", "Partition", "Account", "User", "Reason", "Cluster"):
    SACCT_FIELDS[_name] = st.text(max_size=10).filter(lambda s: "|" not in s and "\n" not in s)


@st.composite
def sacct_tables(draw: st.DrawFn) -> bytes:
    optional = [n for n in SACCT_FIELDS if n not in slurm_sacct.REQUIRED_FIELDS]
    names = [*slurm_sacct.REQUIRED_FIELDS, *draw(st.lists(st.sampled_from(optional), unique=True, max_size=8))]
    names = draw(st.permutations(names))
    rows = ["|".join(names)]
    for _ in range(draw(st.integers(0, 6))):
        rows.append("|".join(draw(SACCT_FIELDS[n]) for n in names))
    return "\n".join(rows).encode("utf-8", "surrogatepass")


@FUZZ
@given(sacct_tables())
def test_parsable2_tables_from_the_grammar(data: bytes) -> None:
    check_parsable2(data)


# -- Slurm sacct --json ---------------------------------------------------------------------------
def check_sacct_json(data: bytes) -> ParseResult:
    result = slurm_sacct.parse_sacct_json(data, "fuzz.json")
    check(result, ("job_events", "job_gpus"))
    return result


@FUZZ
@given(any_bytes)
def test_sacct_json_arbitrary_bytes(data: bytes) -> None:
    check_sacct_json(data)


@FUZZ
@given(st.sampled_from(SACCT_JSON_SAMPLES).map(_read).flatmap(mutated))
def test_sacct_json_mutated_real_samples(data: bytes) -> None:
    check_sacct_json(data)


@FUZZ
@given(st.sampled_from(SACCT_JSON_SAMPLES).map(lambda p: json.loads(p.read_bytes())).flatmap(json_mutated))
def test_sacct_json_real_samples_with_random_shapes(doc: object) -> None:
    result = check_sacct_json(dump(doc))
    text = dump(doc).decode()
    if isinstance(doc, dict) and isinstance(doc.get("jobs"), list) and not re.search(r"NaN|Infinity|\\ud", text):
        assert result.records_read == len(doc["jobs"])


# -- Slurm squeue --json (GPU indices of running jobs) ---------------------------------------------
SQUEUE_SAMPLES = sorted((REPO_ROOT / "tests" / "slurm" / "fixtures").glob("squeue*.json"))


def check_squeue(data: bytes) -> ParseResult:
    result = parse_squeue_job_gpus(data, "fuzz.json")
    check(result, ("job_gpus",))
    return result


@FUZZ
@given(st.sampled_from(SQUEUE_SAMPLES).map(_read).flatmap(mutated))
def test_squeue_mutated_samples(data: bytes) -> None:
    check_squeue(data)


@FUZZ
@given(st.sampled_from(SQUEUE_SAMPLES).map(lambda p: json.loads(p.read_bytes())).flatmap(json_mutated))
def test_squeue_samples_with_random_shapes(doc: object) -> None:
    check_squeue(dump(doc))


# -- Kueue Workloads ------------------------------------------------------------------------------
PODS_DOC = json.loads(PODS_SAMPLE.read_bytes())


def check_kueue(data: bytes) -> ParseResult:
    result = kueue.parse_kueue_workloads(data, "fuzz.json", [PODS_DOC])
    check(result, ("job_events", "job_gpus"))
    return result


@FUZZ
@given(any_bytes)
def test_kueue_arbitrary_bytes(data: bytes) -> None:
    check_kueue(data)


@FUZZ
@given(mutated(_read(WORKLOADS_SAMPLE)))
def test_kueue_mutated_workload_list(data: bytes) -> None:
    check_kueue(data)


@FUZZ
@given(json_mutated(json.loads(WORKLOADS_SAMPLE.read_bytes())))
def test_kueue_workload_list_with_random_shapes(doc: object) -> None:
    result = check_kueue(dump(doc))
    text = dump(doc).decode()
    if (
        isinstance(doc, dict)
        and doc.get("kind") == "WorkloadList"
        and str(doc.get("apiVersion")).startswith("kueue.x-k8s.io/")
        and isinstance(doc.get("items"), list)
        and not re.search(r"NaN|Infinity|\\ud", text)
    ):
        assert result.records_read == len(doc["items"])


@FUZZ
@given(json_mutated(PODS_DOC))
def test_kueue_pods_with_random_shapes(pods: object) -> None:
    result = kueue.parse_kueue_workloads(WORKLOADS_SAMPLE.read_bytes(), "fuzz.json", [pods])
    check(result, ("job_events", "job_gpus"))


# -- gpupool's own logs: allocator events, audit, pool snapshot; governance decisions -------------
JSONL_PARSERS = {
    "allocator_events": (allocator_log.parse_event_log, FIXTURES / "allocator_events.jsonl", ("job_events", "job_gpus")),
    "allocator_audit": (allocator_log.parse_audit_log, FIXTURES / "allocator_audit.jsonl", ("audit_events",)),
    "governance_actions": (governance.parse_governance_log, None, ("governance_actions",)),
}


def _sample(name: str) -> bytes:
    path = JSONL_PARSERS[name][1]
    return GOVERNANCE_SAMPLE if path is None else path.read_bytes()


def check_jsonl(name: str, data: bytes) -> ParseResult:
    parse, _, tables = JSONL_PARSERS[name]
    result = parse(data, "fuzz.jsonl")
    check(result, tables, one_row_per_record=True)
    assert result.records_read == len(_nonblank_lines(data)), "a line neither loaded nor quarantined"
    if "line_number" in contract(tables[0]).column_names:
        loaded = set(result.tables[tables[0]].get_column("line_number").to_list())
        quarantined = set(result.quarantine.get_column("line_number").to_list())
        assert not loaded & quarantined
    return result


@FUZZ
@given(st.sampled_from(sorted(JSONL_PARSERS)), any_bytes)
def test_json_lines_logs_arbitrary_bytes(name: str, data: bytes) -> None:
    check_jsonl(name, data)


@FUZZ
@given(st.sampled_from(sorted(JSONL_PARSERS)).flatmap(lambda n: st.tuples(st.just(n), mutated(_sample(n)))))
def test_json_lines_logs_mutated_samples(case: tuple[str, bytes]) -> None:
    check_jsonl(*case)


@FUZZ
@given(st.sampled_from(sorted(JSONL_PARSERS)).flatmap(
    lambda n: st.tuples(st.just(n), json_lines_mutated(_sample(n)))))
def test_json_lines_logs_with_random_shapes(case: tuple[str, bytes]) -> None:
    check_jsonl(*case)


def check_pool(data: bytes) -> ParseResult:
    result = allocator_log.parse_pool_snapshot(data, "fuzz.json")
    check(result, ("gpu_inventory", "queue_quotas"))
    return result


@FUZZ
@given(any_bytes)
def test_pool_snapshot_arbitrary_bytes(data: bytes) -> None:
    check_pool(data)


@FUZZ
@given(mutated(_read(FIXTURES / "allocator_pool.json")))
def test_pool_snapshot_mutated_sample(data: bytes) -> None:
    check_pool(data)


@FUZZ
@given(json_mutated(json.loads((FIXTURES / "allocator_pool.json").read_bytes())))
def test_pool_snapshot_with_random_shapes(doc: object) -> None:
    check_pool(dump(doc))


# -- the registry: every source's parse_bytes takes any bytes -------------------------------------
REGISTRY = sorted(set(SOURCES) - SKIPPED_SOURCES)


@FUZZ
@given(st.sampled_from(REGISTRY), any_bytes)
def test_every_registered_parser_takes_any_bytes(name: str, data: bytes) -> None:
    src = SOURCES[name]
    try:
        result = src.parse_bytes(data, f"fuzz-{name}")
    except ValueError as error:
        # dcgm_text's documented contract: lines without a timestamp need a scrape time, which the
        # ingest path always gives (the file's mtime, through parse_path).
        assert name == "dcgm_text" and "no scraped_at was given" in str(error)
        return
    check(result, tuple(t for t in src.tables if t in result.tables))


# -- end to end: a mutated real file through the ingest path into a temporary warehouse ----------
DAY = dt.date(2026, 11, 1)
E2E = settings(FUZZ, max_examples=int(os.environ.get("FUZZ_E2E_EXAMPLES", "15")))
E2E_CASES = {
    "dcgm_text": ("fuzz.prom", st.sampled_from(DCGM_SAMPLES).map(_read).flatmap(mutated)),
    "prometheus": ("fuzz.json", st.sampled_from(PROM_SAMPLES).map(_read).flatmap(mutated)),
    "slurm_sacct_json": (
        "fuzz.json",
        st.sampled_from(SACCT_JSON_SAMPLES).map(lambda p: json.loads(p.read_bytes())).flatmap(json_mutated).map(dump),
    ),
    "slurm_sacct": ("fuzz.txt", mutated(_read(PARSABLE2_SAMPLE))),
    "governance_actions": ("fuzz.jsonl", json_lines_mutated(GOVERNANCE_SAMPLE)),
}


@E2E
@given(st.sampled_from(sorted(E2E_CASES)).flatmap(lambda n: st.tuples(st.just(n), E2E_CASES[n][1])))
def test_mutated_file_ingests_and_the_log_adds_up(tmp_path_factory: pytest.TempPathFactory,
                                                  case: tuple[str, bytes]) -> None:
    from pipelines.ingest import ingest_partition, landing_folder
    from pipelines.warehouse import Warehouse

    name, data = case
    wh = Warehouse(tmp_path_factory.mktemp("fuzz") / "gpupool")
    folder = landing_folder(wh, name, DAY)
    folder.mkdir(parents=True)
    (folder / E2E_CASES[name][0]).write_bytes(data)
    report = ingest_partition(wh, name, DAY)
    with wh.connect(read_only=True) as con:
        (read, loaded, quarantined), = con.execute(
            "select records_read, records_loaded, records_quarantined from ops.ingest_log where ingest_source = ?",
            [name]).fetchall()
        q = con.sql(f"select * from ops.quarantine where ingest_source = '{name}'").pl()
        tables = {t: con.sql(f"select * from raw.{t}").pl() for t in SOURCES[name].tables}
    assert read == loaded + quarantined == report.records_read
    assert (loaded, quarantined) == (report.records_loaded, report.records_quarantined)
    # every quarantined record has a row saying why; a record may have several (one per broken rule)
    assert q.select(pl.col("reason").is_null() | (pl.col("reason") == "")).sum().item() == 0
    located = q.filter(pl.col("line_number").is_not_null()).select("source_file", "line_number").n_unique()
    assert located + q.get_column("line_number").null_count() >= quarantined
    first = SOURCES[name].tables[0]
    if first in ("dcgm_samples", "governance_actions"):  # 1:1 with records (on whichever day they fall)
        assert tables[first].height == loaded
        assert q.height == quarantined
    for t, frame in tables.items():
        c = contract(t)
        assert not any(frame.select(c.required).null_count().row(0)), t
        for column in (k for k, v in c.schema.items() if v == pl.Float64):
            assert frame.get_column(column).drop_nulls().is_finite().all(), (t, column)
    if first == "dcgm_samples":
        samples = tables[first]
        ratio = samples.filter(pl.col("metric").is_in(RATIO_METRICS))
        assert ratio.get_column("value").is_between(0, 1).all(), "activity ratio outside 0..1 loaded"
        percent = samples.filter(pl.col("metric").is_in(PERCENT_METRICS))
        assert percent.get_column("value").is_between(0, 100).all()


# -- regressions: the minimal inputs the properties above found, each a crash before its fix ------
SACCT_HEADER = "JobID|State|Submit|Start|End|ExitCode|Priority|NodeList|AllocTRES\n"
SACCT_ROW = "1|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:00:01|{exit}|{priority}|{nodes}|{tres}\n"


def test_prometheus_duckdb_message_cut_inside_a_character_is_a_quarantined_document() -> None:
    # DuckDB quotes the bad JSON in its error, cut inside the UTF-8 of '𐀀': UnicodeDecodeError escaped
    data = dump({"status": "success", "data": [{"\x1f\x1f\x1f": 1e16, "ࠀ𐀀": None}]})
    result = check_prometheus(data)
    assert result.records_read == 1 and result.quarantine.item(0, "line_number") is None
    assert "not a query response" in result.quarantine.item(0, "reason")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("tres", "gres/gpu=99999999999", "allocated GPUs 99999999999 out of range for a 32-bit integer"),
        ("tres", "gres/gpu:a=2147483647,gres/gpu:b=2147483647", "allocated GPUs 4294967294 out of range"),
        ("exit", "99999999999:0", "exit code 99999999999 out of range"),
        ("exit", "0:99999999999", "exit code 100000000127 out of range"),
        ("tres", "gres/gpu=²", "gres/gpu count '²' is not an integer"),
        ("priority", "²", "Priority is '²', expected an integer"),
        ("nodes", "a[²]", "has a bad range '²'"),
        ("nodes", "a[1-²]", "has a bad range '1-²'"),
    ],
)
def test_parsable2_out_of_range_or_non_ascii_numbers_are_quarantined(field: str, value: str, reason: str) -> None:
    fields = {"exit": "0:0", "priority": "1", "nodes": "a", "tres": "gres/gpu=1", field: value}
    result = check_parsable2((SACCT_HEADER + SACCT_ROW.format(**fields)).encode())
    assert result.records_read == 1 and result.records_loaded == 0
    assert reason in result.quarantine.item(0, "reason")


def _sacct_json_with(change: dict) -> bytes:
    doc = json.loads((REAL_DATA / "slurm" / "sacct_json_slurm_23_11_5_mila_SARC.json").read_bytes())
    job = doc["jobs"][0]
    for path, value in change.items():
        *parents, last = path.split(".")
        target = job
        for key in parents:
            target = target[key]
        target[last] = value
    return dump(doc)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"time.submission": 10**20}, "field 'time.submission' is 100000000000000000000, out of range for a time"),
        ({"time.start": 10**12}, "field 'time.start' is 1000000000000, out of range for a time"),
        ({"exit_code.return_code": 10**12}, "exit code 1000000000000 out of range"),
        ({"nodes": "a[²]"}, "has a bad range '²'"),
    ],
)
def test_sacct_json_out_of_range_numbers_are_quarantined(change: dict, reason: str) -> None:
    result = check_sacct_json(_sacct_json_with(change))
    assert result.records_read == 1 and result.records_loaded == 0
    assert reason in result.quarantine.item(0, "reason")


def _workload_with_gpus(quantity: object) -> bytes:
    doc = json.loads(WORKLOADS_SAMPLE.read_bytes())
    doc["items"] = doc["items"][:1]
    doc["items"][0]["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] = quantity
    return dump(doc)


@pytest.mark.parametrize(
    ("quantity", "reason"),
    [("²", "expected a whole number of devices"), ("99999999999", "more devices than a node holds"),
     (2**40, "more devices than a node holds")],
)
def test_kueue_gpu_quantity_not_a_device_count_is_quarantined(quantity: object, reason: str) -> None:
    result = check_kueue(_workload_with_gpus(quantity))
    assert result.records_read == 1 and result.records_loaded == 0
    assert reason in result.quarantine.item(0, "reason")


def test_kueue_topology_domain_count_is_cut_to_the_admitted_count() -> None:
    # the TAS assignment's domains were expanded pod by pod before being cut: a huge count hung
    doc = json.loads(WORKLOADS_SAMPLE.read_bytes())
    item = next(i for i in doc["items"] if "topologyAssignment" in json.dumps(i))
    for psa in item["status"]["admission"]["podSetAssignments"]:
        for domain in (psa.get("topologyAssignment") or {}).get("domains", []):
            domain["count"] = 2**31 - 1
    doc["items"] = [item]
    result = kueue.parse_kueue_workloads(dump(doc), "fuzz.json", [])  # no pods: placement from TAS
    check(result, ("job_events", "job_gpus"))
    assert result.records_loaded == 1


def _squeue_with(change: dict) -> bytes:
    doc = json.loads((REPO_ROOT / "tests" / "slurm" / "fixtures" / "squeue.json").read_bytes())
    job = next(j for j in doc["jobs"] if j.get("gres_detail"))
    doc["jobs"] = [{**job, **{k: (v * len(job["gres_detail"]) if k == "gres_detail" else v) for k, v in change.items()}}]
    return dump(doc)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"start_time": 10**20}, "start_time 100000000000000000000 out of range for a time"),
        ({"restart_cnt": 2**40}, "restart_cnt 1099511627776 out of range"),
        ({"gres_detail": ["gpu:1(IDX:²)"]}, "bad index range '²'"),
        ({"gres_detail": ["gpu:1(IDX:99999999999)"]}, "goes past what a node holds"),
        ({"gres_detail": ["gpu:1(IDX:0-99999999)"]}, "goes past what a node holds"),  # hung building 10^8 rows
        ({"gres_detail": ["gpu:a100_3g.20gb:99999999999(IDX:0)"]}, "is more than a node holds"),
    ],
)
def test_squeue_out_of_range_numbers_are_quarantined(change: dict, reason: str) -> None:
    result = check_squeue(_squeue_with(change))
    assert result.records_read == 1 and result.records_loaded == 0
    assert reason in result.quarantine.item(0, "reason")


@pytest.mark.parametrize("time", [1e300, 1e13, -9e12, 253402300800])
def test_prometheus_time_beyond_year_9999_is_quarantined(time: float) -> None:
    # 1e300 made a null sampled_at and a TypeError in order_and_dedupe; -9e12 loaded year -283,000
    doc = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "h"}, "value": [time, "1"]}]}}
    result = check_prometheus(dump(doc))
    assert result.records_loaded == 0 and result.quarantine.item(0, "reason") == f"time out of range: {time}"


@pytest.mark.parametrize("ts", ["253402300800000", "-62135596800001", "9000000000000000"])
def test_dcgm_text_timestamp_beyond_year_9999_is_quarantined(ts: str) -> None:
    # loaded before as a sample in year 10000 or later (Polars panics turning it into a datetime)
    result = check_dcgm(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="h"}} 1 {ts}\n'.encode())
    assert result.records_loaded == 0 and result.quarantine.item(0, "reason") == f"timestamp out of range: {ts}"


@pytest.mark.parametrize("points", [[[None, "0.0"]], [None], [[1, "1"], None]])
def test_prometheus_null_time_or_null_point_is_quarantined(points: list) -> None:
    # a null time made a null reason (format of null is null): the point loaded with no sampled_at
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "node-1"}, "values": points}]}}
    result = check_prometheus(dump(doc))
    assert result.records_read == len(points)
    assert result.records_loaded == sum(1 for p in points if p and p[0] is not None)


def test_pool_snapshot_huge_replica_count_is_quarantined() -> None:
    # one inventory row per replica: 2**31 - 1 replicas hung the parser (5,000,000 took 13 s)
    doc = json.loads((FIXTURES / "allocator_pool.json").read_bytes())
    gpu = next(g for n in doc["nodes"] for g in n["gpus"] if g.get("share_mode") == "timeslice")
    gpu["replicas"] = 2**31 - 1
    result = check_pool(dump(doc))
    assert result.records_read == result.records_loaded + 1
    assert "more than 1024 time-sliced replicas" in result.quarantine.item(0, "reason")


@pytest.mark.parametrize(
    ("number", "reason"),
    [("1e400", "invalid JSON: number 1e400 is out of range for a double"),
     ("-1e400", "invalid JSON: number -1e400 is out of range for a double"),
     ("1" + "0" * 400, "field 'gpu_hours' is 1000000000000000000000000000000000000000..., out of range for a number")],
)
def test_json_number_beyond_a_double_is_quarantined(number: str, reason: str) -> None:
    # 1e400 was read as infinity and loaded as gpu_hours; 10**400 crashed float() (OverflowError)
    line = json.dumps({**GOVERNANCE_LINE, "gpu_hours": 0.5}).replace('"gpu_hours": 0.5', f'"gpu_hours": {number}')
    result = check_jsonl("governance_actions", line.encode() + b"\n")
    assert result.records_loaded == 0 and result.quarantine.item(0, "reason") == reason


def test_pool_snapshot_infinite_quota_is_quarantined() -> None:
    text = (FIXTURES / "allocator_pool.json").read_text().replace('"A100": 16', '"A100": 1e400', 1)
    assert "1e400" in text
    result = check_pool(text.encode())
    assert result.records_read == 1 and "out of range for a double" in result.quarantine.item(0, "reason")


@pytest.mark.parametrize("stats", [{"requeueState": {"count": 2**31 - 1}},
                                   {"schedulingStats": {"evictions": [{"count": 2**31 - 1}, {"count": 5}]}}])
def test_kueue_eviction_count_beyond_int32_is_quarantined(stats: dict) -> None:
    # attempt = evictions + 1 overflowed the INTEGER column: a TypeError for the whole file
    doc = json.loads(WORKLOADS_SAMPLE.read_bytes())
    doc["items"] = doc["items"][:1]
    doc["items"][0]["status"].update(stats)
    result = check_kueue(dump(doc))
    assert result.records_read == 1 and "out of range for a 32-bit integer" in result.quarantine.item(0, "reason")


@pytest.mark.parametrize(("where", "value"), [("cluster", 5), ("cluster", ["x"]), ("errors", 5)])
def test_sacct_json_odd_document_fields_do_not_break_the_jobs(where: str, value: object) -> None:
    # meta.slurm.cluster 5 went into the String cluster column (TypeError); "errors": 5 was iterated
    doc = json.loads((REAL_DATA / "slurm" / "sacct_json_slurm_23_11_5_mila_SARC.json").read_bytes())
    if where == "cluster":
        doc["meta"]["slurm"]["cluster"] = value
        doc["jobs"][0].pop("cluster", None)
    else:
        doc[where] = value
    result = check_sacct_json(dump(doc))
    assert result.records_read == result.records_loaded == 1
