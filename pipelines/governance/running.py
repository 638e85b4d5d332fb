"""Running work from every engine behind one interface: what the governance tick reads each minute.

A `RunningWorkReader` answers, for one engine, the jobs running now in the shape of the
allocator API's `job_view` (GET /v1/jobs?state=RUNNING), which
`pipelines.governance.live.allocations_from_jobs` turns into the policies' allocations:

    job_id, attempt, tenant, queue, user, state, started_at, ended_at (RFC 3339, UTC),
    gpus: [{host, gpu, gpu_instance_id, gpu_instance_profile, fraction}],
    spec: {template, expected_runtime_s, gpu_model, share_mode, ...}

with its queues (name, max_runtime_s, low_priority) and the engine's name (`source`: allocator,
slurm, kueue), which the allocations, the findings and the outbox's actions carry. Jobs an engine
lists that cannot be read are left out and counted by reason in `RunningWork.skipped`: one bad
record never stops the tick.

- `AllocatorWork`: gpupool's own allocator, through its API client (as the tick always read it).
- `SlurmWork`: slurmctld's live view, `squeue --json`, for the partitions `slurm.governance`
  names (gpupool.yml; nothing outside them is read). Each running job's GPUs per node come from
  `gres_detail` (pipelines.sources.slurm_squeue, the same reading as the ingest's raw.job_gpus):
  user -> user, account -> tenant, partition (or QOS) -> queue, restart_cnt + 1 -> attempt,
  time_limit -> expected_runtime_s and time_limit_s, and the template from the job's Comment
  marker, its QOS or its partition (`SlurmGovernance`).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pipelines.connectors.slurm import (
    Runner,
    SlurmConfig,
    SlurmGovernance,
    checked,
    run_command,
    squeue_command,
)
from pipelines.enforcement.slurm import UNLIMITED_MINUTES
from pipelines.sources.jsonl import RecordError
from pipelines.sources.slurm_squeue import job_id_text, job_placements, job_state, slurm_number, squeue_jobs


@dataclass(frozen=True)
class RunningWork:
    """One engine's running jobs (job_view dicts) and queues, as read at one tick."""

    source: str
    jobs: list[dict]
    queues: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> jobs left out (or GPUs, where it says so)


class RunningWorkReader(Protocol):
    """One engine's running work. `read` raises when the engine cannot be read at all (then the
    tick plans nothing for that engine); jobs it cannot read are skipped and counted."""

    source: str

    def read(self) -> RunningWork: ...


class AllocatorJobs(Protocol):
    """What `AllocatorWork` needs of `pipelines.connectors.allocator.AllocatorClient`."""

    def running_jobs(self) -> list[dict]: ...

    def queues(self) -> list[dict]: ...


class AllocatorWork:
    """gpupool's allocator: its API already answers in job_view."""

    source = "allocator"

    def __init__(self, client: AllocatorJobs):
        self.client = client

    def read(self) -> RunningWork:
        return RunningWork(self.source, self.client.running_jobs(), self.client.queues())


# --- Slurm ------------------------------------------------------------------------------------


def _text(job: Mapping[str, object], key: str) -> str | None:
    value = job.get(key)
    return value if isinstance(value, str) and value else None


def slurm_template(job: Mapping[str, object], scope: SlurmGovernance) -> str | None:
    """The job's template: its Comment marker (`gpupool:training`), else its QOS's, else its
    partition's, else the default."""
    prefix = scope.template_comment_prefix
    comment = _text(job, "comment")
    if prefix and comment:
        marked = re.search(rf"(?:^|[\s,;]){re.escape(prefix)}([\w.-]+)", comment)
        if marked:
            return marked[1]
    qos, partition = _text(job, "qos"), _text(job, "partition")
    if qos in scope.template_by_qos:
        return scope.template_by_qos[qos]
    if partition in scope.template_by_partition:
        return scope.template_by_partition[partition]
    return scope.default_template


def slurm_job_view(job: Mapping[str, object], scope: SlurmGovernance) -> tuple[dict | None, int]:
    """One RUNNING `squeue --json` job as a job_view dict (None when it holds no GPU with an index:
    nothing to govern), and how many of its GPUs were left out (MIG-typed gres carry no GPU index,
    so no telemetry series to judge). RecordError when a field the policies need cannot be read."""
    placements, unindexed = job_placements(job)
    indexed = [p for p in placements if p["gpu"] is not None]
    if not indexed:
        return None, unindexed
    job_id = job_id_text(job)
    queue = _text(job, scope.queue_from)
    if queue is None:
        raise RecordError(f"job {job_id} has no {scope.queue_from}")
    limit = slurm_number(job.get("time_limit"), "time_limit")  # minutes
    limit_s = limit * 60 if limit is not None and 0 < limit < UNLIMITED_MINUTES else None
    first = indexed[0]
    view = {
        "job_id": job_id, "attempt": first["attempt"], "tenant": _text(job, "account"), "queue": queue,
        "user": _text(job, "user_name"), "state": "RUNNING",
        "started_at": first["assigned_at"].strftime("%Y-%m-%dT%H:%M:%SZ"), "ended_at": None,
        "gpus": [{"host": p["host"], "gpu": p["gpu"], "gpu_instance_id": None, "gpu_instance_profile": None,
                  "fraction": p["fraction"]} for p in indexed],
        # --time is what a Slurm user declares of a job's length: the policies' expected run time
        "spec": {"template": slurm_template(job, scope), "gpu_model": first["gpu_model"], "share_mode": "whole",
                 "expected_runtime_s": limit_s, "time_limit_s": limit_s,
                 "partition": _text(job, "partition"), "qos": _text(job, "qos"),
                 "comment": _text(job, "comment")},
    }
    return view, unindexed


def slurm_running_work(data: bytes | str, scope: SlurmGovernance) -> RunningWork:
    """`squeue --json` -> the running jobs of the partitions in scope, as job_view dicts; what
    cannot be read is skipped and counted by reason. RecordError when the document is not squeue's."""
    partitions = set(scope.partitions)
    jobs, skipped = [], Counter()
    for job in squeue_jobs(data):
        try:
            if not isinstance(job, dict):
                raise RecordError("job is not a JSON object")
            # squeue 22.05 ignores --states with --json: the filter is here
            if job_state(job) != "RUNNING" or job.get("partition") not in partitions:
                continue
            view, unindexed = slurm_job_view(job, scope)
        except RecordError as error:
            skipped[skip_reason(str(error))] += 1
            continue
        if unindexed:
            skipped["MIG-typed GPUs left out (no GPU index)"] += unindexed
        if view is not None:
            jobs.append(view)
    return RunningWork("slurm", jobs, [], skipped)


def skip_reason(message: str) -> str:
    """A skip reason without the job's numbers (its id, counts, indices), so that reasons count alike."""
    return re.sub(r"\d+", "N", message)[:160]


class SlurmWork:
    """slurmctld's running jobs (`squeue --json`) within `slurm.governance`'s partitions."""

    source = "slurm"

    def __init__(self, config: SlurmConfig, run: Runner = run_command):
        if config.governance is None:
            raise ValueError("slurm.governance is not set: it names the partitions governance reads")
        self.config = config
        self.scope = config.governance
        self.run = run

    def read(self) -> RunningWork:
        return slurm_running_work(checked(self.run(squeue_command(self.config), self.config.command_timeout_s)),
                                  self.scope)
