"""Checkpoint and artifact reports: what a job may report, and for which of its attempts.

A job (its tenant's token, or an admin) reports each checkpoint, artifact or registered model
version it writes (`POST /v1/jobs/{id}/artifacts`); the simulator's training jobs report through
the same `Engine.report_artifact`. A report names an attempt (default: the running one, else the
last that ran) and when it was written (default: now). It is refused with 422 when it cannot be
right whatever the job's state (an unknown kind, a negative size, a time in the future or before
the attempt started, an attempt the job never had) and with 409 when the attempt is over: an
attempt that ended (preempted, requeued or finished) takes reports for `REPORT_GRACE_S` more,
so that a checkpoint written in the preemption grace, or a model registered as the job ends, is
still counted.

The engine keeps, per attempt, when it ran and its last ok checkpoint (`Job.attempts`,
`Job.last_checkpoint_at`): preemption and the idle-reclaim evidence read checkpoint staleness from it.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from allocator.model import AttemptLog, Job, JobState
from allocator.records import ARTIFACT_KINDS, ARTIFACT_STATUSES, rfc3339

REPORT_GRACE_S = 3600  # an ended attempt still takes reports this long (late uploads, final model)
CLOCK_SKEW_S = 60  # a written_at this far ahead of the allocator's clock is taken as now
MAX_BIGINT = 2**63 - 1


class ArtifactReportError(ValueError):
    """A report the engine refuses; `status` is the HTTP answer (422 bad input, 409 attempt over)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ArtifactReport:
    """What a job reports: one checkpoint, artifact or model version."""

    kind: str  # checkpoint | artifact | model_version
    status: str = "ok"  # ok | failed
    location: str | None = None
    size_bytes: int | None = None
    training_step: int | None = None
    written_at: dt.datetime | None = None  # naive UTC; None: now
    attempt: int | None = None  # None: the running attempt, else the last that ran
    model_name: str | None = None
    model_version: str | None = None

    def problem(self) -> str | None:
        """What makes the report wrong whatever the job's state; None when nothing does."""
        if self.kind not in ARTIFACT_KINDS:
            return f"kind {self.kind!r} is not one of {', '.join(ARTIFACT_KINDS)}"
        if self.status not in ARTIFACT_STATUSES:
            return f"status {self.status!r} is not one of {', '.join(ARTIFACT_STATUSES)}"
        for name in ("size_bytes", "training_step"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= MAX_BIGINT:
                return f"{name} is {value}, expected 0..{MAX_BIGINT}"
        if self.attempt is not None and self.attempt < 1:
            return f"attempt is {self.attempt}, expected 1 or more (attempts are 1-based)"
        named = self.model_name is not None and self.model_version is not None
        if self.kind == "model_version" and not named:
            return "kind model_version needs model_name and model_version"
        if self.kind != "model_version" and (self.model_name is not None or self.model_version is not None):
            return f"model_name and model_version are for kind model_version, not {self.kind}"
        return None


def track_attempt(job: Job, event_type: str, now: dt.datetime) -> None:
    """Keeps `job.attempts` in step with the job's events: a start opens the attempt, a requeue or a
    finish closes it (both are emitted with the attempt that ends)."""
    if event_type == "start":
        job.attempts[job.attempt] = AttemptLog(now)
    elif event_type in ("requeue", "finish") and job.attempt in job.attempts:
        job.attempts[job.attempt].ended_at = now


def reported_attempt(job: Job, report: ArtifactReport, now: dt.datetime) -> tuple[int, AttemptLog, dt.datetime]:
    """The attempt a report is for, its log and the report's time; ArtifactReportError if refused."""
    problem = report.problem()
    if problem is not None:
        raise ArtifactReportError(422, problem)
    if report.attempt is None:
        if not job.attempts:
            raise ArtifactReportError(409, f"job {job.job_id} has not started yet: it has nothing to report")
        number = job.attempt if job.state == JobState.RUNNING else max(job.attempts)
    else:
        number = report.attempt
        if number > job.attempt:
            raise ArtifactReportError(
                422, f"job {job.job_id} has no attempt {number} (its latest is attempt {job.attempt})")
        if number not in job.attempts:
            raise ArtifactReportError(409, f"attempt {number} of job {job.job_id} has not started")
    log = job.attempts[number]
    if log.ended_at is not None and (now - log.ended_at).total_seconds() > REPORT_GRACE_S:
        raise ArtifactReportError(
            409, f"attempt {number} of job {job.job_id} ended at {rfc3339(log.ended_at)}: reports are "
                 f"taken up to {REPORT_GRACE_S} s after an attempt ends")
    written_at = report.written_at or now
    if (written_at - now).total_seconds() > CLOCK_SKEW_S:
        raise ArtifactReportError(
            422, f"written_at {rfc3339(written_at)} is in the future (the allocator's clock says "
                 f"{rfc3339(now)}); send UTC, or leave it out to mean now")
    written_at = min(written_at, now)
    if written_at < log.started_at:
        raise ArtifactReportError(
            422, f"written_at {rfc3339(written_at)} is before attempt {number} of job {job.job_id} started "
                 f"({rfc3339(log.started_at)})")
    return number, log, written_at
