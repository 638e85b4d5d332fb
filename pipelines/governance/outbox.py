"""The outbox: every decision kept once, delivered until the engine answers, and logged.

`record` stores each PlannedAction by its idempotency key (SQLite, WAL): planning the same step
again records nothing new. The one exception is a rate-limited decision, which is not a decision
yet: when the same step is planned again with another status it replaces the row.

`deliver` sends the due QUEUED rows through the engine's `Enforcer`. Rows are claimed atomically
first (an UPDATE that only a row still unclaimed matches), so two deliveries at once (two sensor
ticks, two processes) never send one key twice. An answer (applied, refused, already_done,
dry_run, proposed) closes the row; anything else (connection refused, timeout, 5xx, a
configuration error) keeps it queued with its next attempt after an exponential backoff
(5 s doubling to 5 min). A key is therefore sent again only when no answer came back, and the
engine's idempotency makes even that safe: an action applied whose answer was lost answers
`already_done` the next time, and that answer is recorded once. A claim left by a process that
died mid-send expires after CLAIM_TTL and the row is sent again the same way.

The decision log (`gpupool.governance/v1`, landing source `governance_actions`): one JSON line per
decision and one per answer, in `landing/governance_actions/<YYYY-MM-DD>/<writer>.jsonl`. Lines are
written in the same transaction as the rows (a `log_lines` table) and flushed to the file after,
under a file lock; a crash between the file write and marking the lines written can repeat those
lines once, never lose them. Readers dedupe on (idempotency_key, record, status).

Reminders (`deliver(..., reminders=)`, pipelines/notify/): a remind step the engine accepted (applied
or already_done) is then sent to the job's owner, all of a delivery's at once so that one user's many
become a digest; what went out is the answer's `effects.notified`. A step whose reminder did not go out
stays queued with the same backoff: the engine answers `already_done` next time, and the reminders'
own ledger sends only what did not go out. A refused remind (the job is gone) reaches no one. The
planner takes the step after a remind only once the remind is answered, and counts its delay from the
answer (`answered_at`): a reminder that went out late pushes back what it announced, never the other way.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import json
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from allocator.filemodes import (
    PRIVATE_DIR_MODE,
    PRIVATE_MODE,
    READER_DIR_MODE,
    READER_MODE,
    create_file,
    make_dirs,
    opener,
)
from allocator.model import Action, ActionKind, ActionResult, Outcome
from allocator.records import rfc3339
from pipelines.connectors.http import RetryPolicy
from pipelines.contracts import DECISION_SCHEMA_NAME, DecisionStatus, Mode, PolicyKind, StepAction
from pipelines.enforcement.allocator import DeliveryError
from pipelines.enforcement.base import Enforcer
from pipelines.notify.reminders import Due, Notice, Reminders
from pipelines.policies.model import PlannedAction
from pipelines.policies.planner import DRAIN_ACTIONS, RATE_LIMITED_ACTIONS, DeliveredStep

SOURCE = "governance_actions"
ACTOR = "gpupool-governance"
BACKOFF = RetryPolicy(backoff_s=5.0, max_backoff_s=300.0)
CLAIM_TTL = dt.timedelta(minutes=10)  # longer than any request's timeout
# The engine's answers to a remind step after which its owner is told (a refusal: the job is gone).
REMINDED = frozenset({Outcome.APPLIED, Outcome.ALREADY_DONE})
# Fields of the decision log taken from PlannedAction.evidence (the planner copies the finding's).
FINDING_FIELDS = ("detected_at", "window_start_at", "window_end_at", "gpus_flagged", "gpus_held", "gpu_hours",
                  "recommendation")

_SCHEMA = (
    """create table if not exists decisions (
        idempotency_key text primary key, finding_id text not null, job_id text not null,
        attempt integer not null, step_index integer not null, action text not null, engine text not null, tenant text not null, mode text not null,
        status text not null, decided_at text not null, planned_json text not null,
        attempts integer not null default 0, next_attempt_at text, claimed_by text, claimed_at text,
        outcome text, outcome_reason text, answered_at text, last_error text)""",
    "create index if not exists decisions_finding on decisions (finding_id)",
    "create index if not exists decisions_job on decisions (job_id, attempt)",
    "create index if not exists decisions_due on decisions (status, next_attempt_at)",
    "create index if not exists decisions_decided on decisions (decided_at)",
    # a delivery reads back the rows it claimed: without this, a scan of every decision ever made
    "create index if not exists decisions_claimed on decisions (claimed_by)",
    "create index if not exists decisions_action on decisions (action, status)",  # the drains in force
    """create table if not exists log_lines (
        seq integer primary key autoincrement, day text not null, line text not null,
        written integer not null default 0)""",
    "create index if not exists log_lines_unwritten on log_lines (written)",
    # the ticks' outcome, one row (`record_tick`): what the metrics exporter reads (pipelines/selfmetrics.py)
    """create table if not exists ticks (
        id integer primary key check (id = 1), runs integer not null, failures integer not null,
        consecutive_failures integer not null, last_at text not null, last_ok_at text,
        last_duration_s real not null, last_problem text)""",
)
# A drain is in force from its applied step until the same finding's undrain is applied.
_ACCEPTED = (Outcome.APPLIED.value, Outcome.ALREADY_DONE.value)
DRAINS_IN_FORCE_SQL = f"""
    select case when instr(d.job_id, '/') > 0 then 'gpu' else 'node' end as target_kind,
           count(distinct d.job_id)
    from decisions d
    where d.action = 'drain' and d.status = 'answered' and d.outcome in {_ACCEPTED}
      and not exists (select 1 from decisions u where u.finding_id = d.finding_id and +u.action = 'undrain'
                      and +u.status = 'answered' and u.outcome in {_ACCEPTED})
    group by 1"""


@dataclass(frozen=True)
class TickRecord:
    """The ticks' outcome so far (`Outbox.record_tick`); counts since the outbox was made."""

    runs: int
    failures: int  # ticks with a problem: an engine unreadable, an action undeliverable, ...
    consecutive_failures: int  # of the latest ticks; 0 after a clean one
    last_at: dt.datetime
    last_ok_at: dt.datetime | None
    last_duration_s: float
    last_problem: str | None


@dataclass(frozen=True)
class OutboxStatus:
    """What the outbox holds now, for the metrics exporter (`read_status`)."""

    queued: int  # actions recorded and not yet answered
    oldest_queued_at: dt.datetime | None
    drains_in_force: dict[str, int]  # target kind (node, gpu) -> targets drained and not undrained
    tick: TickRecord | None  # None before the first tick


@dataclass(frozen=True)
class Retry:
    idempotency_key: str
    attempts: int
    next_attempt_at: dt.datetime
    error: str


@dataclass
class DeliveryReport:
    sent: int = 0  # actions handed to an enforcer
    answered: Counter = field(default_factory=Counter)  # by outcome
    retried: list[Retry] = field(default_factory=list)  # transport failures: queued again
    errors: list[str] = field(default_factory=list)  # anything else (configuration): queued again too

    def summary(self) -> str:
        outcomes = ", ".join(f"{n} {o}" for o, n in sorted(self.answered.items())) or "none"
        return f"{self.sent} sent; answers: {outcomes}; {len(self.retried)} to retry; {len(self.errors)} errors"


def _iso(t: dt.datetime) -> str:
    return t.isoformat(sep=" ", timespec="microseconds")


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def _delivered(index: int, action: str, decided_at: str, status: str, outcome: str | None,
               answered_at: str | None) -> DeliveredStep:
    """A decisions row as the planner's history step."""
    return DeliveredStep(index, action, _time(decided_at), DecisionStatus(status), outcome,
                         None if answered_at is None else _time(answered_at))


def planned_to_json(planned: PlannedAction) -> str:
    """The decision as the outbox stores it (`planned_from_json` reads it back): its fields as they are,
    without `dataclasses.asdict`'s deep copy of the evidence (a fifth of recording a decision)."""
    return json.dumps({f.name: getattr(planned, f.name) for f in dataclasses.fields(planned)}, sort_keys=True)


def planned_from_json(text: str) -> PlannedAction:
    fields = json.loads(text)
    fields["kind"] = PolicyKind(fields["kind"])
    fields["mode"] = Mode(fields["mode"])
    fields["action"] = StepAction(fields["action"])
    fields["status"] = DecisionStatus(fields["status"])
    return PlannedAction(**fields)


def decision_line(planned: PlannedAction, now: dt.datetime) -> dict:
    """A `gpupool.governance/v1` decision record."""
    evidence = planned.evidence
    return {
        "schema": DECISION_SCHEMA_NAME,
        "record": "decision",
        "ts": rfc3339(now),
        "idempotency_key": planned.idempotency_key,
        "finding_id": planned.finding_id,
        "policy": planned.policy,
        "policy_version": planned.policy_version,
        "policy_kind": planned.kind.value,
        "mode": planned.mode.value,
        "step_index": planned.step_index,
        "action": planned.action.value,
        "engine": planned.engine,
        "job_id": planned.job_id,
        "attempt": planned.attempt,
        "tenant": planned.tenant,
        "queue": planned.queue,
        "status": planned.status.value,
        "status_reason": planned.status_reason,
        "reason": planned.reason,
        "evidence": evidence,
        **{name: evidence.get(name) for name in FINDING_FIELDS},
    }


class Outbox:
    """Decisions, their delivery and the decision log. Implements `ActionHistory` for the planner."""

    def __init__(self, path: Path, landing: Path, writer: str = "outbox", durable: bool = True,
                 flush_each: bool = True):
        """`durable=False` (the simulator) skips the fsync of each transaction: nothing outlives the run.
        `flush_each=False` (the simulator) keeps the decision log's lines in the outbox until `flush_log()`
        instead of appending them to the day files after each record and delivery."""
        self.landing = Path(landing)
        self.writer = writer
        self.durable, self.flush_each = durable, flush_each
        path = Path(path)
        # the outbox is state: the owner's only, whatever the umask (SQLite gives -wal and -shm its mode)
        make_dirs(path.parent, PRIVATE_DIR_MODE)
        create_file(path, PRIVATE_MODE)
        self._log_lock_path = path.with_name(path.name + ".log.lock")
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._setup_schema()

    def _setup_schema(self, attempts: int = 50) -> None:
        """As ActionLedger: the WAL switch does not wait on the busy handler, so retry it."""
        for attempt in range(attempts):
            try:
                self._db.execute("pragma journal_mode=wal")
                self._db.execute(f"pragma synchronous={'full' if self.durable else 'off'}")
                for statement in _SCHEMA:
                    self._db.execute(statement)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.02 * (attempt + 1))

    def close(self) -> None:
        self._db.close()

    def _transaction(self, work) -> object:
        with self._lock:
            self._db.execute("begin immediate")
            try:
                out = work()
                self._db.execute("commit")
                return out
            except BaseException:
                self._db.execute("rollback")
                raise

    def _log(self, line: dict, now: dt.datetime) -> None:
        self._db.execute("insert into log_lines (day, line) values (?, ?)",
                         [now.date().isoformat(), json.dumps(line, sort_keys=True, ensure_ascii=False)])

    # -- decisions --------------------------------------------------------------------------------

    def record(self, planned: Iterable[PlannedAction], now: dt.datetime) -> list[PlannedAction]:
        """Store and log the decisions not stored yet; returns those recorded now."""
        actions = list(planned)
        if not actions:
            return []

        def work() -> list[PlannedAction]:
            recorded = []
            for action in actions:
                row = self._db.execute("select status from decisions where idempotency_key = ?",
                                       [action.idempotency_key]).fetchone()
                if row is not None and not (row[0] == DecisionStatus.RATE_LIMITED
                                            and action.status != DecisionStatus.RATE_LIMITED):
                    continue
                queued = action.status == DecisionStatus.QUEUED
                self._db.execute(
                    "insert or replace into decisions (idempotency_key, finding_id, job_id, attempt, step_index, "
                    "action, engine, tenant, mode, status, decided_at, planned_json, next_attempt_at) "
                    "values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [action.idempotency_key, action.finding_id, action.job_id, action.attempt, action.step_index,
                     action.action.value,
                     action.engine, action.tenant, action.mode.value, action.status.value, _iso(now),
                     planned_to_json(action), _iso(now) if queued else None],
                )
                self._log(decision_line(action, now), now)
                recorded.append(action)
            return recorded

        recorded = self._transaction(work)
        if self.flush_each:
            self.flush_log()
        return recorded

    # -- ActionHistory -----------------------------------------------------------------------------

    def steps(self, finding_id: str) -> list[DeliveredStep]:
        with self._lock:
            rows = self._db.execute(
                "select step_index, action, decided_at, status, outcome, answered_at from decisions "
                "where finding_id = ? order by step_index", [finding_id]).fetchall()
        return [_delivered(*row) for row in rows]

    # ids per query of `steps_of`: well under SQLite's limit on bound parameters
    _STEPS_CHUNK = 500

    def steps_of(self, finding_ids: Iterable[str]) -> dict[str, list[DeliveredStep]]:
        """`steps` of many findings in one query per _STEPS_CHUNK ids: finding_id -> its steps (none: absent)."""
        ids = list(finding_ids)
        out: dict[str, list[DeliveredStep]] = {}
        with self._lock:
            for i in range(0, len(ids), self._STEPS_CHUNK):
                chunk = ids[i:i + self._STEPS_CHUNK]
                for fid, *row in self._db.execute(
                        "select finding_id, step_index, action, decided_at, status, outcome, answered_at from decisions "
                        f"where finding_id in ({', '.join('?' * len(chunk))}) order by finding_id, step_index",
                        chunk):
                    out.setdefault(fid, []).append(_delivered(*row))
        return out

    def reclaims_since(self, since: dt.datetime) -> list[str]:
        actions = sorted(a.value for a in RATE_LIMITED_ACTIONS)
        with self._lock:
            rows = self._db.execute(
                # `+`: searched by decided_at (the hour), not by status (every decision ever answered)
                f"select tenant from decisions where decided_at >= ? and +action in ({', '.join('?' * len(actions))}) "
                "and +status in (?, ?)",
                [_iso(since), *actions, DecisionStatus.QUEUED.value, DecisionStatus.ANSWERED.value]).fetchall()
        return [r[0] for r in rows]

    def drains_since(self, since: dt.datetime) -> int:
        with self._lock:
            (count,) = self._db.execute(
                "select count(*) from decisions where decided_at >= ? and +action in (?) and +status in (?, ?)",
                [_iso(since), *(a.value for a in DRAIN_ACTIONS), DecisionStatus.QUEUED.value,
                 DecisionStatus.ANSWERED.value]).fetchone()
        return count

    def open_findings(self, since: dt.datetime, job_id: str | None = None,
                      attempt: int | None = None) -> list[PlannedAction]:
        """The latest step of each finding decided since `since` and not dropped; optionally only
        those of one job attempt. (`+` keeps SQLite on the decided_at and finding indexes: by status
        or in finding order it would read every decision ever made.)"""
        job_filter = ""
        params: list = [_iso(since), DecisionStatus.RATE_LIMITED.value]
        if job_id is not None:
            job_filter = "and d.job_id = ? "
            params.append(job_id)
            if attempt is not None:
                job_filter += "and d.attempt = ? "
                params.append(attempt)
        params += [DecisionStatus.RATE_LIMITED.value, DecisionStatus.DROPPED.value]
        with self._lock:
            rows = self._db.execute(
                f"""select d.planned_json from decisions d
                   where d.decided_at >= ? and d.status != ? {job_filter}
                     and d.step_index = (select max(step_index) from decisions x
                                         where x.finding_id = d.finding_id and x.status != ?)
                     and not exists (select 1 from decisions x where x.finding_id = d.finding_id and +x.status = ?)
                   order by +d.finding_id""",
                params).fetchall()
        return [planned_from_json(r[0]) for r in rows]

    # -- delivery ---------------------------------------------------------------------------------

    def _claim(self, now: dt.datetime, limit: int | None) -> tuple[str, list[tuple[str, str, int]]]:
        claim = uuid.uuid4().hex

        def work() -> list[tuple[str, str, int]]:
            self._db.execute(
                "update decisions set claimed_by = ?, claimed_at = ? where idempotency_key in ("
                "  select idempotency_key from decisions where status = ? and next_attempt_at <= ?"
                "  and (claimed_by is null or claimed_at < ?) order by next_attempt_at, idempotency_key"
                "  limit ?)",
                [claim, _iso(now), DecisionStatus.QUEUED.value, _iso(now), _iso(now - CLAIM_TTL),
                 -1 if limit is None else limit])
            return self._db.execute(
                "select idempotency_key, planned_json, attempts from decisions where claimed_by = ? "
                "order by next_attempt_at, idempotency_key", [claim]).fetchall()

        return claim, self._transaction(work)

    def deliver(self, enforcers: Mapping[str, Enforcer], now: dt.datetime, limit: int | None = None,
                reminders: Reminders | None = None) -> DeliveryReport:
        """Send the queued actions that are due; see the module docstring. With `reminders`, a remind
        step the engine accepted is also sent to its owner before its answer is recorded."""
        report = DeliveryReport()
        claim, rows = self._claim(now, limit)
        accepted: list[tuple[str, PlannedAction, int, ActionResult, Due]] = []
        for key, planned_json, attempts in rows:
            planned = planned_from_json(planned_json)
            enforcer = enforcers.get(planned.engine)
            if enforcer is None:
                self._retry(key, claim, attempts, now, f"no enforcer for engine {planned.engine}")
                report.errors.append(f"{key}: no enforcer for engine {planned.engine}")
                continue
            action = Action(
                kind=ActionKind(planned.action.value),
                idempotency_key=key,
                target=planned.job_id,
                actor=ACTOR,
                reason=planned.reason,
                policy=planned.policy,
                policy_version=planned.policy_version,
                evidence=planned.evidence,
                runtime_s=planned.runtime_s,
            )
            report.sent += 1
            try:
                result = enforcer.apply(action, now)
            except DeliveryError as exc:
                report.retried.append(self._retry(key, claim, attempts, now, str(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - e.g. a configuration error: reported, the action kept
                retry = self._retry(key, claim, attempts, now, f"{type(exc).__name__}: {exc}")
                report.errors.append(f"{key}: {retry.error} (next attempt {retry.next_attempt_at:%H:%M:%S})")
                continue
            if reminders is not None and planned.action == StepAction.REMIND and result.outcome in REMINDED:
                # the person the engine reminded (the allocator's and Slurm's answers name them)
                user = result.effects.get("reminded")
                accepted.append((key, planned, attempts, result, Due(planned, now, user)))
                continue
            if self._answer(key, claim, planned, attempts + 1, result, now):
                report.answered[result.outcome.value] += 1
        if accepted:
            self._remind(accepted, claim, reminders, now, report)
        if self.flush_each:
            self.flush_log()
        return report

    def _remind(self, accepted: list[tuple[str, PlannedAction, int, ActionResult, Due]], claim: str,
                reminders: Reminders, now: dt.datetime, report: DeliveryReport) -> None:
        """Send the accepted remind steps to their owners; a step whose reminder did not go out stays
        queued (the engine answers `already_done` to it next time, and only what was not sent goes)."""
        try:
            notices = reminders.send([due for *_, due in accepted], now)
        except Exception as exc:  # noqa: BLE001 - e.g. the sent ledger unreadable: reported, the steps kept
            notices = {}
            report.errors.append(f"reminders: {type(exc).__name__}: {exc}")
        for key, planned, attempts, result, _ in accepted:
            notice = notices.get(key) or Notice(error="not sent: see the delivery's errors")
            if notice.error is not None:
                report.retried.append(self._retry(key, claim, attempts, now, f"reminder: {notice.error}"))
                continue
            result = dataclasses.replace(result, effects={**result.effects, "notified": notice.effects})
            if self._answer(key, claim, planned, attempts + 1, result, now):
                report.answered[result.outcome.value] += 1

    def _retry(self, key: str, claim: str, attempts: int, now: dt.datetime, error: str) -> Retry:
        next_at = now + dt.timedelta(seconds=BACKOFF.delay(attempts))
        self._transaction(lambda: self._db.execute(
            "update decisions set attempts = ?, next_attempt_at = ?, last_error = ?, claimed_by = null, "
            "claimed_at = null where idempotency_key = ? and claimed_by = ?",
            [attempts + 1, _iso(next_at), error, key, claim]))
        return Retry(key, attempts + 1, next_at, error)

    def _answer(self, key: str, claim: str, planned: PlannedAction, attempts: int, result: ActionResult,
                now: dt.datetime) -> bool:
        """Close the row with the engine's answer and log it; False if the claim was lost meanwhile."""

        def work() -> bool:
            changed = self._db.execute(
                "update decisions set status = ?, outcome = ?, outcome_reason = ?, answered_at = ?, attempts = ?, "
                "claimed_by = null, claimed_at = null where idempotency_key = ? and claimed_by = ? and status = ?",
                [DecisionStatus.ANSWERED.value, result.outcome.value, result.reason, _iso(now), attempts, key, claim,
                 DecisionStatus.QUEUED.value]).rowcount
            if changed:
                line = decision_line(dataclasses.replace(planned, status=DecisionStatus.ANSWERED), now)
                line.update(record="answer", outcome=result.outcome.value, outcome_reason=result.reason,
                            delivery_attempts=attempts)
                if result.effects:
                    line["effects"] = result.effects
                self._log(line, now)
            return bool(changed)

        return self._transaction(work)

    # -- decision log -----------------------------------------------------------------------------

    def flush_log(self) -> int:
        """Append the lines not yet written to the day files; how many were written."""
        with open(self._log_lock_path, "a", opener=opener(PRIVATE_MODE)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with self._lock:
                    rows = self._db.execute(
                        "select seq, day, line from log_lines where written = 0 order by seq").fetchall()
                by_day: dict[str, list[str]] = {}
                for _, day, line in rows:
                    by_day.setdefault(day, []).append(line + "\n")
                for day, lines in by_day.items():
                    path = self.landing / SOURCE / day / f"{self.writer}.jsonl"
                    make_dirs(path.parent, READER_DIR_MODE)
                    # landing: the next ingest loads it, nobody else may write it (allocator/filemodes.py)
                    with open(path, "a", encoding="utf-8", opener=opener(READER_MODE)) as out:
                        out.write("".join(lines))
                        out.flush()
                if rows:
                    self._transaction(lambda: self._db.execute(
                        "update log_lines set written = 1 where seq <= ? and written = 0", [rows[-1][0]]))
                return len(rows)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # -- the ticks -------------------------------------------------------------------------------

    def record_tick(self, at: dt.datetime, duration_s: float, problems: list[str]) -> None:
        """Count one tick and keep its outcome; a tick with problems is a failure."""
        failed = int(bool(problems))
        self._transaction(lambda: self._db.execute(
            "insert into ticks values (1, 1, ?, ?, ?, ?, ?, ?) on conflict (id) do update set "
            "runs = runs + 1, failures = failures + excluded.failures, "
            "consecutive_failures = case when excluded.failures > 0 then consecutive_failures + 1 else 0 end, "
            "last_at = excluded.last_at, last_ok_at = coalesce(excluded.last_ok_at, last_ok_at), "
            "last_duration_s = excluded.last_duration_s, last_problem = excluded.last_problem",
            [failed, failed, _iso(at), None if failed else _iso(at), duration_s,
             problems[0][:500] if problems else None]))

    # -- reading ----------------------------------------------------------------------------------

    def rows(self) -> list[dict]:
        """Every decision with its delivery state (for reports and tests)."""
        with self._lock:
            cursor = self._db.execute("select * from decisions order by decided_at, idempotency_key")
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def read_status(path: Path) -> OutboxStatus:
    """The outbox's backlog, drains in force and ticks, read-only (FileNotFoundError if there is none)."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no outbox at {path}")
    db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    try:
        queued, oldest = db.execute("select count(*), min(decided_at) from decisions where status = ?",
                                    [DecisionStatus.QUEUED.value]).fetchone()
        drains = dict(db.execute(DRAINS_IN_FORCE_SQL).fetchall())
        # an outbox no tick has opened since the ticks were recorded has no such table yet
        ticked = db.execute("select 1 from sqlite_master where type = 'table' and name = 'ticks'").fetchone()
        tick = ticked and db.execute("select runs, failures, consecutive_failures, last_at, last_ok_at, "
                                     "last_duration_s, last_problem from ticks").fetchone()
    finally:
        db.close()
    if tick:
        runs, failures, consecutive, last_at, last_ok_at, duration_s, problem = tick
        tick = TickRecord(runs, failures, consecutive, _time(last_at), last_ok_at and _time(last_ok_at), duration_s,
                          problem)
    return OutboxStatus(queued, oldest and _time(oldest), drains, tick or None)
