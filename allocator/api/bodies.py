"""The request bodies and the page of a log the API answers. A misspelt field is an error; the field
types are `allocator.inputs`' strict, bounded ones."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from allocator.artifacts import MAX_BIGINT
from allocator.inputs import (
    MAX_LIST,
    MAX_NAME,
    MAX_PRIORITY,
    MAX_REPLICAS,
    MAX_RETRY_BUDGET,
    Evidence,
    Flag,
    Gpus,
    Name,
    Quota,
    Seconds,
    Text,
)
from allocator.model import NODE_ACTIONS, ActionKind, JobState, ShareMode, Template, drain_target


class _Body(BaseModel):
    # a misspelt field is an error, not silently ignored; the field types are allocator.inputs' strict,
    # bounded ones, so nothing reaches the store that it could not log and answer (issue 11)
    model_config = ConfigDict(extra="forbid")


class JobSubmit(_Body):
    """A job to submit. `tenant` defaults to the queue's (admin) or the caller's (tenant member);
    `user` to the caller's name."""

    queue: Name
    template: Template
    gpu_model: Name
    tenant: Name | None = None
    user: Name | None = None
    gpus: Gpus = 1
    share_mode: ShareMode = ShareMode.WHOLE
    mig_profile: Name | None = None
    job_name: Annotated[Text, Field(max_length=MAX_NAME)] = ""
    expected_runtime_s: Seconds | None = None
    checkpoint_policy: Name | None = None
    min_replicas: Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)] | None = None
    rollback: Name | None = None
    reservation: Name | None = None
    time_limit_s: Seconds | None = None
    idle_reminder_s: Seconds | None = None


class JobCancel(_Body):
    reason: Text = ""


class JobFinish(_Body):
    """A node agent's report that the work ended by itself."""

    state: JobState = JobState.COMPLETED
    exit_code: Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)] | None = 0
    reason: Text | None = None

    @model_validator(mode="after")
    def _final(self) -> JobFinish:
        if not self.state.is_final:
            raise ValueError(f"state must be a final state, not {self.state.value}")
        return self


class ArtifactReportBody(_Body):
    """A checkpoint, artifact or registered model version the job wrote. The engine checks the rest
    (`allocator.artifacts`: model fields of the kind, the attempt, the time)."""

    kind: Literal["checkpoint", "artifact", "model_version"]
    status: Literal["ok", "failed"] = "ok"
    location: Text | None = None  # URI or path
    size_bytes: Annotated[StrictInt, Field(ge=0, le=MAX_BIGINT)] | None = None
    training_step: Annotated[StrictInt, Field(ge=0, le=MAX_BIGINT)] | None = None
    written_at: dt.datetime | None = None  # RFC 3339; without an offset it is UTC; default now
    attempt: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = None  # default the running/last attempt
    model_name: Name | None = None  # kind model_version
    model_version: Name | None = None

    @field_validator("written_at")
    @classmethod
    def _utc(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is None or value.tzinfo is None:
            return value
        try:
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        except OverflowError:
            raise ValueError("written_at is out of range once converted to UTC") from None

    def payload(self) -> dict:
        """As the store logs it: written_at as naive UTC ISO text."""
        out = self.model_dump(mode="json")
        if self.written_at is not None:
            out["written_at"] = self.written_at.isoformat()
        return out


class ActionRequest(_Body):
    """An enforcement action; the idempotency key makes a repeat answer `already_done`."""

    kind: ActionKind
    idempotency_key: Name
    target: Name  # a job id; for quota_change a queue name; for drain/undrain a node or node/gpu
    reason: Text = ""
    policy: Name | None = None
    policy_version: Name | None = None
    evidence: Evidence = Field(default_factory=dict)
    runtime_s: Seconds | None = None
    quota: Quota | None = None
    dry_run: Flag = False

    @model_validator(mode="after")
    def _fields_of_kind(self) -> ActionRequest:
        if self.kind == ActionKind.CAP_RUNTIME and self.runtime_s is None:
            raise ValueError("cap_runtime needs runtime_s")
        if self.kind == ActionKind.QUOTA_CHANGE and not self.quota:
            raise ValueError("quota_change needs quota (GPUs per GPU model)")
        if self.kind in NODE_ACTIONS:
            if self.runtime_s is not None or self.quota is not None:
                raise ValueError(f"{self.kind.value} takes no runtime_s or quota")
            drain_target(self.target)  # its ValueError says the form expected
        return self


class QueuePatch(_Body):
    """An admin change to a queue's rules; only the fields given change."""

    quota: Quota | None = None
    priority: Annotated[StrictInt, Field(ge=0, le=MAX_PRIORITY)] | None = None
    preemptible: Flag | None = None
    max_gpus_per_request: Gpus | None = None
    max_runtime_s: Seconds | None = None
    retry_budget: Annotated[StrictInt, Field(ge=0, le=MAX_RETRY_BUDGET)] | None = None
    can_borrow: Flag | None = None
    templates: Annotated[list[Template], Field(max_length=len(Template))] | None = None
    gpu_models: Annotated[list[Name], Field(max_length=MAX_LIST)] | None = None
    # tenants that may also submit here; ["*"] for all
    shared_with: Annotated[list[Name], Field(max_length=MAX_LIST)] | None = None

    @model_validator(mode="after")
    def _something(self) -> QueuePatch:
        if not self.model_fields_set:
            raise ValueError("no field to change")
        return self


class Page(BaseModel):
    """Records with seq > cursor, oldest first; ask again with `cursor=next_cursor`."""

    records: list[dict[str, Any]]
    next_cursor: int
