"""The decision log as an ingest source: what the outbox writes loads; broken lines are quarantined."""
from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest

from allocator.model import Action, ActionResult, Outcome
from pipelines.governance.outbox import Outbox
from pipelines.ingest import ingest_partition
from pipelines.policies.planner import plan
from pipelines.sources.governance import parse_governance_log
from pipelines.sources.registry import SOURCES
from tests.governance.conftest import GRACE_S, T0, at, catalog, finding, findings


class Applies:
    engine = "allocator"

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        return ActionResult(action.idempotency_key, action.kind, action.target, Outcome.APPLIED, "done",
                            effects={"state": "CANCELLED"})


def write_log(tmp_path) -> tuple[Outbox, bytes]:
    box = Outbox(tmp_path / "outbox.db", tmp_path / "landing")
    frame = findings(finding("j-1"), finding("j-2", template="inference"))
    for now in (T0, at(GRACE_S)):
        box.record(plan(frame, catalog(), box, now), now)
        box.deliver({"allocator": Applies()}, now)
    box.close()
    return box, (tmp_path / "landing/governance_actions/2026-11-02/outbox.jsonl").read_bytes()


def test_the_outbox_log_loads_line_for_line(tmp_path):
    _, data = write_log(tmp_path)
    result = parse_governance_log(data, "outbox.jsonl")
    table = result.tables["governance_actions"]
    assert result.quarantine.is_empty() and result.records_read == result.records_loaded == table.height == 7
    summary = table.group_by("record", "action", "status").len().sort("record", "action", "status")
    assert summary.rows() == [
        ("answer", "reclaim", "answered", 1), ("answer", "remind", "answered", 2),
        ("decision", "reclaim", "exempt", 1), ("decision", "reclaim", "queued", 1),
        ("decision", "remind", "queued", 2)]
    answer = table.filter(pl.col("record") == "answer", pl.col("action") == "reclaim").row(0, named=True)
    assert (answer["outcome"], answer["delivery_attempts"], answer["gpus_held"]) == ("applied", 1, 8)
    assert answer["window_start_at"] == dt.datetime(2026, 11, 2, 8, 18)
    assert json.loads(answer["evidence_json"])["idle_minutes"] == 42
    assert answer["api_version"] == "gpupool.governance/v1" and answer["source_file"] == "outbox.jsonl"


GOOD = {"schema": "gpupool.governance/v1", "record": "decision", "ts": "2026-11-02T09:00:00Z",
        "idempotency_key": "gp-remind-0-x", "finding_id": "f", "policy": "idle-allocation", "policy_version": "1",
        "policy_kind": "idle_allocation", "mode": "enforce", "step_index": 0, "action": "remind",
        "engine": "allocator", "job_id": "j-1", "attempt": 1, "tenant": "vision", "status": "queued"}


@pytest.mark.parametrize(("change", "reason"), [
    ({"schema": "gpupool.audit/v1"}, "unknown schema 'gpupool.audit/v1', expected 'gpupool.governance/v1'"),
    ({"status": "sent"}, "field 'status' is 'sent', expected one of shadow, exempt, rate_limited"),
    ({"record": "answer"}, "field 'outcome' is missing"),
    ({"step_index": -1}, "field 'step_index' is -1, expected at least 0"),
    ({"attempt": "1"}, "field 'attempt' is string, expected integer"),
    ({"ts": "2026-11-02 09:00"}, "field 'ts' is '2026-11-02 09:00', expected an RFC 3339 time"),
    ({"evidence": [1, 2]}, "field 'evidence' is array, expected object"),
    ({"tenant": None}, "field 'tenant' is null"),
])
def test_broken_lines_are_quarantined_with_the_reason(change, reason):
    lines = [json.dumps(GOOD), json.dumps({**GOOD, **change}), "{not json", "[1]"]
    result = parse_governance_log("\n".join(lines) + "\n", "bad.jsonl")
    assert result.records_read == 4 and result.records_loaded == 1
    reasons = result.quarantine.sort("line_number")["reason"].to_list()
    assert reasons[0].startswith(reason)
    assert reasons[1].startswith("invalid JSON") and reasons[2] == "line is array, expected a JSON object"


def test_the_source_is_registered_and_ingests(tmp_path, warehouse):
    src = SOURCES["governance_actions"]
    assert src.tables == ("governance_actions",)
    _, data = write_log(tmp_path)
    folder = warehouse.landing / "governance_actions" / "2026-11-02"
    folder.mkdir(parents=True)
    (folder / "outbox.jsonl").write_bytes(data + b'{"schema":"gpupool.governance/v1"}\n')
    report = ingest_partition(warehouse, "governance_actions", dt.date(2026, 11, 2))
    assert (report.records_read, report.records_loaded, report.records_quarantined) == (8, 7, 1)
    with warehouse.connect(read_only=True) as con:
        assert con.execute("select count(*) from raw.governance_actions").fetchall() == [(7,)]
