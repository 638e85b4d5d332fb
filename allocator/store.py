"""Durable state of the live allocator: a command log in SQLite (WAL).

Every mutating request is a command. It is applied to the in-memory engine, and the command (its
`now`, actor and payload), its outcome and the event/audit records it produced are written in ONE
transaction, committed with `synchronous=FULL` before the caller answers. On start the engine is
rebuilt from the latest snapshot (`engine.state_dict()`, saved every `snapshot_every` commands)
plus the commands after it, replayed through the same `apply_command`: the engine is pure given
`now`, so the replay reaches the same state. Refused and failed commands are logged and replayed
too, so anything the engine did before refusing (a counter it bumped) is replayed as well.

Artifact records (checkpoints and artifacts jobs report) are kept the same way, in `artifacts`.

Events, audit and artifact records carry a monotonically increasing `seq`: one writer, one transaction per
command, so a reader paging with `seq > cursor` never skips a record committed later.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import hashlib
import json
import logging
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator.artifacts import ArtifactReport, ArtifactReportError
from allocator.engine import Engine
from allocator.filemodes import PRIVATE_MODE, create_file, make_dirs, opener
from allocator.inputs import json_problem
from allocator.model import (
    Action,
    ActionKind,
    ActionResult,
    AdmissionError,
    Job,
    JobSpec,
    JobState,
    PoolConfig,
    QueueSpec,
    ShareMode,
    Template,
)
from allocator.records import MemorySink, audit_record, rfc3339

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

_SCHEMA = """
create table if not exists meta (
    key text primary key,
    value text not null
);
create table if not exists commands (
    seq integer primary key,
    ts text not null,              -- the `now` the engine was given
    kind text not null,
    actor text not null,
    payload text not null,         -- json
    status integer not null,       -- http status of the outcome
    result text not null,          -- json answer
    request_key text unique        -- caller + Idempotency-Key header: a retry gets the same answer
);
create table if not exists snapshots (
    command_seq integer primary key,
    state text not null
);
create table if not exists events (
    seq integer primary key,
    command_seq integer not null,
    tenant text,
    record text not null
);
create index if not exists events_tenant on events (tenant, seq);
create table if not exists audit (
    seq integer primary key,
    command_seq integer not null,
    tenant text,
    record text not null
);
create index if not exists audit_tenant on audit (tenant, seq);
create table if not exists artifacts (
    seq integer primary key,
    command_seq integer not null,
    tenant text,
    record text not null
);
create index if not exists artifacts_tenant on artifacts (tenant, seq);
create table if not exists principals (
    name text primary key,
    role text not null,
    tenant text
);
"""


def utc_iso(ts: dt.datetime | None) -> str | None:
    """RFC 3339 UTC with a Z, as the allocator's logs write times."""
    return None if ts is None else rfc3339(ts)


def pool_fingerprint(pool: PoolConfig) -> str:
    # frozen dataclasses of tuples, dicts and enums: repr is deterministic
    return hashlib.sha256(repr(pool).encode()).hexdigest()[:16]


# -- views: engine objects as JSON ---------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return utc_iso(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def spec_view(spec: JobSpec) -> dict:
    return _plain(dataclasses.asdict(spec))


def job_view(job: Job) -> dict:
    return {
        "job_id": job.job_id,
        "state": job.state.value,
        "tenant": job.spec.tenant,
        "queue": job.spec.queue,
        "user": job.spec.user,
        "attempt": job.attempt,
        "priority": job.priority,
        "submitted_at": utc_iso(job.submitted_at),
        "admitted_at": utc_iso(job.admitted_at),
        "started_at": utc_iso(job.started_at),
        "first_started_at": utc_iso(job.first_started_at),
        "ended_at": utc_iso(job.ended_at),
        "gpus": [s.placement() for s in job.slots],
        "borrowed": job.borrowed,
        "retries_used": job.retries_used,
        "runtime_cap_s": job.runtime_cap_s,
        "spec": spec_view(job.spec),
    }


def action_result_view(result: ActionResult) -> dict:
    return _plain(dataclasses.asdict(result))


def queue_view(queue: QueueSpec, usage: dict[str, float] | None = None) -> dict:
    """A queue's rules, and the in-quota GPUs per model its admitted jobs use."""
    out = _plain(dataclasses.asdict(queue))
    if usage is not None:
        out["usage"] = usage
    return out


# -- commands ------------------------------------------------------------------------------------


class CommandFailed(Exception):
    """A command the engine refused or could not find the target of; `status` is its HTTP status."""

    def __init__(self, status: int, body: dict):
        super().__init__(body.get("message") or body.get("detail"))
        self.status = status
        self.body = body


@dataclass(frozen=True)
class CommandResult:
    seq: int | None  # the command's place in the log; None when it was not logged (a reused Idempotency-Key)
    status: int
    body: dict
    replayed: bool = False  # the answer of an earlier request with the same Idempotency-Key


def job_spec_from(payload: dict) -> JobSpec:
    fields = dict(payload)
    fields["template"] = Template(fields["template"])
    fields["share_mode"] = ShareMode(fields.get("share_mode") or ShareMode.WHOLE)
    return JobSpec(**fields)


def action_from(payload: dict) -> Action:
    fields = dict(payload)
    fields["kind"] = ActionKind(fields["kind"])
    return Action(**fields)


def artifact_report_from(payload: dict) -> ArtifactReport:
    fields = dict(payload)
    if fields.get("written_at") is not None:
        fields["written_at"] = dt.datetime.fromisoformat(fields["written_at"])
    return ArtifactReport(**fields)


def _job(engine: Engine, job_id: str) -> Job:
    job = engine.jobs.get(job_id)
    if job is None:
        raise CommandFailed(404, {"detail": f"job {job_id} not found"})
    return job


def apply_command(engine: Engine, kind: str, payload: dict, actor: str, now: dt.datetime) -> dict:
    """Apply one command to the engine and return its JSON answer; raise CommandFailed if refused.

    The single place that maps commands to engine calls, used live and on replay alike. The
    scheduler runs after every command that may add work or free capacity.
    """
    try:
        if kind == "submit":
            job = engine.submit(job_spec_from(payload["spec"]), now, actor, job_id=payload.get("job_id"))
            engine.schedule(now)
            return job_view(job)
        if kind == "cancel":
            _job(engine, payload["job_id"])
            job = engine.cancel(payload["job_id"], now, actor, reason=payload.get("reason") or "")
            engine.schedule(now)
            return job_view(job)
        if kind == "finish":
            _job(engine, payload["job_id"])
            job = engine.finish(
                payload["job_id"],
                now,
                state=JobState(payload["state"]),
                exit_code=payload.get("exit_code"),
                reason=payload.get("reason"),
            )
            engine.schedule(now)
            return job_view(job)
        if kind == "action":
            result = engine.apply_action(
                action_from(payload["action"]), now, actor_role=payload["actor_role"]
            )
            engine.schedule(now)
            return action_result_view(result)
        if kind == "approve":
            result = engine.approve(payload["proposal_id"], now, actor, actor_role=payload["actor_role"])
            engine.schedule(now)
            return action_result_view(result)
        if kind == "update_queue":
            try:
                queue = engine.update_queue(
                    payload["queue"], payload["changes"], now, actor, actor_role=payload["actor_role"]
                )
            except ValueError as exc:  # an invalid value: the engine audited the refusal
                raise CommandFailed(422, {"detail": str(exc)}) from None
            engine.schedule(now)
            return queue_view(queue, engine.usage(queue.name))
        if kind == "tick":
            changed = engine.tick(now)
            started = engine.schedule(now)
            return {"changed": [j.job_id for j in changed], "started": [j.job_id for j in started]}
        if kind == "artifact":
            _job(engine, payload["job_id"])
            return engine.report_artifact(
                payload["job_id"], artifact_report_from(payload["report"]), now, payload.get("reported_by")
            )
        if kind == "permissions":
            # no engine state: the audit records are the command's whole effect (see Store.sync_principals)
            return {"grants": payload["grants"], "revokes": payload["revokes"]}
    except AdmissionError as exc:
        raise CommandFailed(422, {"rule": exc.rule, "message": exc.message}) from None
    except ArtifactReportError as exc:
        raise CommandFailed(exc.status, {"detail": f"{kind}: {exc}"}) from None
    except KeyError as exc:
        what = exc.args[0] if exc.args else "target"
        raise CommandFailed(404, {"detail": f"{kind}: {what}"}) from None
    except ValueError as exc:  # the target is in a state that does not allow it (cancel an ended job)
        raise CommandFailed(409, {"detail": f"{kind}: {exc}"}) from None
    finally:
        engine.dirty_jobs.clear()  # the store snapshots whole states; keep the engine's change set small
    raise ValueError(f"unknown command kind {kind!r}")


def permission_record(
    action: str, principal: dict, now: dt.datetime, command_seq: int, index: int, actor: str
) -> dict:
    """A `permission.grant` / `permission.revoke` audit record (gpupool.audit/v1).

    The engine numbers its own records (`au-…`); these are made by the store, numbered by command."""
    held = {"role": principal["role"], **({"tenant": principal["tenant"]} if principal.get("tenant") else {})}
    granted = action == "permission.grant"
    return audit_record(
        f"au-perm-{command_seq}-{index}",
        now,
        actor,
        action,
        "principal",
        principal["name"],
        "applied",
        actor_role="system",
        object_namespace=principal.get("tenant"),
        before=None if granted else held,
        after=held if granted else None,
        reason="token configuration changed",
    )


class StoreError(RuntimeError):
    """The database cannot be used with this pool or this version."""


class Store:
    """The engine plus its durable command log. Thread-safe: one lock serialises every call."""

    def __init__(
        self,
        path: Path | str,
        pool: PoolConfig,
        *,
        snapshot_every: int = 500,
    ):
        self.path = Path(path)
        self.pool = pool
        self.snapshot_every = snapshot_every
        self.lock = threading.RLock()
        self.replay_divergences = 0  # commands whose replay produced other records than were logged
        self.replayed_commands = 0
        self._sink = MemorySink()  # holds the records of the command being applied until they are committed
        self._last_now: dt.datetime | None = None
        self._last_seq = 0
        self._snapshot_seq = 0
        # the allocator's state: the owner's only, whatever the umask (SQLite gives -wal and -shm its mode)
        make_dirs(self.path.parent)
        self._owner = _own(self.path)
        create_file(self.path, PRIVATE_MODE)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("pragma journal_mode=wal")
        self._db.execute("pragma synchronous=full")
        self._db.execute("pragma busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._check_meta()
        self.engine = self._rebuild()
        # job events by type over the whole log (the metrics' admissions and preemptions): counted once
        # here, then by each commit, so that a scrape reads no table
        self._event_types = Counter(dict(self._db.execute(
            "select case when json_valid(record) then json_extract(record, '$.type') end, count(*) from events "
            "group by 1").fetchall()))  # a legacy store's malformed record is served, not counted (tests/security)

    # -- opening ---------------------------------------------------------------------------------

    def _check_meta(self) -> None:
        meta = dict(self._db.execute("select key, value from meta").fetchall())
        fingerprint = pool_fingerprint(self.pool)
        if not meta:
            with self._tx():
                self._db.executemany(
                    "insert into meta (key, value) values (?, ?)",
                    [
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("pool_fingerprint", fingerprint),
                        ("created_at", utc_iso(dt.datetime.now(dt.UTC).replace(tzinfo=None))),
                    ],
                )
            return
        if meta.get("schema_version") != str(SCHEMA_VERSION):
            raise StoreError(
                f"{self.path}: schema version {meta.get('schema_version')}, expected {SCHEMA_VERSION}"
            )
        if meta.get("pool_fingerprint") != fingerprint:
            raise StoreError(
                f"{self.path}: created with another pool (fingerprint {meta.get('pool_fingerprint')}, "
                f"this pool {fingerprint}); start it with the pool file it was created with"
            )

    def _rebuild(self) -> Engine:
        row = self._db.execute(
            "select command_seq, state from snapshots order by command_seq desc limit 1"
        ).fetchone()
        if row:
            self._snapshot_seq = row[0]
            engine = Engine.from_state(self.pool, json.loads(row[1]), self._sink)
        else:
            self._snapshot_seq = 0
            engine = Engine(self.pool, self._sink)
        last = self._db.execute("select seq, ts from commands order by seq desc limit 1").fetchone()
        self._last_seq = last[0] if last else 0
        self._last_now = dt.datetime.fromisoformat(last[1]) if last else None
        replayed = 0
        cursor = self._db.execute(
            "select seq, ts, kind, actor, payload from commands where seq > ? order by seq",
            (self._snapshot_seq,),
        )
        for seq, ts, kind, actor, payload in cursor:
            try:
                apply_command(engine, kind, json.loads(payload), actor, dt.datetime.fromisoformat(ts))
            except CommandFailed:
                pass
            self._check_replay(seq, *self._sink.drain(), self._sink.drain_artifacts())
            replayed += 1
        self.replayed_commands = replayed
        if replayed >= self.snapshot_every:
            self._snapshot(engine)
        return engine

    def _check_replay(self, seq: int, events: list[dict], audits: list[dict], artifacts: list[dict]) -> None:
        logged_events = [
            json.loads(r)["event_id"]
            for (r,) in self._db.execute(
                "select record from events where command_seq = ? order by seq", (seq,)
            )
        ]
        logged_audits = [
            json.loads(r)["audit_id"]
            for (r,) in self._db.execute(
                "select record from audit where command_seq = ? order by seq", (seq,)
            )
        ]
        logged_artifacts = [
            json.loads(r)["artifact_id"]
            for (r,) in self._db.execute(
                "select record from artifacts where command_seq = ? order by seq", (seq,)
            )
        ]
        if logged_audits and logged_audits[0].startswith("au-perm-"):
            return  # permission records are written by the store, not the engine
        if (
            [e["event_id"] for e in events] != logged_events
            or [a["audit_id"] for a in audits] != logged_audits
            or [a["artifact_id"] for a in artifacts] != logged_artifacts
        ):
            self.replay_divergences += 1
            log.error("replay of command %d produced other records than were logged", seq)

    def _tx(self):
        return _Transaction(self._db)

    # -- writing ---------------------------------------------------------------------------------

    def now(self, now: dt.datetime) -> dt.datetime:
        """The engine's time never goes backwards, even if the wall clock does."""
        return now if self._last_now is None or now >= self._last_now else self._last_now

    def execute(
        self, kind: str, payload: dict, actor: str, now: dt.datetime, request_key: str | None = None
    ) -> CommandResult:
        """Apply a command, log it with its records, commit, then answer. Raises nothing the engine refuses:
        the answer's status says (2xx applied, 4xx refused)."""
        problem = json_problem(payload) or (json_problem(request_key) if request_key is not None else None)
        if problem:
            # never log what could not be answered or replayed as JSON (a lone surrogate, a NaN): the API
            # refuses such input first; this is the last line, and nothing is committed
            return CommandResult(None, 422, {"detail": f"{kind}: the request is not valid JSON text: {problem}"})
        with self.lock:
            if request_key is not None:
                row = self._db.execute(
                    "select seq, status, result, kind, payload from commands where request_key = ?",
                    (request_key,),
                ).fetchone()
                if row and (row[3], json.loads(row[4])) != (kind, payload):
                    return CommandResult(
                        None, 409, {"detail": "this Idempotency-Key was used for another request"}
                    )
                if row:
                    return CommandResult(row[0], row[1], json.loads(row[2]), replayed=True)
            now = self.now(now)
            try:
                body, status = apply_command(self.engine, kind, payload, actor, now), 200
            except CommandFailed as exc:
                body, status = exc.body, exc.status
            except Exception:
                # an engine fault halfway through a command: nothing was acknowledged, so drop what it
                # did to the in-memory state by going back to what the log says
                self._sink.drain()
                self._sink.drain_artifacts()
                self.engine = self._rebuild()
                raise
            events, audits = self._sink.drain()
            seq = self._commit(
                kind, payload, actor, now, status, body, request_key, events, audits,
                artifacts=self._sink.drain_artifacts(),
            )
            return CommandResult(seq, status, body)

    def _commit(
        self, kind, payload, actor, now, status, body, request_key, events, audits, also=None, artifacts=()
    ) -> int:
        """One transaction: the command, its records, and `also(db)` (further writes that belong with it)."""
        seq = self._last_seq + 1
        try:
            with self._tx() as db:
                if also is not None:
                    also(db)
                self._db.execute(
                    "insert into commands (seq, ts, kind, actor, payload, status, result, request_key) "
                    "values (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        seq,
                        now.isoformat(),
                        kind,
                        actor,
                        json.dumps(payload),
                        status,
                        json.dumps(body),
                        request_key,
                    ),
                )
                self._db.executemany(
                    "insert into events (command_seq, tenant, record) values (?, ?, ?)",
                    [(seq, self._event_tenant(r), json.dumps(r)) for r in events],
                )
                self._db.executemany(
                    "insert into audit (command_seq, tenant, record) values (?, ?, ?)",
                    [(seq, r.get("object_namespace"), json.dumps(r)) for r in audits],
                )
                self._db.executemany(
                    "insert into artifacts (command_seq, tenant, record) values (?, ?, ?)",
                    [(seq, self._event_tenant(r), json.dumps(r)) for r in artifacts],
                )
        except BaseException:
            # the engine moved on but the log did not: go back to what the log says
            self.engine = self._rebuild()
            raise
        self._last_seq, self._last_now = seq, now
        self._event_types.update(r.get("type") for r in events)
        if seq - self._snapshot_seq >= self.snapshot_every:
            self._snapshot(self.engine)
        return seq

    def _event_tenant(self, record: dict) -> str | None:
        if record.get("tenant"):
            return record["tenant"]
        job = self.engine.jobs.get(record.get("job_id", ""))
        return job.spec.tenant if job else None

    def _snapshot(self, engine: Engine) -> None:
        """Save the engine's state as of the last command. Only an optimisation (the log is the truth),
        so a failure is logged, not raised: the command it follows is committed already."""
        try:
            self._save_snapshot(engine)
        except (sqlite3.Error, OSError):
            log.exception("snapshot after command %d failed; the next start replays more", self._last_seq)

    def _save_snapshot(self, engine: Engine) -> None:
        state = json.dumps(engine.state_dict())
        with self._tx():
            self._db.execute(
                "insert or replace into snapshots (command_seq, state) values (?, ?)", (self._last_seq, state)
            )
            # older snapshots are never read again: the latest one plus the log after it suffice
            self._db.execute("delete from snapshots where command_seq < ?", (self._last_seq,))
        self._snapshot_seq = self._last_seq

    def tick(self, now: dt.datetime) -> CommandResult | None:
        """Run the engine's timers if one is due; log a command only then."""
        with self.lock:
            due = self.engine.next_timer()
            if due is None or due > self.now(now):
                return None
            return self.execute("tick", {}, "system", now)

    def sync_principals(
        self, principals: Iterable[dict], now: dt.datetime, actor: str = "allocator"
    ) -> CommandResult | None:
        """Audit who gained or lost access since the last start (`permission.grant` / `permission.revoke`).

        Tokens live outside the store; their holders (name, role, tenant — never the token) are kept
        here so that a change of the token configuration shows up in the audit log.
        """
        wanted = {
            p["name"]: {"name": p["name"], "role": p["role"], "tenant": p.get("tenant")} for p in principals
        }
        with self.lock:
            known = {
                name: {"name": name, "role": role, "tenant": tenant}
                for name, role, tenant in self._db.execute("select name, role, tenant from principals")
            }
            revokes = [known[n] for n in sorted(known) if n not in wanted or wanted[n] != known[n]]
            grants = [wanted[n] for n in sorted(wanted) if n not in known or wanted[n] != known[n]]
            if not grants and not revokes:
                return None
            now = self.now(now)
            seq = self._last_seq + 1
            audits = [
                permission_record("permission.revoke", p, now, seq, i, actor) for i, p in enumerate(revokes)
            ]
            audits += [
                permission_record("permission.grant", p, now, seq, len(revokes) + i, actor)
                for i, p in enumerate(grants)
            ]
            payload = {"grants": grants, "revokes": revokes}

            def replace_principals(db: sqlite3.Connection) -> None:
                db.execute("delete from principals")
                db.executemany(
                    "insert into principals (name, role, tenant) values (?, ?, ?)",
                    [(p["name"], p["role"], p["tenant"]) for p in wanted.values()],
                )

            seq = self._commit(
                "permissions", payload, actor, now, 200, payload, None, [], audits, replace_principals
            )
            return CommandResult(seq, 200, payload)

    # -- reading ---------------------------------------------------------------------------------

    def events(self, cursor: int = 0, limit: int = 1000, tenant: str | None = None) -> tuple[list[dict], int]:
        return self._page("events", cursor, limit, tenant)

    def audit(self, cursor: int = 0, limit: int = 1000, tenant: str | None = None) -> tuple[list[dict], int]:
        return self._page("audit", cursor, limit, tenant)

    def artifacts(
        self, cursor: int = 0, limit: int = 1000, tenant: str | None = None
    ) -> tuple[list[dict], int]:
        return self._page("artifacts", cursor, limit, tenant)

    def _page(self, table: str, cursor: int, limit: int, tenant: str | None) -> tuple[list[dict], int]:
        """Records with seq > cursor, oldest first, and the cursor to ask with next."""
        where, params = "seq > ?", [cursor]
        if tenant is not None:
            where += " and tenant = ?"
            params.append(tenant)
        with self.lock:
            rows = self._db.execute(
                f"select seq, record from {table} where {where} order by seq limit ?", (*params, limit)
            ).fetchall()
        return [json.loads(r) for _, r in rows], (rows[-1][0] if rows else cursor)

    def command_count(self) -> int:
        return self._last_seq

    def event_counts(self) -> dict[str, int]:
        """Job events in the log by type (`admit`, `preempt`, ...), since the store was created."""
        with self.lock:
            return dict(self._event_types)

    def checkpoint(self) -> None:
        """Snapshot the engine if a command was applied since the last snapshot."""
        with self.lock:
            if self._last_seq > self._snapshot_seq:
                self._snapshot(self.engine)

    def close(self, snapshot: bool = True) -> None:
        """Snapshot what was applied since the last snapshot, so the next start replays nothing
        (`snapshot=False` leaves it to the replay, as a crash would), and let the database go."""
        with self.lock:
            if snapshot:
                self.checkpoint()
            self._db.close()
            self._owner.close()


def _own(path: Path):
    """One process owns a database: two engines appending to one log would fork the state. The
    lock is an flock on a file beside it, which the kernel drops when the process dies, even by kill -9."""
    owner = open(path.with_name(path.name + ".lock"), "a", opener=opener(PRIVATE_MODE))  # noqa: SIM115 (held for the store's lifetime)
    try:
        fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner.close()
        raise StoreError(f"{path} is in use by another allocator process") from None
    return owner


class _Transaction:
    """`begin immediate` … commit, or rollback on error (the connection is in autocommit mode)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("begin immediate")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("rollback" if exc_type else "commit")
