"""Kubernetes audit JSON Lines: the 51 real Falco trace events, and broken or unusual lines."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from pipelines.contracts import contract
from pipelines.sources.base import ParseResult
from pipelines.sources.k8s_audit import parse_k8s_audit

EVENT = {
    "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": "a-1",
    "stage": "ResponseComplete", "verb": "update",
    "user": {"username": "system:serviceaccount:gpupool:governor", "groups": ["system:serviceaccounts"]},
    "objectRef": {"resource": "localqueues", "namespace": "vision", "name": "vision-train", "apiGroup": "kueue.x-k8s.io"},
    "responseStatus": {"code": 200},
    "requestReceivedTimestamp": "2026-11-01T08:00:00.100000Z", "stageTimestamp": "2026-11-01T08:00:00.200000Z",
    "annotations": {"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
}


def line(**changes: object) -> str:
    event = {**EVENT, **changes}
    return json.dumps({k: v for k, v in event.items() if v is not None})


def check(result: ParseResult) -> None:
    assert result.records_read == result.records_loaded + result.quarantine.height
    assert result.tables["audit_events"].schema == contract("audit_events").schema
    assert result.tables["audit_events"].height == result.records_loaded
    assert result.quarantine.schema == contract("quarantine").schema


@pytest.fixture
def falco(real_data: Path) -> ParseResult:
    path = real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl"
    return parse_k8s_audit(path.read_bytes(), path.name)


def test_real_falco_events_all_load(falco: ParseResult) -> None:
    check(falco)
    assert (falco.records_read, falco.records_loaded, falco.quarantine.height) == (51, 51, 0)
    audits = falco.tables["audit_events"]
    assert audits["line_number"].to_list() == list(range(1, 52))
    assert dict(audits.group_by("stage").len().rows()) == {"ResponseComplete": 49, "ResponseStarted": 2}
    assert dict(audits.group_by("api_version").len().rows()) == {
        None: 38, "audit.k8s.io/v1beta1": 9, "audit.k8s.io/v1": 4,
    }
    assert dict(audits.group_by("action").len().rows()) == {"create": 40, "delete": 9, "get": 1, "patch": 1}
    assert audits["decision"].unique().to_list() == ["allow"]
    assert (audits["audit_id"] == audits["request_id"]).all()
    assert audits["before_json"].is_null().all()
    assert (audits["source"] == "k8s").all()
    assert audits.filter(pl.col("reason").is_not_null()).height == 11
    assert audits["after_json"].is_null().sum() == 6  # 2 exec/attach and 4 Metadata-level secret events


def test_v1beta1_event_mapping(falco: ParseResult) -> None:
    row = falco.tables["audit_events"].row(0, named=True)
    after = json.loads(row.pop("after_json"))
    assert after["kind"] == "Namespace" and after["metadata"]["name"] == "foo"
    assert row | {"source_file": None} == {
        "audit_id": "841d3e6d-90d2-43df-8da4-684738bee3d5",
        "occurred_at": datetime(2018, 10, 25, 13, 58, 49, 736141),  # stageTimestamp, not timestamp
        "actor": "system:anonymous", "actor_role": "system:masters,system:authenticated",
        "action": "create", "object_kind": "namespaces", "object_namespace": None, "object_name": "foo",
        "before_json": None, "decision": "allow", "reason": None, "stage": "ResponseComplete",
        "response_code": 201, "request_id": "841d3e6d-90d2-43df-8da4-684738bee3d5", "idempotency_key": None,
        "api_version": "audit.k8s.io/v1beta1", "source": "k8s", "source_file": None, "line_number": 1,
    }


def test_v1_event_without_timestamp_field(falco: ParseResult) -> None:
    row = falco.tables["audit_events"].filter(pl.col("line_number") == 19).row(0, named=True)
    assert row["api_version"] == "audit.k8s.io/v1"
    assert row["occurred_at"] == datetime(2020, 3, 24, 18, 53, 49, 25530)
    assert (row["actor"], row["object_kind"], row["object_namespace"], row["object_name"]) == (
        "admin", "secrets", "kube-system", "bootstrap-token-ne7bxu"
    )
    assert row["after_json"] is None  # Metadata level: no request body


def test_event_without_api_version_and_subresource(falco: ParseResult) -> None:
    row = falco.tables["audit_events"].filter(pl.col("line_number") == 3).row(0, named=True)
    assert row["api_version"] is None
    assert (row["object_kind"], row["stage"], row["response_code"]) == ("pods/attach", "ResponseStarted", 101)
    assert row["object_name"] == "nginx-deployment-7998647bdf-phvq7"
    get_pod = falco.tables["audit_events"].filter(pl.col("line_number") == 28).row(0, named=True)
    assert get_pod["action"] == "get"
    assert json.loads(get_pod["after_json"])["kind"] == "Pod"  # responseObject when there is no requestObject


def test_stages_of_one_request_are_kept() -> None:
    text = "\n".join([
        line(stage="RequestReceived", stageTimestamp="2026-11-01T08:00:00.100000Z", responseStatus=None),
        line(requestObject={"spec": {"stopPolicy": "Hold"}}),
    ])
    result = parse_k8s_audit(text, "stages.jsonl")
    check(result)
    audits = result.tables["audit_events"]
    assert audits.select("audit_id", "stage", "response_code", "occurred_at").rows() == [
        ("a-1", "RequestReceived", None, datetime(2026, 11, 1, 8, 0, 0, 100000)),
        ("a-1", "ResponseComplete", 200, datetime(2026, 11, 1, 8, 0, 0, 200000)),
    ]
    assert audits["after_json"].to_list() == [None, '{"spec":{"stopPolicy":"Hold"}}']
    assert audits["object_kind"].to_list() == ["localqueues", "localqueues"]


def test_forbid_impersonation_and_fallback_times() -> None:
    text = "\n".join([
        line(
            annotations={"authorization.k8s.io/decision": "forbid", "authorization.k8s.io/reason": "no RBAC"},
            impersonatedUser={"username": "alice"}, responseStatus={"code": 403},
        ),
        line(auditID="a-2", apiVersion="audit.k8s.io/v1beta1", stageTimestamp=None, timestamp="2026-11-01T09:00:00Z"),
        line(auditID="a-3", stageTimestamp=None, objectRef=None),
    ])
    result = parse_k8s_audit(text.encode(), "x.jsonl")
    check(result)
    audits = result.tables["audit_events"]
    assert audits.select("decision", "reason", "response_code").row(0) == ("deny", "no RBAC; impersonating alice", 403)
    assert audits["occurred_at"].to_list()[1:] == [
        datetime(2026, 11, 1, 9, 0), datetime(2026, 11, 1, 8, 0, 0, 100000),
    ]
    assert audits.row(2, named=True)["object_kind"] is None


def test_event_list_items_are_records() -> None:
    items = [json.loads(line(auditID="l-1")), json.loads(line(auditID="l-2", verb=None))]
    text = line() + "\n" + json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items}) + "\n"
    result = parse_k8s_audit(text, "list.jsonl")
    check(result)
    assert (result.records_read, result.records_loaded) == (3, 2)
    assert result.tables["audit_events"].select("audit_id", "line_number").rows() == [("a-1", 1), ("l-1", 2)]
    assert result.quarantine.select("line_number", "reason").rows() == [(2, "items[1]: field 'verb' is missing")]
    assert json.loads(result.quarantine["raw"][0])["auditID"] == "l-2"


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (line(auditID=None), "field 'auditID' is missing"),
        (line(verb=7), "field 'verb' is integer, expected string"),
        (line(user={"groups": ["x"]}), "field 'user.username' is missing"),
        (line(user=None), "field 'user' is missing"),
        (line(stageTimestamp=None, requestReceivedTimestamp=None),
         "no timestamp: stageTimestamp, timestamp and requestReceivedTimestamp are all missing"),
        (line(stageTimestamp="yesterday"),
         "field 'stageTimestamp' is 'yesterday', expected an RFC 3339 time with Z or an offset"),
        (line(kind="Pod"), "kind is 'Pod', expected 'Event'"),
        (line(apiVersion="v1"), "apiVersion is 'v1', expected audit.k8s.io/v1 or v1beta1"),
        ('["not", "an", "event"]', "event is array, expected a JSON object"),
        ('{"kind": "Event", "auditID": "a-9", "verb": "get"', "invalid JSON: Expecting ',' delimiter at column 50"),
        (json.dumps({"kind": "EventList", "items": {}}), "EventList: field 'items' is object, expected array"),
    ],
)
def test_bad_line_is_quarantined(bad: str, reason: str) -> None:
    result = parse_k8s_audit(f"{line()}\n{bad}\n{line(auditID='a-2')}\n", "bad.jsonl")
    check(result)
    assert (result.records_read, result.records_loaded) == (3, 2)
    assert result.quarantine.select("line_number", "reason", "raw").rows() == [(2, reason, bad)]
    assert result.quarantine["source"].to_list() == ["k8s_audit"]


def test_truncated_last_line_empty_file_and_blank_lines() -> None:
    truncated = parse_k8s_audit(f"{line()}\n\n{line()[:60]}", "cut.jsonl")
    check(truncated)
    assert (truncated.records_read, truncated.records_loaded) == (2, 1)
    row = truncated.quarantine.row(0, named=True)
    assert row["line_number"] == 3 and row["stage"] == "parse"
    assert row["reason"].endswith("(last line has no newline: truncated?)")
    empty = parse_k8s_audit(b"", "empty.jsonl")
    check(empty)
    assert (empty.records_read, empty.tables["audit_events"].height) == (0, 0)


def test_not_utf8_line_is_quarantined() -> None:
    result = parse_k8s_audit(line().encode() + b"\n\xff\xfe{}\n", "bin.jsonl")
    check(result)
    assert result.quarantine.select("line_number", "reason").rows() == [(2, "not valid UTF-8 at byte 0")]

