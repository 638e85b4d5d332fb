"""How a reminder reaches a person: email to the job's owner over SMTP, and a chat webhook (one JSON
POST per message). Each transport sends one composed `Message` and raises `NotifyError` when it did
not go out (refused, unreachable, too slow): the outbox then keeps the remind step queued and tries
again with its backoff. Every call has a timeout, so a slow server costs a tick at most that long.
"""
from __future__ import annotations

import hashlib
import os
import re
import smtplib
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlsplit

import requests

from pipelines.mail import smtp_session
from pipelines.notify.config import WEBHOOK_BODIES, EmailConfig, WebhookConfig
from pipelines.notify.message import Message


class NotifyError(Exception):
    """The message did not go out; sending it again later is safe."""


class EmailTransport:
    channel = "email"

    def __init__(self, config: EmailConfig):
        self.config = config

    def send(self, message: Message, to: str) -> str:
        """Mail `message` to `to`; the Message-ID sent (derived from the reminders' keys, so a mail client
        shows a repeat as the same message)."""
        cfg = self.config
        mail = EmailMessage()
        mail["From"] = cfg.from_address
        mail["To"] = to
        mail["Subject"] = message.subject
        mail["Message-ID"] = message_id(message.keys, cfg.from_address)
        mail["X-Gpupool-Reminders"] = ", ".join(message.keys)
        mail.set_content(message.text)
        try:
            with smtp_session(cfg, os.environ.get(cfg.password_env)) as smtp:
                smtp.send_message(mail)
        except (smtplib.SMTPException, OSError) as exc:  # refused, unreachable, timed out, TLS failed
            raise NotifyError(f"SMTP {cfg.host}:{cfg.smtp_port}: {type(exc).__name__}: {str(exc)[:300]}") from exc
        return mail["Message-ID"]


class WebhookTransport:
    channel = "webhook"

    def __init__(self, config: WebhookConfig, session: requests.Session | None = None):
        self.config = config
        self.session = session or requests.Session()

    def body(self, message: Message, user: str, mention: str) -> Any:
        """The JSON body: the configured template (else the format's), its strings' placeholders filled."""
        template = self.config.body if self.config.body is not None else WEBHOOK_BODIES[self.config.format]
        text = f"{mention} {message.subject}\n{message.text}" if mention else f"{message.subject}\n{message.text}"
        values = {"text": text, "subject": message.subject, "body": message.text, "user": user,
                  "mention": mention, "keys": ", ".join(message.keys)}
        return _fill(template, values)

    def send(self, message: Message, user: str, mention: str) -> str:
        """POST the message; what the server answered (status). 2xx with no error code in the body is sent."""
        url = self.config.url
        try:
            response = self.session.post(url, json=self.body(message, user, mention), timeout=self.config.timeout_s,
                                         headers=self.config.headers)
        except requests.RequestException as exc:
            raise NotifyError(f"webhook {_safe(url)}: {type(exc).__name__}: {_scrub(str(exc), url)[:300]}") from exc
        if not 200 <= response.status_code < 300:
            raise NotifyError(f"webhook {_safe(url)}: HTTP {response.status_code}: "
                              f"{_scrub(response.text.strip(), url)[:200]}")
        refused = _error_code(response)
        if refused:
            raise NotifyError(f"webhook {_safe(url)}: the service refused the message: {_scrub(refused, url)}")
        return f"HTTP {response.status_code}"


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _fill(template: Any, values: dict[str, str]) -> Any:
    """The template with `{name}` placeholders in its strings replaced (values are never re-read as
    templates, and JSON escaping is the encoder's)."""
    if isinstance(template, str):  # one pass: a value holding "{user}" (a job's name, say) stays as it is
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)
    if isinstance(template, dict):
        return {k: _fill(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, values) for v in template]
    return template


def _error_code(response: requests.Response) -> str | None:
    """Feishu, DingTalk and WeCom answer HTTP 200 with a non-zero code when they refuse a message."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    for code, text in (("code", "msg"), ("errcode", "errmsg"), ("StatusCode", "StatusMessage")):
        if body.get(code) not in (None, 0):
            return f"{code} {body[code]}: {body.get(text, '')}"
    return None


def message_id(keys: tuple[str, ...], from_address: str) -> str:
    """The same reminders give the same Message-ID, so a repeat (a server that accepted after the
    timeout) is one message to mail clients that dedupe on it."""
    digest = hashlib.sha256("|".join(keys).encode()).hexdigest()[:24]
    return f"<{digest}.gpupool@{from_address.rpartition('@')[2].strip('>') or 'localhost'}>"


def _scrub(text: str, url: str) -> str:
    """`text` without the webhook's path and query (an exception's text may quote them)."""
    parts = urlsplit(url)
    for secret in (parts.path + ("?" + parts.query if parts.query else ""), parts.path, parts.query):
        if secret and secret != "/":
            text = text.replace(secret, "/…")
    return text


def _safe(url: str) -> str:
    """The webhook's address without its path and query: those often hold the token."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/')[0]}/…"
