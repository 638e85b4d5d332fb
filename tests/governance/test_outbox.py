"""The outbox: one row and one log line per decision, delivery with backoff, never twice, never lost."""
from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import threading
from pathlib import Path

import pytest
import requests

from allocator.model import Action, ActionResult
from pipelines.contracts import DecisionStatus
from pipelines.enforcement.allocator import AllocatorEnforcer
from pipelines.governance.outbox import CLAIM_TTL, DRAINS_IN_FORCE_SQL, Outbox
from pipelines.policies.planner import plan
from tests.governance.conftest import (
    ADMIN,
    BOT,
    GRACE_S,
    T0,
    TRAINING,
    Recorder,
    at,
    catalog,
    finding,
    findings,
)


def log_lines(landing: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((landing / "governance_actions").rglob("*.jsonl"))
            for line in path.read_text().splitlines()]


@pytest.fixture
def outbox(tmp_path: Path):
    box = Outbox(tmp_path / "outbox.db", tmp_path / "landing")
    yield box
    box.close()


def test_the_same_plan_twice_is_one_row_and_one_line(outbox, tmp_path):
    frame = findings(finding())
    for _ in range(2):
        outbox.record(plan(frame, catalog(), outbox, T0), T0)
    outbox.record(plan(frame, catalog(), outbox, at(30)), at(30))
    assert len(outbox.rows()) == 1
    [line] = log_lines(tmp_path / "landing")
    assert line["record"] == "decision" and line["status"] == "queued" and line["action"] == "remind"
    assert line["schema"] == "gpupool.governance/v1" and line["ts"] == "2026-11-02T09:00:00Z"
    assert line["gpus_flagged"] == 8 and line["window_start_at"] == "2026-11-02T08:18:00Z"
    assert (tmp_path / "landing/governance_actions/2026-11-02/outbox.jsonl").exists()


def test_delivery_answers_are_logged_and_the_history_sees_them(outbox, tmp_path):
    outbox.record(plan(findings(finding()), catalog(), outbox, T0), T0)
    recorder = Recorder()
    report = outbox.deliver({"allocator": recorder}, at(1))
    assert (report.sent, dict(report.answered)) == (1, {"applied": 1})
    assert outbox.deliver({"allocator": recorder}, at(2)).sent == 0
    [step] = outbox.steps(outbox.rows()[0]["finding_id"])
    assert (step.status, step.outcome) == (DecisionStatus.ANSWERED, "applied")
    decision, answer = log_lines(tmp_path / "landing")
    assert answer["record"] == "answer" and answer["status"] == "answered"
    assert (answer["outcome"], answer["delivery_attempts"]) == ("applied", 1)
    assert answer["idempotency_key"] == decision["idempotency_key"]


def test_shadow_and_exempt_decisions_are_never_sent(outbox):
    outbox.record(plan(findings(finding()), catalog().with_mode("shadow"), outbox, T0), T0)
    assert outbox.deliver({"allocator": Recorder()}, at(1)).sent == 0
    assert outbox.rows()[0]["status"] == "shadow"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FlakyAllocator(http.server.ThreadingHTTPServer):
    """Answers 500 for the first `failures` requests, then `applied` for a new key, `already_done` after."""

    def __init__(self, port: int, failures: int):
        self.failures, self.posts, self.applied = failures, 0, set()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.posts += 1
                if outer.posts <= outer.failures:
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"database is locked")
                    return
                outcome = "already_done" if body["idempotency_key"] in outer.applied else "applied"
                outer.applied.add(body["idempotency_key"])
                answer = {**{k: body[k] for k in ("idempotency_key", "kind", "target")},
                          "outcome": outcome, "reason": "reminded", "effects": {}}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", port), Handler)


def test_allocator_down_then_failing_then_back_is_retried_with_backoff_and_applied_once(outbox, tmp_path):
    port = free_port()
    enforcers = {"allocator": AllocatorEnforcer(f"http://127.0.0.1:{port}", "token", timeout_s=2)}
    outbox.record(plan(findings(finding()), catalog(), outbox, T0), T0)

    refused = outbox.deliver(enforcers, T0)  # nothing listens: connection refused
    assert refused.sent == 1 and not refused.answered
    [retry] = refused.retried
    assert (retry.attempts, retry.next_attempt_at) == (1, at(5))
    assert "refused" in retry.error.lower()
    assert outbox.deliver(enforcers, at(4)).sent == 0  # backing off

    server = FlakyAllocator(port, failures=1)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        failed = outbox.deliver(enforcers, at(5))
        assert failed.retried[0].next_attempt_at == at(15) and "HTTP 500" in failed.retried[0].error
        assert outbox.deliver(enforcers, at(14)).sent == 0
        answered = outbox.deliver(enforcers, at(15))
        assert dict(answered.answered) == {"applied": 1}
        assert outbox.deliver(enforcers, at(3600)).sent == 0
    finally:
        server.shutdown()
        server.server_close()
    assert server.posts == 2 and len(server.applied) == 1
    answer = log_lines(tmp_path / "landing")[-1]
    assert (answer["outcome"], answer["delivery_attempts"]) == ("applied", 3)


def test_backoff_is_capped_at_five_minutes(outbox):
    enforcers = {"allocator": AllocatorEnforcer(f"http://127.0.0.1:{free_port()}", "token", timeout_s=1)}
    outbox.record(plan(findings(finding()), catalog(), outbox, T0), T0)
    now, waits = T0, []
    for _ in range(9):
        [retry] = outbox.deliver(enforcers, now).retried
        waits.append((retry.next_attempt_at - now).total_seconds())
        now = retry.next_attempt_at
    assert waits == [5, 10, 20, 40, 80, 160, 300, 300, 300]


def test_concurrent_deliveries_send_each_key_once(tmp_path):
    boxes = [Outbox(tmp_path / "outbox.db", tmp_path / "landing") for _ in range(4)]
    frame = findings(*(finding(f"j-{i}") for i in range(6)))
    boxes[0].record(plan(frame, catalog(), boxes[0], T0), T0)
    recorder = Recorder(delay_s=0.05)
    reports = []
    threads = [threading.Thread(target=lambda b=b: reports.append(b.deliver({"allocator": recorder}, at(1))))
               for b in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(recorder.sent) == sorted(r["idempotency_key"] for r in boxes[0].rows())
    assert sum(r.sent for r in reports) == 6 and sum(sum(r.answered.values()) for r in reports) == 6
    answers = [line for line in log_lines(tmp_path / "landing") if line["record"] == "answer"]
    assert len(answers) == 6
    for box in boxes:
        box.close()


class Crash(BaseException):
    """The process dies: nothing after the send runs."""


class CrashAfterSend:
    engine = "allocator"

    def __init__(self, inner: AllocatorEnforcer):
        self.inner = inner

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        self.inner.apply(action, now)
        raise Crash


def test_a_crash_between_send_and_record_resends_and_records_already_done_once(allocator, tmp_path):
    job = requests.post(f"{allocator.url}/v1/jobs", json=TRAINING, headers={"Authorization": f"Bearer {ADMIN}"},
                        timeout=10).json()
    enforcer = AllocatorEnforcer(allocator.url, BOT)
    db, landing = tmp_path / "outbox.db", tmp_path / "landing"
    box = Outbox(db, landing)
    frame = findings(finding(job["job_id"]))
    box.record(plan(frame, catalog(), box, T0), T0)
    box.deliver({"allocator": enforcer}, T0)  # the reminder
    box.record(plan(frame, catalog(), box, at(GRACE_S)), at(GRACE_S))
    with pytest.raises(Crash):
        box.deliver({"allocator": CrashAfterSend(enforcer)}, at(GRACE_S))
    box.close()

    restarted = Outbox(db, landing)
    assert restarted.deliver({"allocator": enforcer}, at(GRACE_S + 60)).sent == 0  # the claim still holds
    report = restarted.deliver({"allocator": enforcer}, at(GRACE_S) + CLAIM_TTL + dt.timedelta(seconds=1))
    assert dict(report.answered) == {"already_done": 1}
    assert restarted.deliver({"allocator": enforcer}, at(GRACE_S + 3600)).sent == 0
    reclaim = next(r for r in restarted.rows() if r["action"] == "reclaim")
    assert (reclaim["status"], reclaim["outcome"]) == ("answered", "already_done")
    answers = [line for line in log_lines(landing) if line["record"] == "answer" and line["action"] == "reclaim"]
    assert len(answers) == 1 and answers[0]["delivery_attempts"] == 1
    audit, _ = allocator.store.audit(0, 10000)
    reclaims = [a["decision"] for a in audit if a["action"] == "enforcement.reclaim"]
    assert reclaims == ["applied", "already_done"]  # one effect
    state = requests.get(f"{allocator.url}/v1/jobs/{job['job_id']}", headers={"Authorization": f"Bearer {ADMIN}"},
                         timeout=10).json()["state"]
    assert state == "CANCELLED"
    restarted.close()


def test_a_configuration_error_is_reported_and_the_action_kept(outbox, allocator):
    outbox.record(plan(findings(finding()), catalog(), outbox, T0), T0)
    report = outbox.deliver({"allocator": AllocatorEnforcer(allocator.url, "not-a-token")}, T0)
    [error] = report.errors
    assert "AllocatorAuthError" in error and "HTTP 401" in error
    assert outbox.rows()[0]["status"] == "queued" and outbox.rows()[0]["attempts"] == 1
    report = outbox.deliver({}, at(5))
    assert report.errors == [f"{outbox.rows()[0]['idempotency_key']}: no enforcer for engine allocator"]


def test_the_steps_of_many_findings_at_once_are_each_findings_steps(outbox, monkeypatch):
    """The planner reads a plan's steps in one query (`steps_of`): the same steps as one `steps`
    call per finding, across the query's chunks, and nothing for a finding without a decision."""
    monkeypatch.setattr(Outbox, "_STEPS_CHUNK", 2)  # three queries for five findings
    frame = findings(*(finding(f"j-{n}") for n in range(5)))
    outbox.record(plan(frame, catalog(), outbox, T0), T0)
    outbox.deliver({"allocator": Recorder()}, at(1))
    ids = [row["finding_id"] for row in outbox.rows()]
    assert len(ids) == 5
    many = outbox.steps_of([*ids, "no-such-finding"])
    assert many == {fid: outbox.steps(fid) for fid in ids}
    assert all(step.status == DecisionStatus.ANSWERED for steps in many.values() for step in steps)


def test_no_query_of_the_outbox_reads_every_decision(outbox):
    """The outbox keeps every decision ever made, and a live tick asks it for the last hours' and one
    finding's: each of its queries is served by an index, none scans the decisions (SQLite's plan)."""
    frame = findings(*(finding(f"j-{n}") for n in range(3)))
    statements: list[str] = []
    outbox._db.set_trace_callback(statements.append)
    outbox.record(plan(frame, catalog(), outbox, T0), T0)
    outbox.deliver({"allocator": Recorder()}, at(1))
    outbox.record(plan(frame, catalog(), outbox, at(20)), at(20))
    outbox.open_findings(at(-60))
    outbox.open_findings(at(-60), "j-1", 1)
    outbox.reclaims_since(at(-60))
    outbox.drains_since(at(-60))
    outbox.deliver({"allocator": Recorder()}, at(21))
    outbox._db.set_trace_callback(None)
    reads = {s for s in statements if s.lstrip().lower().startswith(("select", "update")) and "decisions" in s}
    assert len(reads) >= 8
    reads.add(DRAINS_IN_FORCE_SQL)  # `gpupool governance status` and the metrics exporter read it
    # a scan reads them all; a search by status alone reads every decision ever answered
    scans = {s: detail for s in reads for *_, detail in outbox._db.execute(f"explain query plan {s}")
             if detail.startswith("SCAN") or detail.endswith("(status=?)")}
    assert scans == {}
