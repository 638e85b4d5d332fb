"""Email the month's review packs (the `pack_delivery` section of gpupool.yml): the pool's pack to the
pool's addresses, each tenant's pack to that tenant's addresses only, one message per pack and
recipient with the PDF attached and page 1's answers in the body.

Each message sent is recorded in ops.pack_deliveries before the next is sent, so a retried run never
mails a recipient the same pack again, and an SMTP failure keeps the record of what went out. The
SMTP password comes only from the environment (GPUPOOL_SMTP_PASSWORD), never from the file."""
from __future__ import annotations

import datetime as dt
import json
import os
import smtplib
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.config import ConfigError, config_path, section
from pipelines.contracts import PACK_DELIVERIES_TABLE
from pipelines.mail import PASSWORD_ENV, SmtpServer, smtp_session
from pipelines.pack.render import TEXT as PACK_TEXT
from pipelines.pack.store import safe_name
from pipelines.warehouse import Warehouse

SECTION = "pack_delivery"

TEXT = {
    "subject": {"en": "GPU pool review {month}", "zh": "GPU资源池月度报告 {month}"},
    "tenant": {"en": ": {tenant}", "zh": "：{tenant}"},
    "intro": {"en": "The GPU pool's monthly review for {month}{who}, attached as PDF ({filename}).",
              "zh": "{month} GPU资源池月度报告{who}，见附件 PDF（{filename}）。"},
    "who": {"en": " for {tenant}", "zh": "（{tenant}）"},
    "answers": {"en": "Page 1 answers:", "zh": "第一页的回答："},
    "decisions": {"en": "Decisions requested this month:", "zh": "本月需要的决定："},
    "headlines": {"en": "The month's headlines are on page 1 of the PDF.",
                  "zh": "本月要点见 PDF 第一页。"},
    "footer": {"en": "Pack {version}; warehouse release {release}; metrics catalog {catalog}.",
               "zh": "报告版本 {version}；数据版本 {release}；指标目录版本 {catalog}。"},
}


class Recipients(BaseModel):
    """Who gets which pack: the pool's pack, and each tenant's pack (only that tenant's addresses)."""

    model_config = ConfigDict(extra="forbid")
    pool: list[str] = Field(default_factory=list)
    tenants: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("pool")
    @classmethod
    def _pool_addresses(cls, value: list[str]) -> list[str]:
        return [_address(a) for a in value]

    @field_validator("tenants")
    @classmethod
    def _tenant_addresses(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return {t: [_address(a) for a in addresses] for t, addresses in value.items()}


class DeliveryConfig(SmtpServer):
    """The `pack_delivery` section of gpupool.yml (see gpupool.example.yml): the SMTP server
    (pipelines/mail.py), the sender, the packs' languages and their recipients."""

    from_address: str
    languages: list[Literal["en", "zh"]] = Field(default_factory=lambda: ["en"], min_length=1)
    recipients: Recipients = Field(default_factory=Recipients)

    @field_validator("from_address")
    @classmethod
    def _from(cls, value: str) -> str:
        return _address(value)


def _address(value: str) -> str:
    if "@" not in value.strip(" <>") or any(c.isspace() for c in value.strip()):
        raise ValueError(f"{value!r} is not an email address: write name@domain")
    return value.strip()


def delivery_config(path: Path | None = None) -> DeliveryConfig | None:
    """The section, or None when gpupool.yml has none (packs are then built and not mailed). Raises
    ConfigError on an invalid section, or a username without $GPUPOOL_SMTP_PASSWORD."""
    settings = section(SECTION, DeliveryConfig, path)
    if settings is not None and settings.username and not os.environ.get(PASSWORD_ENV):
        raise ConfigError(f"{path or config_path()}: section {SECTION}: username is set but {PASSWORD_ENV} is "
                          f"not: export the SMTP password as {PASSWORD_ENV} (or remove username)")
    return settings


# -- messages (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Pack:
    """One built pack, as its folder (render's figures.json) describes it."""

    folder: Path
    month: dt.date
    lang: str
    tenant: str | None
    figures: dict

    @classmethod
    def read(cls, folder: Path) -> Pack:
        figures = json.loads((folder / "figures.json").read_text())
        return cls(folder, dt.date.fromisoformat(figures["month"]), figures["lang"], figures.get("tenant"), figures)

    @property
    def version(self) -> str:
        return self.folder.name

    @property
    def filename(self) -> str:
        parts = ["gpupool-review", f"{self.month:%Y-%m}"]
        if self.tenant is not None:
            parts.append(safe_name(self.tenant))
        if self.lang != "en":
            parts.append(self.lang)
        return "-".join(parts) + ".pdf"


def body(pack: Pack) -> str:
    """The message's text: page 1's answers (with their status) and decisions as figures.json records
    them, else where the headlines are; then the pack's version, release and catalog."""
    lang, fig = pack.lang, pack.figures
    t = {k: v[lang] for k, v in TEXT.items()}
    month = f"{pack.month:%Y-%m}"
    who = t["who"].format(tenant=pack.tenant) if pack.tenant is not None else ""
    lines = [t["intro"].format(month=month, who=who, filename=pack.filename), ""]
    answers = fig.get("answers") or []
    if answers:
        lines.append(t["answers"])
        for a in answers:
            if a.get("question"):
                lines.append(f"- {a['question']}")
            lines.append(f"{'  ' if a.get('question') else '- '}[{PACK_TEXT[a['status']][lang]}] {a['answer']}")
    else:
        lines.append(t["headlines"])
    decisions = fig.get("decisions") or []
    if decisions:
        lines += ["", t["decisions"], *(f"- {d['text']}" for d in decisions)]
    lines += ["", t["footer"].format(version=pack.version, release=fig.get("release_id"),
                                     catalog=fig.get("catalog_version"))]
    return "\n".join(lines) + "\n"


def subject(pack: Pack) -> str:
    s = TEXT["subject"][pack.lang].format(month=f"{pack.month:%Y-%m}")
    return s + (TEXT["tenant"][pack.lang].format(tenant=pack.tenant) if pack.tenant is not None else "")


def message(pack: Pack, sender: str, recipient: str) -> EmailMessage:
    """One pack for one recipient: subject, text body, the PDF attached."""
    msg = EmailMessage()
    msg["Subject"] = subject(pack)
    msg["From"] = sender
    msg["To"] = recipient
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2].strip(" >") or None)
    msg.set_content(body(pack))
    msg.add_attachment((pack.folder / "pack.pdf").read_bytes(), maintype="application", subtype="pdf",
                       filename=pack.filename)
    return msg


def recipients_of(pack: Pack, recipients: Recipients) -> list[str]:
    """The pool's pack goes to the pool's addresses; a tenant's pack to that tenant's, never another's."""
    addresses = recipients.pool if pack.tenant is None else recipients.tenants.get(pack.tenant, [])
    return list(dict.fromkeys(addresses))


# -- sending -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sent:
    pack: Pack
    recipient: str


class DeliveryError(RuntimeError):
    """The SMTP server refused or could not be reached; what was sent before is recorded."""


def _sent_before(warehouse: Warehouse) -> set[tuple]:
    # A retried run rebuilds the packs (new version folders), so "the same pack" is the month, tenant
    # and language; the version column records which build went out.
    with warehouse.writer() as con:
        rows = con.execute(f"select month, coalesce(tenant, ''), lang, recipient from {PACK_DELIVERIES_TABLE}").fetchall()
    return {(m, t, lang, r.lower()) for m, t, lang, r in rows}


def _key(sent: Sent) -> tuple:
    return sent.pack.month, sent.pack.tenant or "", sent.pack.lang, sent.recipient.lower()


def _record(warehouse: Warehouse, sent: Sent, message_id: str) -> None:
    with warehouse.writer() as con:
        con.execute(f"insert into {PACK_DELIVERIES_TABLE} (month, tenant, lang, version, recipient, sent_at, "
                    "message_id) values (?, ?, ?, ?, ?, ?, ?)",
                    [sent.pack.month, sent.pack.tenant, sent.pack.lang, sent.pack.version, sent.recipient,
                     dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0), message_id])


def pending(warehouse: Warehouse, folders: list[Path], cfg: DeliveryConfig) -> list[Sent]:
    """The (pack, recipient) messages not sent before, in the packs' order."""
    done = _sent_before(warehouse)
    todo = [Sent(pack, r) for pack in map(Pack.read, folders) for r in recipients_of(pack, cfg.recipients)]
    return [s for s in todo if _key(s) not in done]


def deliver(warehouse: Warehouse, folders: list[Path], cfg: DeliveryConfig,
            on_sent: Callable[[Sent], None] = lambda _s: None) -> list[Sent]:
    """Mail each built pack (its folder) to its recipients that have not had it; returns what was sent.

    A message that fails (the server refuses it, or building it raises) is that message's failure:
    the others are still sent. A lost connection ends the session (the rest would fail the same way).
    Then DeliveryError names the server and each failed message with its reply; what was sent is
    recorded, so a retried run sends only the rest."""
    sent: list[Sent] = []
    todo = pending(warehouse, folders, cfg)
    if not todo:
        return sent
    server = f"{cfg.host}:{cfg.smtp_port} ({cfg.security})"
    failures: list[str] = []
    with warehouse.publishing("pack delivery"):  # one release for the records, also after a failure
        try:
            with smtp_session(cfg, os.environ.get(PASSWORD_ENV)) as smtp:
                for current in todo:
                    what = f"sending {current.pack.filename} to {current.recipient}"
                    try:
                        msg = message(current.pack, cfg.from_address, current.recipient)
                        smtp.send_message(msg, to_addrs=[current.recipient])
                    except smtplib.SMTPServerDisconnected:
                        raise  # the session is gone: below
                    except smtplib.SMTPException as err:  # the server refused this message
                        failures.append(f"{what}: {_reply(err)}")
                        continue
                    except OSError:
                        raise  # the connection failed (SMTPException is an OSError too: caught above)
                    except Exception as err:  # noqa: BLE001 - building this message failed, whatever the cause
                        failures.append(f"{what}: {_reply(err)}")
                        continue
                    _record(warehouse, current, msg["Message-ID"])
                    sent.append(current)
                    on_sent(current)
        except (smtplib.SMTPException, OSError) as err:
            failures.append(f"{'connecting or logging in' if not sent and not failures else 'the session'}: "
                            f"{_reply(err)}")
    if failures:
        listed = "; ".join(failures[:20]) + (f"; and {len(failures) - 20} more" if len(failures) > 20 else "")
        raise DeliveryError(f"SMTP server {server} failed while {listed}. {len(sent)} of {len(todo)} messages "
                            f"were sent (recorded in {PACK_DELIVERIES_TABLE}); the packs stay built, and a "
                            "retried run sends only the rest.")
    return sent


def _reply(err: Exception) -> str:
    """What the server said: its code and text for an SMTP reply, else the error itself."""
    if isinstance(err, smtplib.SMTPRecipientsRefused):
        return "; ".join(f"{r}: {code} {text.decode(errors='replace')}" for r, (code, text) in err.recipients.items())
    if isinstance(err, smtplib.SMTPResponseException):
        return f"{err.smtp_code} {err.smtp_error.decode(errors='replace') if isinstance(err.smtp_error, bytes) else err.smtp_error}"
    return f"{type(err).__name__}: {err}"
