"""The shapes every part of idle-reclaim shares: policy rules, findings, planned actions.

Findings are Polars frames with FINDING_SCHEMA (one row per finding: a job attempt caught by one
policy version over one evidence window). The planner turns findings into PlannedActions; the
outbox delivers them through an `Enforcer` and logs every decision (DECISION_SCHEMA) to the
`governance_actions` landing source, which the warehouse ingests for the ledger.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import polars as pl


class PolicyKind(StrEnum):
    IDLE_ALLOCATION = "idle_allocation"
    ZOMBIE = "zombie"
    IDLE_INTERACTIVE = "idle_interactive"
    OVERRUN = "overrun"
    OVERSIZED = "oversized"
    RETRY_STORM = "retry_storm"
    TEMPLATE_BREACH = "template_breach"


# Evaluated every minute on fresh data by the sensor; the others once a day over the warehouse.
LIVE_KINDS = (PolicyKind.IDLE_ALLOCATION, PolicyKind.ZOMBIE, PolicyKind.IDLE_INTERACTIVE, PolicyKind.OVERRUN)


class Mode(StrEnum):
    SHADOW = "shadow"  # record what would be done; nothing reaches the engine
    ENFORCE = "enforce"


class StepAction(StrEnum):
    REMIND = "remind"
    RECLAIM = "reclaim"
    PREEMPT = "preempt"
    CAP_RUNTIME = "cap_runtime"
    RECOMMEND = "recommend"  # recorded advice (right-size); never sent to an engine


@dataclass(frozen=True)
class Step:
    """One step of a policy's escalation. `after_s`: seconds after the previous step was delivered
    (the first step: after the finding's detection). A later step runs only while the finding holds."""

    action: StepAction
    after_s: int = 0


@dataclass(frozen=True)
class Rule:
    """A policy version with its parameters resolved for one queue/template (most specific wins:
    queue, then template, then the policy's defaults)."""

    policy: str  # e.g. "idle-allocation"
    version: str  # e.g. "3"
    kind: PolicyKind
    mode: Mode
    params: dict[str, Any]
    steps: tuple[Step, ...]
    scope: str = "default"  # default | template:<name> | queue:<name>


@dataclass(frozen=True)
class Exemption:
    """An allow-list entry: findings it matches are recorded as exempt, never acted on."""

    tenant: str
    reason: str
    expires_at: Any  # datetime.datetime (UTC, naive)
    policy: str | None = None  # None: every policy
    queue: str | None = None
    job_id: str | None = None
    granted_by: str = ""


@dataclass(frozen=True)
class RateLimits:
    reclaims_per_hour_total: int = 20
    reclaims_per_hour_per_tenant: int = 5


FINDING_SCHEMA: dict[str, pl.DataType] = {
    "finding_id": pl.String,  # finding_key(...)
    "policy": pl.String,
    "policy_version": pl.String,
    "kind": pl.String,  # PolicyKind
    "scope": pl.String,  # Rule.scope the parameters came from
    "source": pl.String,  # engine holding the work: allocator | slurm | kueue
    "job_id": pl.String,
    "attempt": pl.Int64,
    "tenant": pl.String,
    "queue": pl.String,
    "template": pl.String,
    "user_name": pl.String,
    "gpu_model": pl.String,
    "window_start_at": pl.Datetime("us"),  # evidence window, UTC naive
    "window_end_at": pl.Datetime("us"),
    "detected_at": pl.Datetime("us"),  # when the rule's threshold was crossed
    "gpus_flagged": pl.Int64,  # GPUs (allocations) the finding covers
    "gpus_held": pl.Int64,  # GPUs the attempt holds
    "gpu_hours": pl.Float64,  # wasted GPU-hours in the evidence window (x fraction)
    "metric": pl.String,  # what was measured, e.g. "activity", "runtime_s", "failed_attempts"
    "observed": pl.Float64,  # its value over the window
    "threshold": pl.Float64,  # the rule's threshold for it
    "is_ongoing": pl.Boolean,  # the attempt still runs and the condition still holds at the data's end
    "recommendation": pl.String,  # e.g. "1 x 3g.40gb instead of 8 x H100"; null when none
    "evidence": pl.String,  # JSON object of numbers: per-GPU windows, spikes ignored, ...
}


def empty_findings() -> pl.DataFrame:
    return pl.DataFrame(schema=FINDING_SCHEMA)


def finding_key(policy: str, version: str, job_id: str, attempt: int, window_start_iso: str) -> str:
    """Deterministic: the same finding found again (next minute, re-run) has the same key."""
    return f"{policy}:{version}:{job_id}:a{attempt}:{window_start_iso}"


def action_key(finding_id: str, step_index: int, action: str) -> str:
    """The idempotency key sent to the engine: stable for a finding's step, short enough for any engine."""
    digest = hashlib.sha256(finding_id.encode()).hexdigest()[:16]
    return f"gp-{action}-{step_index}-{digest}"


class DecisionStatus(StrEnum):
    SHADOW = "shadow"  # shadow mode: recorded, not sent
    EXEMPT = "exempt"  # matched an exemption or a protected template
    RATE_LIMITED = "rate_limited"  # deferred: over the hourly reclaim limit; tried again later
    QUEUED = "queued"  # in the outbox, not yet answered
    ANSWERED = "answered"  # the engine answered (outcome says how)
    RECOMMENDED = "recommended"  # a recommend step: advice recorded
    DROPPED = "dropped"  # the finding no longer holds (job ended, busy again) before the step was due


@dataclass(frozen=True)
class PlannedAction:
    """One step of one finding, decided now."""

    idempotency_key: str  # action_key(finding_id, step_index, action)
    finding_id: str
    policy: str
    policy_version: str
    kind: PolicyKind
    mode: Mode
    step_index: int
    action: StepAction
    engine: str  # allocator | slurm | kueue
    job_id: str
    attempt: int
    tenant: str
    queue: str
    reason: str  # for the user: what was seen, in words with numbers
    evidence: dict = field(default_factory=dict)
    status: DecisionStatus = DecisionStatus.QUEUED
    status_reason: str = ""  # why exempt / rate limited / dropped
    runtime_s: int | None = None  # cap_runtime


# One line per decision and per answer in landing/governance_actions/<day>/<writer>.jsonl.
DECISION_SCHEMA_NAME = "gpupool.governance/v1"
