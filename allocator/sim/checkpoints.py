"""Checkpoints and model artifacts of simulated training jobs (docs/simulator.md, "Checkpoints and artifacts").

Each training job of the workload carries a `CheckpointPlan` (`plan_checkpoints`, drawn from a generator
of its own in `generate_workload`): its declared policy as an interval in seconds or in training steps,
its habit (on its policy, late, or never writing one), how fast it steps, how big its checkpoints and its
final weights are, and what its user does with a finished model (registers it, only logs it, or nothing).

`Checkpoints` follows the simulation's attempts: when one starts it lays out the attempt's checkpoint
times in one numpy pass (up to when its work stops: the end of its work, or the moment a zombie or an
idle allocation stops working) and reports each through the engine when it is due, so the engine keeps
the attempt's last checkpoint and its sink files the `gpupool.artifact/v1` records by day. A write that
is due after its attempt ended is dropped. A training job that completes reports its model artifact, and
its registered model version, at its end.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import numpy as np

from allocator.artifacts import ArtifactReport
from allocator.model import Job, JobSpec, JobState
from allocator.telemetry import ActivityProfile

# --- assumptions (docs/simulator.md): no public trace reports how often training jobs checkpoint ---------
LATE_SHARE = 0.12  # of training jobs: write, but 2-4x further apart than their policy declares
NEVER_SHARE = 0.05  # of training jobs: declare a policy and never write a checkpoint
LATE_DRIFT = (2.0, 4.0)  # a late job's intervals, as a multiple of the declared one (per job)
FAILED_WRITE = 0.02  # of checkpoint writes: the write fails (storage full, timeout); nothing is kept
REGISTERED_SHARE = 0.45  # of completed training jobs: the model is logged and registered (a model version)
LOGGED_SHARE = 0.35  # logged as an artifact only; the rest (0.20) leave no model artifact
EPOCH_S = (20 * 60.0, 120 * 60.0)  # an epoch lasts this long (uniform), for "each epoch" policies
STATE_BYTES_PER_PARAM = 14  # bf16 weights + fp32 master weights + two fp32 Adam moments
WEIGHTS_BYTES_PER_PARAM = 2  # the final model, in bf16
LOADER_BOUND_SLOWDOWN = 3.0  # a loader-bound job's steps take this much longer (its GPUs wait)
# per model family of the workload's job names: parameters, and seconds per training step (median)
FAMILIES: Mapping[str, tuple[float, float]] = {
    "resnet50": (25.6e6, 0.3),
    "vit-b16": (86.6e6, 0.35),
    "llama-ft": (8.03e9, 2.0),
    "bert-pretrain": (335e6, 0.6),
    "whisper-ft": (769e6, 0.9),
    "dlrm": (4.2e9, 0.25),
    "diffusion": (865e6, 0.7),
    "moe-pretrain": (14.3e9, 4.0),
}
PLAN_UNIFORMS = 6  # uniforms per job `plan_checkpoints` reads
_MAX_WRITES = 20_000  # per attempt: a bound for the layout (a week at one a minute)


class Habit(StrEnum):
    ON_POLICY = "on_policy"
    LATE = "late"
    NEVER = "never"


class Outcome(StrEnum):
    REGISTERED = "registered"  # an artifact, then a model version
    LOGGED_ONLY = "logged_only"  # an artifact only
    NONE = "none"


@dataclass(frozen=True)
class CheckpointPlan:
    """How a training job checkpoints (the simulator's knowledge): every `every_s` seconds of work or
    every `every_steps` training steps (its declared policy), times `drift` (1 on its policy)."""

    family: str
    habit: Habit
    drift: float
    step_s: float  # seconds per training step
    state_bytes: int  # one checkpoint
    weights_bytes: int  # the final model
    outcome: Outcome
    every_s: float | None = None
    every_steps: int | None = None


_EVERY = re.compile(r"every (\d+) ?(s|sec|seconds?|min|minutes?|h|hours?|steps?)")
_UNIT_S = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "min": 60, "minute": 60, "minutes": 60, "h": 3600,
           "hour": 3600, "hours": 3600}


def policy_interval(policy: str) -> tuple[float | None, int | None]:
    """A declared checkpoint policy as (seconds, steps): "hourly" (3600, None), "every 30 min" (1800, None),
    "every 1000 steps" (None, 1000); "each epoch" is (None, None): its length is the job's own."""
    text = policy.strip().lower()
    if text == "hourly":
        return 3600.0, None
    if text in ("each epoch", "every epoch"):
        return None, None
    match = _EVERY.fullmatch(text)
    if match is None or int(match[1]) <= 0:
        raise ValueError(
            f"checkpoint policy {policy!r}: expected 'hourly', 'each epoch' or 'every <n> min|h|steps'"
        )
    n, unit = int(match[1]), match[2]
    return (None, n) if unit.startswith("step") else (float(n * _UNIT_S[unit]), None)


def family_of(spec: JobSpec) -> str:
    """The model family a job trains, from the workload's job name `<family>-<nnn>`."""
    name = (spec.job_name or "").rpartition("-")[0]
    if name not in FAMILIES:
        raise ValueError(f"job name {spec.job_name!r}: expected '<family>-<nnn>' with a family of {sorted(FAMILIES)}")
    return name


def plan_checkpoints(spec: JobSpec, loader_bound: bool, u: np.ndarray) -> CheckpointPlan:
    """A training job's plan from `PLAN_UNIFORMS` uniforms (habit, drift, step time, epoch, outcome)."""
    habit_u, drift_u, step_u, epoch_u, outcome_u, _ = (float(x) for x in u[:PLAN_UNIFORMS])
    family = family_of(spec)
    params, step_median = FAMILIES[family]
    # step time: within a factor of ~1.5 of the family's median, slower for a loader-bound job
    step_s = step_median * math.exp(0.4 * (step_u - 0.5) * 2) * (LOADER_BOUND_SLOWDOWN if loader_bound else 1.0)
    habit = Habit.NEVER if habit_u < NEVER_SHARE else Habit.LATE if habit_u < NEVER_SHARE + LATE_SHARE else Habit.ON_POLICY
    every_s, every_steps = policy_interval(spec.checkpoint_policy or "")
    if every_s is None and every_steps is None:  # each epoch: so many steps
        every_steps = max(1, round((EPOCH_S[0] + (EPOCH_S[1] - EPOCH_S[0]) * epoch_u) / step_s))
    outcome = (
        Outcome.REGISTERED if outcome_u < REGISTERED_SHARE
        else Outcome.LOGGED_ONLY if outcome_u < REGISTERED_SHARE + LOGGED_SHARE
        else Outcome.NONE
    )
    return CheckpointPlan(
        family=family,
        habit=habit,
        drift=LATE_DRIFT[0] + (LATE_DRIFT[1] - LATE_DRIFT[0]) * drift_u if habit == Habit.LATE else 1.0,
        step_s=round(step_s, 4),
        state_bytes=int(params * STATE_BYTES_PER_PARAM),
        weights_bytes=int(params * WEIGHTS_BYTES_PER_PARAM),
        outcome=outcome,
        every_s=every_s,
        every_steps=every_steps,
    )


@dataclass(frozen=True)
class AttemptWrites:
    """An attempt's checkpoint writes: seconds after its start, training step, ok or failed."""

    offsets_s: np.ndarray  # int64, increasing
    steps: np.ndarray  # int64
    ok: np.ndarray  # bool


def lay_out(plan: CheckpointPlan, progress_s: float, window_s: float, rng: np.random.Generator) -> AttemptWrites:
    """The writes of an attempt that starts with `progress_s` seconds of work done and works for
    `window_s` seconds: on its interval (times the plan's drift, a few percent of jitter), from its start."""
    empty = np.zeros(0, dtype=np.int64)
    if plan.habit == Habit.NEVER or window_s <= 0:
        return AttemptWrites(empty, empty, np.zeros(0, dtype=bool))
    step0 = progress_s / plan.step_s
    if plan.every_steps is not None:
        gap_s = plan.every_steps * plan.step_s * plan.drift
    else:
        gap_s = float(plan.every_s or 0) * plan.drift
    n = int(min(window_s / (0.9 * gap_s) + 2, _MAX_WRITES))
    spread = 0.1 if plan.habit == Habit.LATE else 0.03
    jitter = rng.uniform(1.0 - spread, 1.0 + spread, n)
    failed = rng.random(n) < FAILED_WRITE
    if plan.every_steps is not None:
        # a save every so many steps: the next multiple after where the attempt resumes, then every
        # `every_steps` (a late job skips saves: every 2-4 of them)
        every = plan.every_steps * np.maximum(np.rint(plan.drift * jitter), 1.0)
        first = (math.floor(step0 / plan.every_steps) + 1) * plan.every_steps
        steps = first + np.concatenate([[0.0], np.cumsum(every[1:])])
        offsets = (steps - step0) * plan.step_s
    else:
        offsets = np.cumsum(gap_s * jitter)
        steps = np.floor(step0 + offsets / plan.step_s)
    offsets = np.rint(offsets)
    keep = offsets < window_s
    return AttemptWrites(offsets[keep].astype(np.int64), steps[keep].astype(np.int64), ~failed[keep])


class Reporter(Protocol):
    """The engine's path for a job's checkpoint and artifact reports (as `POST /v1/jobs/{id}/artifacts`)."""

    jobs: Mapping[str, Job]

    def report_artifact(self, job_id: str, report: ArtifactReport, now: dt.datetime,
                        reported_by: str | None = None) -> dict: ...


class PlannedJob(Protocol):
    """What `Checkpoints` reads of a planned job (`allocator.sim.workload.PlannedJob`)."""

    @property
    def spec(self) -> JobSpec: ...

    @property
    def behaviour(self) -> PlannedWork: ...


class PlannedWork(Protocol):
    """What it reads of the job's `Behaviour`: the work left to do, when it stops working, its plan."""

    @property
    def work_s(self) -> int | None: ...

    @property
    def profile(self) -> ActivityProfile: ...

    @property
    def checkpoints(self) -> CheckpointPlan | None: ...

    @property
    def checkpointed(self) -> bool: ...


class Simulation(Protocol):
    """What `Checkpoints` reads of the simulation: its engine, the open jobs' plans and progress (seconds
    of work kept), its clock (`at(when, step, *args)` calls `step(now, *args)` at `when`) and its end."""

    engine: Reporter
    plans: Mapping[str, PlannedJob]
    progress: Mapping[str, float]
    end: dt.datetime

    def at(self, when: dt.datetime, step: Callable[..., None], *args: object) -> None: ...


@dataclass
class _Run:
    attempt: int
    started_at: dt.datetime
    writes: AttemptWrites
    reported: int = 0  # writes reported so far


class Checkpoints:
    """Reports the simulated training jobs' checkpoints and final artifacts through the engine.

    `note(record, now)` follows the engine's start, preempt, requeue and finish records (before the
    simulator forgets a finished job's plan). `written` counts the reports by "kind status".
    """

    def __init__(self, sim: Simulation, seed: int):
        self.sim, self.seed = sim, seed
        self.runs: dict[str, _Run] = {}  # the running attempts that still have a write due
        self.versions: Counter[str] = Counter()  # registered model -> its latest version
        self.written: Counter[str] = Counter()
        self.lost_gpu_s = 0.0  # GPU-seconds the preemptions lost (`preempted`)

    def note(self, record: dict, now: dt.datetime) -> None:
        job_id = record["job_id"]
        plan = self.sim.plans.get(job_id)
        cp = None if plan is None else plan.behaviour.checkpoints
        if cp is None:
            return
        if record["type"] == "start":
            self._start(job_id, record["attempt"], plan, cp, now)
            return
        self.runs.pop(job_id, None)
        if record["type"] == "finish" and record.get("state") == JobState.COMPLETED.value:
            self._final(job_id, record["attempt"], plan.spec, cp, now)

    def preempted(self, job_id: str, attempt: int, started_at: dt.datetime, gpus: float, now: dt.datetime) -> float:
        """A preempted attempt's work kept, in seconds: up to its last ok checkpoint (the engine's), none
        without one. A job that checkpoints on no plan of ours (a replayed month's) keeps its whole hours.
        Adds its `gpus` (fraction-weighted) x the time since then (or its start) to `lost_gpu_s`."""
        b = self.sim.plans[job_id].behaviour
        log = self.sim.engine.jobs[job_id].attempts.get(attempt)
        if b.checkpoints is None:
            whole_hours = (now - started_at).total_seconds() // 3600 * 3600 if b.checkpointed else 0.0
            saved_at = started_at + dt.timedelta(seconds=whole_hours)
        else:
            saved_at = started_at if log is None or log.last_checkpoint_at is None else log.last_checkpoint_at
        self.lost_gpu_s += gpus * (now - saved_at).total_seconds()
        return (saved_at - started_at).total_seconds()

    def due_before(self, job_id: str, attempt: int, before: dt.datetime) -> dt.datetime | None:
        """When the running attempt's last ok checkpoint not reported yet and due before `before` will be
        written (None: none), as `_write` reports them while the attempt runs."""
        run = self.runs.get(job_id)
        if run is None or run.attempt != attempt:
            return None
        for k in range(len(run.writes.offsets_s) - 1, run.reported - 1, -1):
            when = run.started_at + dt.timedelta(seconds=int(run.writes.offsets_s[k]))
            if when < before and run.writes.ok[k]:
                return when
        return None

    def _start(self, job_id: str, attempt: int, plan: PlannedJob, cp: CheckpointPlan, now: dt.datetime) -> None:
        b = plan.behaviour
        progress = self.sim.progress.get(job_id, 0.0)
        window = min(
            math.inf if b.work_s is None else b.work_s - progress,  # what is left of the work
            math.inf if b.profile.busy_for_s is None else b.profile.busy_for_s,  # it stops working (hangs)
            (self.sim.end - now).total_seconds(),
        )
        rng = np.random.default_rng([self.seed, 0xC4EA, zlib.crc32(job_id.encode()), attempt])
        writes = lay_out(cp, progress, window, rng)
        if len(writes.offsets_s):
            self.runs[job_id] = _Run(attempt, now, writes)
            self.sim.at(now + dt.timedelta(seconds=int(writes.offsets_s[0])), self._write, job_id, attempt, 0)

    def _write(self, now: dt.datetime, job_id: str, attempt: int, k: int) -> None:
        run = self.runs.get(job_id)
        job = self.sim.engine.jobs.get(job_id)
        if run is None or run.attempt != attempt or job is None or job.state != JobState.RUNNING:
            return
        spec, cp = self.sim.plans[job_id].spec, self.sim.plans[job_id].behaviour.checkpoints
        step, ok = int(run.writes.steps[k]), bool(run.writes.ok[k])
        run.reported = k + 1
        self._report(job_id, spec, now, {
            "kind": "checkpoint",
            "status": "ok" if ok else "failed",
            "location": f"s3://ckpt-{spec.tenant}/{spec.job_name}/{job_id}/step-{step:09d}",
            "size_bytes": cp.state_bytes if ok else None,
            "training_step": step,
            "attempt": attempt,
        })
        if k + 1 < len(run.writes.offsets_s):
            when = run.started_at + dt.timedelta(seconds=int(run.writes.offsets_s[k + 1]))
            self.sim.at(when, self._write, job_id, attempt, k + 1)
        else:
            del self.runs[job_id]

    def _final(self, job_id: str, attempt: int, spec: JobSpec, cp: CheckpointPlan, now: dt.datetime) -> None:
        if cp.outcome == Outcome.NONE:
            return
        step = int((self.sim.plans[job_id].behaviour.work_s or 0) / cp.step_s)  # it did all its work
        location = f"s3://models-{spec.tenant}/{spec.job_name}/{job_id}/model"
        self._report(job_id, spec, now, {
            "kind": "artifact", "status": "ok", "location": location, "size_bytes": cp.weights_bytes,
            "training_step": step, "attempt": attempt,
        })
        if cp.outcome == Outcome.REGISTERED:
            name = f"{spec.tenant}-{cp.family}"
            self.versions[name] += 1
            self._report(job_id, spec, now, {
                "kind": "model_version", "status": "ok", "location": f"models:/{name}/{self.versions[name]}",
                "size_bytes": cp.weights_bytes, "training_step": step, "attempt": attempt, "model_name": name,
                "model_version": str(self.versions[name]),
            })

    def _report(self, job_id: str, spec: JobSpec, now: dt.datetime, report: dict) -> None:
        self.sim.engine.report_artifact(job_id, ArtifactReport(**report), now, spec.user)  # written now
        self.written[f"{report['kind']} {report['status']}"] += 1
