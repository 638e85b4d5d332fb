"""One SMTP session for every mail gpupool sends (review packs, reminders): connected, encrypted
(STARTTLS, or TLS from the first byte) against the system's CAs or the configured CA file, logged in
when a user is configured, and quit however the caller leaves."""
from __future__ import annotations

import smtplib
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, Protocol


class SmtpSettings(Protocol):
    """What a session needs of a configuration (pipelines.pack.deliver.DeliveryConfig,
    pipelines.notify.config.EmailConfig)."""

    host: str
    security: Literal["starttls", "ssl", "none"]
    timeout_s: float
    ca_file: str | None
    username: str | None

    @property
    def smtp_port(self) -> int: ...


@contextmanager
def smtp_session(cfg: SmtpSettings, password: str | None) -> Iterator[smtplib.SMTP]:
    """A connected (and, as configured, encrypted and logged-in) SMTP session; `password` is read from
    the environment by the caller, never from a file."""
    context = ssl.create_default_context(cafile=cfg.ca_file)
    if cfg.security == "ssl":
        smtp = smtplib.SMTP_SSL(cfg.host, cfg.smtp_port, timeout=cfg.timeout_s, context=context)
    else:
        smtp = smtplib.SMTP(cfg.host, cfg.smtp_port, timeout=cfg.timeout_s)
    try:
        if cfg.security == "starttls":
            smtp.starttls(context=context)
        if cfg.username:
            smtp.login(cfg.username, password or "")
        yield smtp
    finally:
        try:
            smtp.quit()
        except (smtplib.SMTPException, OSError):
            smtp.close()
