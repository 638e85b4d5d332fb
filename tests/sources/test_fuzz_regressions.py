"""Regressions the parser fuzzing found (test_fuzz_parsers.py): the minimal inputs, each a crash
before its fix, now a quarantined record with its reason."""

from __future__ import annotations

import json

import pytest

from pipelines.paths import REPO_ROOT
from pipelines.sources import kueue
from tests.conftest import REAL_DATA
from tests.sources.fuzzing import (
    FIXTURES,
    GOVERNANCE_LINE,
    WORKLOADS_SAMPLE,
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
)

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
