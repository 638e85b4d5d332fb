"""Reminders to the job's owner, sent when the outbox delivers a remind step (pipelines/governance/outbox.py).

The outbox hands over, once per delivery, every remind step the engine accepted (`Due`); `send` answers
per step a `Notice`: what went out on which channel, or the error that keeps the step queued. So the
outbox's machinery carries reminders too: a step not sent is retried with its backoff; a shadow or
exempt step is never delivered, so never sent; what went out is in the step's answer (`effects.notified`)
in the decision log.

- One message per user per delivery when they have fewer than `digest_from` reminders, else one digest.
- Never sent twice: a ledger (SQLite, beside the outbox) keeps (step key, channel) once sent, so a step
  retried because one channel failed (or the engine's answer was lost) goes out on the others only. A
  crash between a server's acceptance and the ledger's write can repeat that one message.
- Per-user rate limit: past `per_user_per_hour` messages in the last hour, a user's reminders are not
  sent (the answer says so) and the step is closed: the limit protects the person, not the step.
- A channel that fails once in a delivery is not tried again in it (its other steps wait for the next
  attempt), so a dead or slow server costs a tick one timeout, not one per reminder.
"""
from __future__ import annotations

import datetime as dt
import sqlite3
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.notify.config import RemindersConfig
from pipelines.notify.message import Reminder, compose
from pipelines.notify.transports import EmailTransport, NotifyError, WebhookTransport
from pipelines.policies.model import PlannedAction

RATE_WINDOW = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Due:
    """A remind step the engine accepted, to be sent now."""

    planned: PlannedAction
    sent_at: dt.datetime  # when it goes out: the next step counts from it (pipelines/policies/planner.py)
    user: str | None = None  # the owner as the engine's answer names it, when the finding has none


@dataclass
class Notice:
    effects: dict = field(default_factory=dict)  # channel -> recipient / answer; not_sent; digest_of
    error: str | None = None  # set: the step stays queued and is tried again


class SentLedger:
    """(step key, channel) pairs sent, with the message and user, in SQLite (WAL)."""

    def __init__(self, path: Path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("pragma journal_mode=wal")
        self._db.execute(
            "create table if not exists sent (idempotency_key text not null, channel text not null, "
            "user text not null, message_id text not null, recipient text, sent_at text not null, "
            "primary key (idempotency_key, channel))")
        self._db.execute("create index if not exists sent_user on sent (user, sent_at)")

    def was_sent(self, key: str, channel: str) -> bool:
        with self._lock:
            return self._db.execute("select 1 from sent where idempotency_key = ? and channel = ?",
                                    [key, channel]).fetchone() is not None

    def record(self, keys: Sequence[str], channel: str, user: str, message_id: str, recipient: str,
               now: dt.datetime) -> None:
        with self._lock:
            self._db.executemany("insert or ignore into sent values (?, ?, ?, ?, ?, ?)",
                                 [(k, channel, user, message_id, recipient, now.isoformat()) for k in keys])

    def messages_since(self, user: str, since: dt.datetime) -> int:
        with self._lock:
            return self._db.execute("select count(distinct message_id) from sent where user = ? and sent_at >= ?",
                                    [user, since.isoformat()]).fetchone()[0]

    def close(self) -> None:
        self._db.close()


class Reminders:
    """The reminders of gpupool.yml's `reminders` section, with their ledger at `ledger_path`."""

    def __init__(self, config: RemindersConfig, ledger_path: Path):
        self.config = config
        self.ledger = SentLedger(ledger_path)
        self.email = EmailTransport(config.email) if config.email is not None else None
        self.webhook = WebhookTransport(config.webhook) if config.webhook is not None else None

    def close(self) -> None:
        self.ledger.close()

    def send(self, due: Sequence[Due], now: dt.datetime) -> dict[str, Notice]:
        """Send every due reminder, grouped per user; a Notice per step key."""
        by_user: dict[str, list[Reminder]] = {}
        for item in due:
            reminder = Reminder.of(item.planned, item.sent_at, item.user)
            by_user.setdefault(reminder.user or "", []).append(reminder)
        failed: dict[str, str] = {}  # channel -> its first error in this delivery
        out: dict[str, Notice] = {}
        for user, reminders in sorted(by_user.items()):
            sent_before = self.ledger.messages_since(user, now - RATE_WINDOW)
            batches = [reminders] if len(reminders) >= self.config.digest_from else [[r] for r in reminders]
            for batch in batches:
                if sent_before >= self.config.per_user_per_hour:
                    limit = (f"{user or 'the owner'} had {sent_before} reminder messages in the last hour "
                             f"(limit {self.config.per_user_per_hour}/h)")
                    out.update({r.key: Notice({"not_sent": limit}) for r in batch})
                    continue
                notice, went_out = self._send_batch(user, batch, failed, now)
                sent_before += went_out
                out.update({r.key: notice for r in batch})
        return out

    def _send_batch(self, user: str, batch: list[Reminder], failed: dict[str, str],
                    now: dt.datetime) -> tuple[Notice, bool]:
        """One message (a reminder or a digest) on every channel it has not gone out on yet."""
        cfg = self.config
        lang = cfg.language_of(user)
        notice = Notice({"digest_of": len(batch)} if len(batch) > 1 else {})
        errors: list[str] = []
        message_id = uuid.uuid4().hex
        went_out = False
        for channel, transport in (("email", self.email), ("webhook", self.webhook)):
            if transport is None:
                continue
            pending = [r for r in batch if not self.ledger.was_sent(r.key, channel)]
            if not pending:
                notice.effects[channel] = "sent before"
                continue
            recipient = cfg.address(user) if channel == "email" else cfg.mention(user)
            if channel == "email" and recipient is None:
                notice.effects[channel] = f"no address for user {user or '(unknown)'}"
                continue
            if channel in failed:
                errors.append(f"{channel} not tried: it failed earlier in this delivery ({failed[channel]})")
                continue
            message = compose(pending, lang, contact=cfg.exemption_contact,
                              greet=cfg.mention(user) if channel == "webhook" else None)
            try:
                if channel == "email":
                    transport.send(message, recipient)
                    notice.effects[channel] = recipient
                else:
                    notice.effects[channel] = transport.send(message, user, recipient)
            except NotifyError as exc:
                failed[channel] = str(exc)
                errors.append(str(exc))
                continue
            self.ledger.record([r.key for r in pending], channel, user, message_id, recipient or "", now)
            went_out = True
        notice.error = "; ".join(errors) or None
        return notice, went_out
