"""The allocator's event log, audit log and pool snapshot (hand-made fixtures in the v1 formats)."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from pipelines.contracts import contract
from pipelines.sources.allocator_log import parse_audit_log, parse_event_log, parse_pool_snapshot
from pipelines.sources.base import ParseResult

FIXTURES = Path(__file__).parent / "fixtures"
SUBMIT = {
    "schema": "gpupool.event/v1", "event_id": "ev-s", "ts": "2026-11-01T08:00:00Z", "type": "submit",
    "job_id": "j-9", "attempt": 1, "tenant": "vision", "queue": "vision-train", "user": "alice",
    "job_name": "x", "template": "training", "gpu_model": "A100", "gpus": 1,
}
START = {
    "schema": "gpupool.event/v1", "event_id": "ev-t", "ts": "2026-11-01T08:00:05Z", "type": "start",
    "job_id": "j-9", "attempt": 1, "gpus": [{"host": "a100-01", "gpu": 0, "uuid": "GPU-1", "fraction": 1.0}],
}
AUDIT = {
    "schema": "gpupool.audit/v1", "audit_id": "au-9", "ts": "2026-11-01T07:00:00Z", "actor": "ops-admin",
    "action": "queue.update", "object_kind": "queue", "object_name": "vision-train", "decision": "applied",
}


def check(result: ParseResult, tables: tuple[str, ...]) -> None:
    assert result.records_read == result.records_loaded + result.quarantine.height
    assert set(result.tables) == set(tables)
    for name in tables:
        assert result.tables[name].schema == contract(name).schema
    assert result.quarantine.schema == contract("quarantine").schema


def jsonl(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


# --- event log -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def events() -> ParseResult:
    path = FIXTURES / "allocator_events.jsonl"
    return parse_event_log(path.read_bytes(), path.name)


def test_event_log_fixture_loads_every_line(events: ParseResult) -> None:
    check(events, ("job_events", "job_gpus"))
    assert (events.records_read, events.records_loaded) == (13, 13)
    frame = events.tables["job_events"]
    assert frame["line_number"].to_list() == list(range(1, 14))
    assert frame.group_by("event_type").len().sort("event_type").rows() == [
        ("admit", 2), ("finish", 3), ("preempt", 1), ("start", 4), ("submit", 3),
    ]
    assert (frame["source"] == "allocator").all() and (frame["source_file"] == "allocator_events.jsonl").all()


def test_submit_fields_and_spec_json(events: ParseResult) -> None:
    submit = events.tables["job_events"].row(0, named=True)
    assert submit | {"source_file": None} == {
        "event_id": "ev-1", "occurred_at": datetime(2026, 11, 1, 8, 0), "event_type": "submit", "job_id": "j-1",
        "attempt": 1, "tenant": "vision", "queue": "vision-train", "user_name": "alice", "job_name": "resnet",
        "template": "training", "gpu_model": "A100", "gpus_requested": 2, "share_mode": "whole",
        "mig_profile": None, "priority": 50, "state": None, "reason": None, "exit_code": None,
        "spec_json": '{"checkpoint_policy":"hourly","expected_runtime_s":7200}',
        "source": "allocator", "source_file": None, "line_number": 1,
    }
    mig = events.tables["job_events"].filter(pl.col("event_id") == "ev-4").row(0, named=True)
    assert (mig["share_mode"], mig["mig_profile"], mig["template"]) == ("mig", "1g.10gb", "interactive")
    assert mig["occurred_at"] == datetime(2026, 11, 1, 8, 10, 0, 250000)
    assert mig["spec_json"] == '{"rollback":false,"time_limit_s":3600}'


def test_other_events_inherit_nothing(events: ParseResult) -> None:
    others = events.tables["job_events"].filter(pl.col("event_type") != "submit")
    for column in ("tenant", "queue", "user_name", "job_name", "template", "gpu_model", "gpus_requested",
                   "share_mode", "priority", "spec_json"):
        assert others[column].is_null().all(), column
    finish = events.tables["job_events"].filter(pl.col("event_id") == "ev-9").row(0, named=True)
    assert (finish["state"], finish["exit_code"], finish["reason"], finish["attempt"]) == ("FAILED", 1, "NCCL timeout", 2)
    assert finish["occurred_at"] == datetime(2026, 11, 1, 8, 40)  # +01:00 converted to UTC
    preempt = events.tables["job_events"].filter(pl.col("event_type") == "preempt").row(0, named=True)
    assert preempt["reason"] == "preempted by job j-9"


def test_start_placements_become_job_gpus(events: ParseResult) -> None:
    gpus = events.tables["job_gpus"]
    assert gpus.select("job_id", "attempt", "host", "gpu", "gpu_instance_id", "gpu_instance_profile", "fraction").rows() == [
        ("j-1", 1, "a100-01", 0, None, None, 1.0),
        ("j-1", 1, "a100-01", 1, None, None, 1.0),
        ("j-2", 1, "a100-02", 0, 7, "1g.10gb", 0.142857),
        ("j-2", 2, "a100-02", 0, 8, "1g.10gb", 0.142857),
        ("j-3", 1, "l40s-01", 2, 1, None, 0.25),
    ]
    assert gpus["assigned_at"].to_list() == [
        datetime(2026, 11, 1, 8, 0, 5), datetime(2026, 11, 1, 8, 0, 5), datetime(2026, 11, 1, 8, 10, 2),
        datetime(2026, 11, 1, 9, 5), datetime(2026, 11, 1, 10, 0, 1),
    ]
    assert gpus["uuid"][0] == "GPU-5a1c0f7e-0000-4000-8000-000000000001"
    assert gpus["gpu_model"].is_null().all() and (gpus["source"] == "allocator").all()


@pytest.mark.parametrize(
    ("bad", "reason", "stage"),
    [
        ('{"schema":"gpupool.event/v1","event_id":', "invalid JSON: Expecting value at column 41", "parse"),
        ({**SUBMIT, "schema": None}, "field 'schema' is missing, expected 'gpupool.event/v1'", "validate"),
        ({**SUBMIT, "schema": "gpupool.event/v2"}, "unknown schema 'gpupool.event/v2', expected 'gpupool.event/v1'", "validate"),
        ({**SUBMIT, "tenant": None}, "field 'tenant' is null", "validate"),
        ({k: v for k, v in SUBMIT.items() if k != "gpu_model"}, "field 'gpu_model' is missing", "validate"),
        ({**SUBMIT, "attempt": "1"}, "field 'attempt' is string, expected integer", "validate"),
        ({**SUBMIT, "attempt": 0}, "field 'attempt' is 0, expected at least 1", "validate"),
        ({**SUBMIT, "gpus": True}, "field 'gpus' is boolean, expected integer", "validate"),
        ({**SUBMIT, "gpus": 2**40}, "field 'gpus' is 1099511627776, out of range for a 32-bit integer", "validate"),
        ({**SUBMIT, "template": "batch"},
         "field 'template' is 'batch', expected one of training, inference, experiment, interactive", "validate"),
        ({**SUBMIT, "type": "resume"},
         "field 'type' is 'resume', expected one of submit, admit, start, requeue, preempt, finish", "validate"),
        ({**SUBMIT, "ts": "2026-11-01T08:00:00"},
         "field 'ts' is '2026-11-01T08:00:00', expected an RFC 3339 time with Z or an offset", "validate"),
        ({**SUBMIT, "spec": "hourly"}, "field 'spec' is string, expected object", "validate"),
        ({**SUBMIT, "share_mode": "mig"},
         "field 'mig_profile' is missing: a submit with share_mode mig names its MIG profile", "validate"),
        ({**START, "gpus": 2}, "field 'gpus' is integer, expected array", "validate"),
        ({**START, "gpus": [{"gpu": 0, "fraction": 1.0}]}, "field 'gpus[0].host' is missing", "validate"),
        ({**START, "gpus": [{"host": "h", "fraction": 1.5}]}, "field 'gpus[0].fraction' is 1.5, expected a share in (0, 1]", "validate"),
        ({**START, "gpus": ["a100-01"]}, "gpus[0] is string, expected a JSON object", "validate"),
        ({**START, "type": "finish", "gpus": None}, "field 'state' is missing", "validate"),
        ({**START, "type": "finish", "state": "DONE"},
         ("field 'state' is 'DONE', expected one of COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, "
         "NODE_FAIL, PREEMPTED"), "validate"),
        ("[1, 2]", "line is array, expected a JSON object", "validate"),
        ('{"schema":"gpupool.event/v1","attempt":NaN}', "invalid JSON: NaN is not valid JSON", "parse"),
    ],
)
def test_bad_event_line_is_quarantined(bad: object, reason: str, stage: str) -> None:
    raw = bad if isinstance(bad, str) else json.dumps({k: v for k, v in bad.items() if v is not None or k == "tenant"})
    result = parse_event_log(jsonl(SUBMIT, raw, START), "bad.jsonl")
    check(result, ("job_events", "job_gpus"))
    assert (result.records_read, result.records_loaded) == (3, 2)
    assert result.quarantine.select("line_number", "reason", "stage", "raw").rows() == [(2, reason, stage, raw)]
    assert result.quarantine["source"].to_list() == ["allocator_events"]
    assert result.tables["job_events"]["event_id"].to_list() == ["ev-s", "ev-t"]
    assert result.tables["job_gpus"].height == 1


def test_rejected_start_leaves_no_placement() -> None:
    bad_second_gpu = {**START, "gpus": [START["gpus"][0], {"host": "a100-01", "gpu": -1, "fraction": 1.0}]}
    result = parse_event_log(jsonl(bad_second_gpu), "x.jsonl")
    check(result, ("job_events", "job_gpus"))
    assert result.tables["job_gpus"].is_empty() and result.tables["job_events"].is_empty()
    assert result.quarantine["reason"].to_list() == ["field 'gpus[1].gpu' is -1, expected at least 0"]


def test_event_log_empty_blank_and_truncated() -> None:
    empty = parse_event_log(b"", "empty.jsonl")
    check(empty, ("job_events", "job_gpus"))
    assert (empty.records_read, empty.quarantine.height) == (0, 0)
    text = "\n\r\n" + jsonl(SUBMIT).replace("\n", "\r\n") + "   \n" + json.dumps(START)[:50]
    truncated = parse_event_log(text.encode(), "cut.jsonl")
    check(truncated, ("job_events", "job_gpus"))
    assert (truncated.records_read, truncated.records_loaded) == (2, 1)
    assert truncated.tables["job_events"]["line_number"].to_list() == [3]
    row = truncated.quarantine.row(0, named=True)
    assert (row["line_number"], row["stage"]) == (5, "parse")
    assert row["reason"].endswith("(last line has no newline: truncated?)")


# --- audit log -------------------------------------------------------------------------------


def test_audit_log_fixture() -> None:
    path = FIXTURES / "allocator_audit.jsonl"
    result = parse_audit_log(path.read_text(), path.name)
    check(result, ("audit_events",))
    assert (result.records_read, result.records_loaded) == (4, 4)
    audits = result.tables["audit_events"]
    first = audits.row(0, named=True)
    assert first | {"source_file": None} == {
        "audit_id": "au-1", "occurred_at": datetime(2026, 11, 1, 7, 0), "actor": "ops-admin", "actor_role": "admin",
        "action": "quota.update", "object_kind": "queue", "object_namespace": "vision", "object_name": "vision-train",
        "before_json": '{"quota":{"A100":12}}', "after_json": '{"quota":{"A100":16,"H100":8}}',
        "decision": "applied", "reason": "Q4 planning", "stage": None, "response_code": None,
        "request_id": "req-17", "idempotency_key": None, "api_version": "gpupool.audit/v1",
        "source": "allocator", "source_file": None, "line_number": 1,
    }
    assert audits["decision"].to_list() == ["applied", "applied", "already_done", "deny"]
    assert audits["idempotency_key"].to_list() == [None, "reclaim:j-3:1", "reclaim:j-3:1", None]
    assert audits.row(3, named=True)["object_namespace"] is None


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({**AUDIT, "actor": None}, "field 'actor' is missing"),
        ({**AUDIT, "actor": "  "}, "field 'actor' is empty"),
        ({**AUDIT, "object_name": 42}, "field 'object_name' is integer, expected string"),
        ({**AUDIT, "decision": "maybe"},
         ("field 'decision' is 'maybe', expected one of allow, deny, applied, refused, already_done, dry_run, "
         "proposed, approved")),
        ({**AUDIT, "actor_role": "root"},
         "field 'actor_role' is 'root', expected one of admin, governance_bot, tenant_member, system"),
        ({**AUDIT, "before": "quota=12"}, "field 'before' is string, expected object"),
        ({**AUDIT, "schema": "gpupool.event/v1"}, "unknown schema 'gpupool.event/v1', expected 'gpupool.audit/v1'"),
    ],
)
def test_bad_audit_line_is_quarantined(bad: dict[str, object], reason: str) -> None:
    raw = json.dumps({k: v for k, v in bad.items() if v is not None})
    result = parse_audit_log(jsonl(AUDIT, raw), "a.jsonl")
    check(result, ("audit_events",))
    assert (result.records_read, result.records_loaded) == (2, 1)
    assert result.quarantine.select("line_number", "reason", "source").rows() == [(2, reason, "allocator_audit")]


# --- pool snapshot ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> ParseResult:
    path = FIXTURES / "allocator_pool.json"
    return parse_pool_snapshot(path.read_bytes(), path.name)


def test_pool_snapshot_records_are_gpus_and_queues(pool: ParseResult) -> None:
    check(pool, ("gpu_inventory", "queue_quotas"))
    assert (pool.records_read, pool.records_loaded) == (6, 6)  # 4 GPUs, 2 queues
    inventory = pool.tables["gpu_inventory"]
    assert inventory.select("host", "gpu", "share_mode", "gpu_instance_id", "gpu_instance_profile", "memory_mib").rows() == [
        ("a100-01", 0, "whole", None, None, 81920),
        ("a100-01", 1, "whole", None, None, 81920),  # share_mode defaults to whole
        ("a100-02", 0, "mig", 1, "3g.40gb", 40192),
        ("a100-02", 0, "mig", 7, "1g.10gb", 9728),
        ("a100-02", 0, "mig", 8, "1g.10gb", 9728),
        ("l40s-01", 2, "timeslice", 0, None, 46068),
        ("l40s-01", 2, "timeslice", 1, None, 46068),
        ("l40s-01", 2, "timeslice", 2, None, 46068),
        ("l40s-01", 2, "timeslice", 3, None, 46068),
    ]
    assert inventory["fraction"].to_list() == pytest.approx([1, 1, 0.428571, 1 / 7, 1 / 7, 0.25, 0.25, 0.25, 0.25])
    assert inventory["node_pool"].to_list() == ["a100"] * 5 + [None] * 4
    assert inventory["snapshot_at"].unique().to_list() == [datetime(2026, 11, 1)]
    assert inventory["model_name"][0] == "NVIDIA A100-SXM4-80GB"


def test_pool_snapshot_queue_quotas(pool: ParseResult) -> None:
    quotas = pool.tables["queue_quotas"]
    assert quotas.drop("snapshot_at", "source_file").rows() == [
        ("vision-train", "vision", "A100", 16.0, 50, False, 16, 259200, 3, "allocator"),
        ("vision-train", "vision", "H100", 8.0, 50, False, 16, 259200, 3, "allocator"),
        ("nlp-dev", "nlp", "A100", 1.5, 10, True, None, None, None, "allocator"),
    ]


def pool_doc(**changes: object) -> dict[str, object]:
    doc = json.loads((FIXTURES / "allocator_pool.json").read_text())
    doc.update(changes)
    return doc


def test_bad_gpus_and_queues_are_quarantined_by_record_index() -> None:
    doc = pool_doc()
    doc["nodes"][0]["gpus"][1].pop("gpu_model")
    doc["nodes"][1]["gpus"][0]["instances"][1]["profile"] = "tiny"
    doc["nodes"][1]["gpus"][0]["instances"][1].pop("fraction", None)
    doc["nodes"].append({"gpus": [{"gpu": 0, "gpu_model": "H100"}, {"gpu": 1, "gpu_model": "H100"}]})
    doc["nodes"].append({"host": "a100-01", "gpus": [{"gpu": 0, "gpu_model": "A100"}]})
    doc["nodes"].append({"host": "l40s-02", "gpus": [{"gpu": 0, "gpu_model": "L40S", "share_mode": "timeslice"}]})
    doc["queues"][1]["quota"] = {}
    doc["queues"].append({"queue": "vision-train", "tenant": "vision", "quota": {"A100": 1}})
    doc["queues"].append({"queue": "q", "tenant": "t", "quota": {"A100": "8"}})
    result = parse_pool_snapshot(json.dumps(doc), "pool.json")
    check(result, ("gpu_inventory", "queue_quotas"))
    assert (result.records_read, result.records_loaded) == (12, 3)
    assert result.quarantine.select("line_number", "reason").rows() == [
        (2, "nodes[0].gpus[1]: field 'gpu_model' is missing"),
        (3, "nodes[1].gpus[0]: field 'instances[1].profile' is 'tiny', not a MIG profile like 3g.40gb"),
        (5, "nodes[3]: field 'host' is missing"),
        (6, "nodes[3]: field 'host' is missing"),
        (7, "nodes[4].gpus[0]: duplicate GPU 0 on host a100-01 (first at nodes[0].gpus[0])"),
        (8, "nodes[5].gpus[0]: field 'replicas' is missing"),
        (10, "queues[1]: field 'quota' is empty: a queue needs a quota for at least one GPU model"),
        (11, "queues[2]: duplicate queue 'vision-train' (first at queues[0])"),
        (12, "queues[3]: field 'quota.A100' is string, expected number"),
    ]
    assert json.loads(result.quarantine["raw"][0]) == {k: v for k, v in doc["nodes"][0]["gpus"][1].items()}
    assert result.tables["gpu_inventory"].select("host", "gpu").unique().height == 2


def test_mig_fraction_is_derived_from_the_profile() -> None:
    doc = pool_doc(queues=[])
    del doc["nodes"][1]["gpus"][0]["instances"][0]["fraction"]
    doc["nodes"] = [doc["nodes"][1], {"host": "a30-01", "gpus": [
        {"gpu": 0, "gpu_model": "A30", "share_mode": "mig", "instances": [{"gpu_instance_id": 1, "profile": "2g.12gb"}]}
    ]}]
    result = parse_pool_snapshot(json.dumps(doc), "pool.json")
    check(result, ("gpu_inventory", "queue_quotas"))
    assert result.tables["gpu_inventory"]["fraction"].to_list() == pytest.approx([3 / 7, 1 / 7, 1 / 7, 2 / 4])


@pytest.mark.parametrize(
    ("text", "reason", "line_number"),
    [
        ('{"schema": "gpupool.pool/v1",\n "nodes": [', "invalid JSON document: Expecting value at line 2 column 12", 2),
        (json.dumps(pool_doc(schema="gpupool.pool/v2")), "unknown schema 'gpupool.pool/v2', expected 'gpupool.pool/v1'", None),
        (json.dumps(pool_doc(snapshot_at="today")),
         "field 'snapshot_at' is 'today', expected an RFC 3339 time with Z or an offset", None),
        (json.dumps(pool_doc(nodes={})), "field 'nodes' is object, expected array", None),
        ("[]", "document is array, expected a JSON object", None),
    ],
)
def test_bad_pool_document_is_one_quarantined_record(text: str, reason: str, line_number: int | None) -> None:
    result = parse_pool_snapshot(text, "pool.json")
    check(result, ("gpu_inventory", "queue_quotas"))
    assert (result.records_read, result.records_loaded) == (1, 0)
    assert result.quarantine.select("line_number", "reason").rows() == [(line_number, reason)]
    assert result.tables["gpu_inventory"].is_empty() and result.tables["queue_quotas"].is_empty()


def test_pool_empty_file() -> None:
    result = parse_pool_snapshot(b"", "pool.json")
    check(result, ("gpu_inventory", "queue_quotas"))
    assert (result.records_read, result.notes) == (0, ["empty file"])
