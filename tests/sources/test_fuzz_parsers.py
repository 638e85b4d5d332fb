"""Fuzzing the parsers (issue 11, section 6): whatever the input, no exception escapes a parser,
every record is accounted for (read = loaded + quarantined), every quarantine row says why, and
what loads satisfies the raw table's contract.

Three kinds of input per parser: arbitrary bytes, mutations of real samples (tests/fixtures/real-data,
and the project's own fixtures where no public sample exists), and structured inputs built from
the format's grammar. The k8s audit parser is fuzzed elsewhere. Regression tests for the bugs
these properties found are in test_fuzz_regressions.py; strategies and invariants in fuzzing.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re

import polars as pl
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from expectations.suites import PERCENT_METRICS, RATIO_METRICS
from pipelines.contracts import contract
from pipelines.sources import dcgm_text, kueue, labels, slurm_sacct
from pipelines.sources.registry import SOURCES
from tests.conftest import REAL_DATA
from tests.sources.fuzzing import (
    DCGM_SAMPLES,
    FIXTURES,
    FUZZ,
    GOVERNANCE_SAMPLE,
    JSONL_PARSERS,
    NASTY_TEXT,
    PARSABLE2_SAMPLE,
    PODS_DOC,
    PROM_SAMPLES,
    SACCT_JSON_SAMPLES,
    SKIPPED_SOURCES,
    SQUEUE_SAMPLES,
    WORKLOADS_SAMPLE,
    any_bytes,
    check,
    check_dcgm,
    check_jsonl,
    check_kueue,
    check_parsable2,
    check_pool,
    check_prometheus,
    check_sacct_json,
    check_squeue,
    dump,
    is_unicode,
    json_lines_mutated,
    json_mutated,
    json_scalars,
    jsonl_sample,
    mutated,
    read_sample,
)

pytestmark = pytest.mark.slow  # Hypothesis over every parser, and ingests of mutated files


@FUZZ
@given(any_bytes)
def test_dcgm_text_arbitrary_bytes(data: bytes) -> None:
    check_dcgm(data)


@FUZZ
@given(st.sampled_from(DCGM_SAMPLES).map(read_sample).flatmap(mutated))
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
    assume(all(is_unicode(r["key"]) and is_unicode(r["value"]) for r in rows))  # Polars strings are UTF-8
    pairs = pl.DataFrame(rows, schema=labels.PAIRS_SCHEMA)
    ids = pl.Series("series_id", range(len(series)), dtype=pl.UInt32)
    out = labels.map_labels(ids, pairs)
    assert out.get_column("series_id").to_list() == ids.to_list()  # one row per series, in order
    fine = out.filter(pl.col("label_error").is_null())
    assert fine.get_column("host").null_count() == 0 and fine.get_column("gpu").null_count() == 0
    errors = out.get_column("label_error").drop_nulls()
    assert (errors.str.strip_chars() != "").all()


# -- Prometheus query_range / query ---------------------------------------------------------------


@FUZZ
@given(any_bytes)
def test_prometheus_arbitrary_bytes(data: bytes) -> None:
    check_prometheus(data)


@FUZZ
@given(st.sampled_from(PROM_SAMPLES).map(read_sample).flatmap(mutated))
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




@FUZZ
@given(any_bytes)
def test_parsable2_arbitrary_bytes(data: bytes) -> None:
    check_parsable2(data)


@FUZZ
@given(st.sampled_from([PARSABLE2_SAMPLE, *sorted((REAL_DATA / "slurm").glob("*.txt"))]).map(read_sample).flatmap(mutated))
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


@FUZZ
@given(any_bytes)
def test_sacct_json_arbitrary_bytes(data: bytes) -> None:
    check_sacct_json(data)


@FUZZ
@given(st.sampled_from(SACCT_JSON_SAMPLES).map(read_sample).flatmap(mutated))
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




@FUZZ
@given(st.sampled_from(SQUEUE_SAMPLES).map(read_sample).flatmap(mutated))
def test_squeue_mutated_samples(data: bytes) -> None:
    check_squeue(data)


@FUZZ
@given(st.sampled_from(SQUEUE_SAMPLES).map(lambda p: json.loads(p.read_bytes())).flatmap(json_mutated))
def test_squeue_samples_with_random_shapes(doc: object) -> None:
    check_squeue(dump(doc))


# -- Kueue Workloads ------------------------------------------------------------------------------




@FUZZ
@given(any_bytes)
def test_kueue_arbitrary_bytes(data: bytes) -> None:
    check_kueue(data)


@FUZZ
@given(mutated(read_sample(WORKLOADS_SAMPLE)))
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






@FUZZ
@given(st.sampled_from(sorted(JSONL_PARSERS)), any_bytes)
def test_json_lines_logs_arbitrary_bytes(name: str, data: bytes) -> None:
    check_jsonl(name, data)


@FUZZ
@given(st.sampled_from(sorted(JSONL_PARSERS)).flatmap(lambda n: st.tuples(st.just(n), mutated(jsonl_sample(n)))))
def test_json_lines_logs_mutated_samples(case: tuple[str, bytes]) -> None:
    check_jsonl(*case)


@FUZZ
@given(st.sampled_from(sorted(JSONL_PARSERS)).flatmap(
    lambda n: st.tuples(st.just(n), json_lines_mutated(jsonl_sample(n)))))
def test_json_lines_logs_with_random_shapes(case: tuple[str, bytes]) -> None:
    check_jsonl(*case)




@FUZZ
@given(any_bytes)
def test_pool_snapshot_arbitrary_bytes(data: bytes) -> None:
    check_pool(data)


@FUZZ
@given(mutated(read_sample(FIXTURES / "allocator_pool.json")))
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
    "dcgm_text": ("fuzz.prom", st.sampled_from(DCGM_SAMPLES).map(read_sample).flatmap(mutated)),
    "prometheus": ("fuzz.json", st.sampled_from(PROM_SAMPLES).map(read_sample).flatmap(mutated)),
    "slurm_sacct_json": (
        "fuzz.json",
        st.sampled_from(SACCT_JSON_SAMPLES).map(lambda p: json.loads(p.read_bytes())).flatmap(json_mutated).map(dump),
    ),
    "slurm_sacct": ("fuzz.txt", mutated(read_sample(PARSABLE2_SAMPLE))),
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
