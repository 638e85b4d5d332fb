"""One SMTP session for every mail gpupool sends (review packs, reminders): connected, encrypted
(STARTTLS, or TLS from the first byte) against the system's CAs or the configured CA file, logged in
when a user is configured, and quit however the caller leaves."""
from __future__ import annotations

import smtplib
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PASSWORD_ENV = "GPUPOOL_SMTP_PASSWORD"  # where the SMTP password comes from (never a file)
DEFAULT_PORTS = {"starttls": 587, "ssl": 465, "none": 25}


class SmtpServer(BaseModel):
    """The SMTP server part of a mail section of gpupool.yml (pack_delivery, reminders.email): a
    section's model adds its own fields. A password in the file, or a login over `security: none`,
    is refused."""

    model_config = ConfigDict(extra="forbid")
    host: str
    port: int | None = Field(None, ge=1, le=65535)  # default by security: 587, 465, 25
    security: Literal["starttls", "ssl", "none"] = "starttls"
    username: str | None = None  # with it, the password from the environment ($GPUPOOL_SMTP_PASSWORD)
    ca_file: str | None = None  # a CA bundle to trust (a relay with a private CA); default: the system's
    timeout_s: float = Field(30, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _no_password_in_the_file(cls, data: object) -> object:
        if isinstance(data, dict) and "password" in data:
            variable = data.get("password_env") or PASSWORD_ENV
            raise ValueError(f"password: remove it from the file; export {variable} instead "
                             "(secrets only come from the environment)")
        return data

    @model_validator(mode="after")
    def _no_password_in_clear(self) -> SmtpServer:
        if self.username and self.security == "none":
            raise ValueError("security: none would send the password unencrypted; write starttls or ssl "
                             "(or remove username for a relay that needs no login)")
        return self

    @property
    def smtp_port(self) -> int:
        return self.port or DEFAULT_PORTS[self.security]


@contextmanager
def smtp_session(cfg: SmtpServer, password: str | None) -> Iterator[smtplib.SMTP]:
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
