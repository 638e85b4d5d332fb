"""The interface every engine's enforcement goes through, and the ledger that makes it safe.

An `Enforcer` takes an `allocator.model.Action` (remind, reclaim, preempt, cap_runtime,
quota_change, drain, undrain) and answers an `ActionResult` (applied, refused with a reason, already_done,
dry_run, proposed). The built-in allocator does idempotency and auditing itself; engines that
know nothing of either (Slurm, Kueue) get them from `ActionLedger`: a SQLite table of applied
idempotency keys, consulted before and written after each action, and an audit record in
`gpupool.audit/v1` (with `engine` naming the engine) for every answer, landed where the
`allocator_audit` ingest source picks it up. So every engine gives the same guarantees:
the same action twice has one effect; a dry run changes nothing; every answer is audited.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from allocator.model import Action, ActionKind, ActionResult, Outcome
from allocator.records import AUDIT_SOURCE, audit_record

ACTION_AUDIT = {
    ActionKind.REMIND: "enforcement.remind",
    ActionKind.RECLAIM: "enforcement.reclaim",
    ActionKind.PREEMPT: "enforcement.preempt",
    ActionKind.CAP_RUNTIME: "enforcement.cap_runtime",
    ActionKind.QUOTA_CHANGE: "enforcement.quota_proposal",
    ActionKind.DRAIN: "enforcement.drain",
    ActionKind.UNDRAIN: "enforcement.undrain",
}


LOCK_STRIPES = 64


@contextmanager
def claim_key(lock_dir: Path, key: str) -> Iterator[None]:
    """Hold the key's lock stripe: one apply of a key at a time, across threads and processes,
    so the ledger's check-then-apply-then-record cannot run twice for one key."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    stripe = int(hashlib.sha256(key.encode()).hexdigest(), 16) % LOCK_STRIPES
    with open(lock_dir / f"stripe-{stripe:02d}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def action_reason(action: Action) -> str:
    """The action's reason with the policy that asked for it, for the engine's own records."""
    text = action.reason or action.kind.value
    if action.policy:
        text += f" (policy {action.policy}" + (f" {action.policy_version})" if action.policy_version else ")")
    return text


class Enforcer(Protocol):
    """One engine's enforcement. `engine` is allocator, slurm or kueue."""

    engine: str

    def apply(self, action: Action, now: dt.datetime) -> ActionResult: ...


class ActionLedger:
    """Applied actions by idempotency key (SQLite, WAL) plus their audit records (JSON lines).

    `audit_root` is a landing zone: records go to `<audit_root>/allocator_audit/<day>/<engine>.jsonl`.
    """

    def __init__(self, db_path: Path, audit_root: Path, engine: str):
        self.engine = engine
        self.audit_root = Path(audit_root)
        db_path = Path(db_path)
        db_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None, timeout=30)
        self._setup_schema()

    def _setup_schema(self, attempts: int = 50) -> None:
        """WAL mode and tables. Switching the journal mode takes an exclusive lock without waiting on the
        busy handler, so appliers opening one ledger at the same moment retry instead of failing."""
        for attempt in range(attempts):
            try:
                self._db.execute("pragma journal_mode=wal")
                self._db.execute("pragma synchronous=full")
                self._db.execute(
                    "create table if not exists applied_actions (engine text, idempotency_key text, "
                    "result_json text, applied_at text, primary key (engine, idempotency_key))"
                )
                self._db.execute(
                    "create table if not exists audit_counter (engine text primary key, next_id integer)")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.02 * (attempt + 1))

    def previous(self, action: Action) -> ActionResult | None:
        """The answer already given for this key, as `already_done`; None when it is new."""
        row = self._db.execute(
            "select result_json from applied_actions where engine = ? and idempotency_key = ?",
            [self.engine, action.idempotency_key],
        ).fetchone()
        if row is None:
            return None
        first = json.loads(row[0])
        return ActionResult(
            idempotency_key=action.idempotency_key,
            kind=ActionKind(first["kind"]),
            target=first["target"],
            outcome=Outcome.ALREADY_DONE,
            reason=f"already {first['outcome']} at {first['applied_at']}: {first['reason']}",
            effects=first.get("effects", {}),
        )

    def answered_before(self, action: Action, now: dt.datetime, object_kind: str) -> ActionResult | None:
        """The start of an engine's apply, under the key's lock: for a key already used, its answer again
        (`already_done`), or a refusal when it was used for another action or target, audited as every
        answer is; None when the key is new."""
        kind = ActionKind(action.kind)
        previous = self.previous(action)
        if previous is None:
            return None
        if (previous.kind, previous.target) != (kind, action.target):
            previous = ActionResult(
                action.idempotency_key, kind, action.target, Outcome.REFUSED,
                f"idempotency key {action.idempotency_key} was used for {previous.kind.value} on "
                f"{previous.target}")
        self.record(action, previous, now, object_kind)
        return previous

    def answer(self, action: Action, now: dt.datetime, outcome: Outcome, reason: str, effects: dict, *,
               object_kind: str = "job", before: dict | None = None, after: dict | None = None,
               proposal_id: str | None = None) -> ActionResult:
        """An engine's answer, audited: the proposal id only when proposed, `after` only when it took effect."""
        result = ActionResult(action.idempotency_key, ActionKind(action.kind), action.target, outcome, reason,
                              proposal_id if outcome == Outcome.PROPOSED else None, effects)
        self.record(action, result, now, object_kind, before=before,
                    after=after if outcome in (Outcome.APPLIED, Outcome.PROPOSED) else None)
        return result

    def record(self, action: Action, result: ActionResult, now: dt.datetime, object_kind: str = "job",
               before: dict | None = None, after: dict | None = None) -> None:
        """Audit every answer; remember the key only when the action took effect (applied or proposed),
        so a refused action may be tried again once its reason has gone."""
        with self._lock:
            self._db.execute("begin immediate")
            try:
                if result.outcome in (Outcome.APPLIED, Outcome.PROPOSED):
                    payload = {**_jsonable(result), "applied_at": now.isoformat()}
                    self._db.execute(
                        "insert or ignore into applied_actions values (?, ?, ?, ?)",
                        [self.engine, action.idempotency_key, json.dumps(payload), now.isoformat()],
                    )
                audit_id = self._next_audit_id()
                self._db.execute("commit")
            except Exception:
                self._db.execute("rollback")
                raise
        record = audit_record(
            audit_id, now, action.actor, ACTION_AUDIT[action.kind], object_kind, action.target,
            result.outcome.value, actor_role="governance_bot", before=before, after=after,
            reason=result.reason, request_id=action.idempotency_key, idempotency_key=action.idempotency_key,
        )
        record["engine"] = self.engine
        day_file = self.audit_root / AUDIT_SOURCE / now.date().isoformat() / f"{self.engine}.jsonl"
        day_file.parent.mkdir(parents=True, exist_ok=True)
        with open(day_file, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")

    def _next_audit_id(self) -> str:
        row = self._db.execute("select next_id from audit_counter where engine = ?", [self.engine]).fetchone()
        number = row[0] if row else 1
        self._db.execute("insert or replace into audit_counter values (?, ?)", [self.engine, number + 1])
        return f"au-{self.engine}-{number:09d}"

    def close(self) -> None:
        self._db.close()


def _jsonable(result: ActionResult) -> dict:
    out = dataclasses.asdict(result)
    out["kind"] = result.kind.value
    out["outcome"] = result.outcome.value
    return out
