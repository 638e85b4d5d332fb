"""The shapes every part of idle-reclaim shares: policy rules, findings' keys, planned actions.

Findings are Polars frames with pipelines.contracts.FINDING_SCHEMA (one row per finding: a job
attempt caught by one policy version over one evidence window). The planner turns findings into
PlannedActions; the outbox (pipelines/governance/) delivers them through an `Enforcer` and logs
every decision (`gpupool.governance/v1`, vocabulary in pipelines/contracts.py) to the
`governance_actions` landing source, which the warehouse ingests for the ledger.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pipelines.contracts import FINDING_SCHEMA, DecisionStatus, Mode, PolicyKind, StepAction

# Evaluated every minute on fresh data by the sensor; the others once a day over the warehouse.
LIVE_KINDS = (PolicyKind.IDLE_ALLOCATION, PolicyKind.ZOMBIE, PolicyKind.IDLE_INTERACTIVE, PolicyKind.OVERRUN)


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
    drains_per_hour: int = 2  # gpu_health drains (nodes and GPUs together): a sick fleet is not emptied at once


_EMPTY: dict[tuple, pl.DataFrame] = {}


def empty_frame(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """An empty frame of the schema: a copy of one built once per schema. A build from the schema costs
    every look time, a copy far less (bench/README.md, "Figures the code's choices rest on")."""
    key = tuple(schema.items())
    frame = _EMPTY.get(key)
    if frame is None:
        frame = _EMPTY[key] = pl.DataFrame(schema=schema)
    return frame.clone()


def empty_findings() -> pl.DataFrame:
    return empty_frame(FINDING_SCHEMA)


def finding_key(policy: str, version: str, job_id: str, attempt: int, window_start_iso: str) -> str:
    """Deterministic: the same finding found again (next minute, re-run) has the same key."""
    return f"{policy}:{version}:{job_id}:a{attempt}:{window_start_iso}"


def action_key(finding_id: str, step_index: int, action: str) -> str:
    """The idempotency key sent to the engine: stable for a finding's step, short enough for any engine."""
    digest = hashlib.sha256(finding_id.encode()).hexdigest()[:16]
    return f"gp-{action}-{step_index}-{digest}"


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

