"""The `reminders` section of gpupool.yml: who a reminder goes to and how (see gpupool.example.yml and
docs/reclaim.md, "Reminders"). Secrets come only from the environment: the SMTP password from
$GPUPOOL_SMTP_PASSWORD (or the variable `password_env` names), a webhook URL holding a token as
`${VAR}`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipelines.config import section
from pipelines.mail import PASSWORD_ENV, SmtpServer

SECTION = "reminders"

# The body each chat service takes for a plain text message; `{text}` is the subject and the message.
WEBHOOK_BODIES: dict[str, Any] = {
    "slack": {"text": "{text}"},
    "mattermost": {"text": "{text}"},
    "feishu": {"msg_type": "text", "content": {"text": "{text}"}},
    "dingtalk": {"msgtype": "text", "text": {"content": "{text}"}},
    "wecom": {"msgtype": "text", "text": {"content": "{text}"}},
}


class UserEntry(BaseModel):
    """One owner: where to mail, in which language, how to mention them in chat."""

    model_config = ConfigDict(extra="forbid")
    email: str | None = None  # default: email.address_template
    language: Literal["en", "zh"] | None = None  # default: reminders.language
    chat: str | None = None  # a mention for the webhook, e.g. "<@U024BE7LH>" (Slack) or "@alice"


class EmailConfig(SmtpServer):
    """Mail to the job's owner: the SMTP server (pipelines/mail.py), the sender, where the password
    comes from and the address of a user the map does not name."""

    password_env: str = PASSWORD_ENV
    from_address: str
    address_template: str | None = None  # "{user}@example.org": the address of a user the map does not name
    timeout_s: float = Field(10, gt=0)  # a tick waits at most this long for the server

    @field_validator("address_template")
    @classmethod
    def _has_user(cls, value: str | None) -> str | None:
        if value is not None and "{user}" not in value:
            raise ValueError("address_template: write it with {user}, e.g. \"{user}@example.org\"")
        return value


class WebhookConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str  # often holds a token: write it as ${VAR}
    format: Literal["slack", "mattermost", "feishu", "dingtalk", "wecom"] = "slack"
    body: Any = None  # a JSON template instead of the format's; strings may hold {text} {subject} {body} {user} {mention}
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(5, gt=0)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("url: an http(s) address")
        return value


class RemindersConfig(BaseModel):
    """The `reminders` section: at least one of email and webhook."""

    model_config = ConfigDict(extra="forbid")
    language: Literal["en", "zh"] = "en"
    users: dict[str, UserEntry] = Field(default_factory=dict)
    exemption_contact: str | None = None  # where to ask for an exemption, e.g. "#gpu-pool or oncall@example.org"
    per_user_per_hour: int = Field(6, ge=1)  # messages to one user in an hour; beyond it, reminders are not sent
    digest_from: int = Field(3, ge=2)  # a user with this many reminders in one delivery gets one digest
    email: EmailConfig | None = None
    webhook: WebhookConfig | None = None

    @model_validator(mode="after")
    def _a_channel(self) -> RemindersConfig:
        if self.email is None and self.webhook is None:
            raise ValueError("name email, webhook or both: a reminder needs a way to reach a person")
        return self

    def address(self, user: str | None) -> str | None:
        """The user's email address: the map's, else the template's; None for a user without one."""
        if not user or self.email is None:
            return None
        entry = self.users.get(user)
        if entry is not None and entry.email:
            return entry.email
        return self.email.address_template.replace("{user}", user) if self.email.address_template else None

    def language_of(self, user: str | None) -> str:
        entry = self.users.get(user or "")
        return entry.language if entry is not None and entry.language else self.language

    def mention(self, user: str | None) -> str:
        entry = self.users.get(user or "")
        return entry.chat if entry is not None and entry.chat else (user or "")


def reminders_config(path: Path | None = None) -> RemindersConfig | None:
    """The section, or None when gpupool.yml has none (reminders then reach no one: the engines' own
    remind only: the allocator's record, Slurm's AdminComment, the Workload's annotation)."""
    return section(SECTION, RemindersConfig, path)
