"""The ledger gives engines without idempotency or auditing the same guarantees as the allocator."""
import datetime as dt

from allocator.model import Action, ActionKind, ActionResult, Outcome
from pipelines.enforcement.base import ActionLedger
from pipelines.sources.allocator_log import parse_audit_log

NOW = dt.datetime(2026, 11, 1, 10)


def _reclaim(key: str = "reclaim:123:idle:v1") -> Action:
    return Action(ActionKind.RECLAIM, key, "123", "governance-bot", reason="idle 45 min")


def test_an_applied_key_answers_already_done_and_survives_a_restart(tmp_path):
    ledger = ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "slurm")
    assert ledger.previous(_reclaim()) is None
    ledger.record(_reclaim(), ActionResult(_reclaim().idempotency_key, ActionKind.RECLAIM, "123", Outcome.APPLIED,
                                           "scancel 123"), NOW)
    ledger.close()
    reopened = ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "slurm")
    again = reopened.previous(_reclaim())
    assert again is not None and again.outcome == Outcome.ALREADY_DONE
    assert "scancel 123" in again.reason


def test_a_refused_action_is_audited_but_may_be_tried_again(tmp_path):
    ledger = ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "kueue")
    refused = ActionResult(_reclaim().idempotency_key, ActionKind.RECLAIM, "123", Outcome.REFUSED, "job not running")
    ledger.record(_reclaim(), refused, NOW)
    assert ledger.previous(_reclaim()) is None
    audit_file = tmp_path / "landing" / "allocator_audit" / "2026-11-01" / "kueue.jsonl"
    parsed = parse_audit_log(audit_file.read_bytes(), str(audit_file))
    assert parsed.quarantine.height == 0
    row = parsed.tables["audit_events"].row(0, named=True)
    assert (row["source"], row["action"], row["decision"]) == ("kueue", "enforcement.reclaim", "refused")
    assert row["idempotency_key"] == _reclaim().idempotency_key
