"""The engine's durable form: what `Engine.state_dict()` writes and `Engine.from_state()` reads.

`EngineState` is everything needed to resume, JSON-serialisable through `to_dict`: the queues in
force, the jobs with the engine's bookkeeping of the live ones (`Track`), idempotency keys and
their results, proposals, id counters, the groups due for a look, the reservation boundaries
passed, the drained nodes and GPUs. Timers and indexes are not saved: the engine rebuilds them
from the jobs. `job_state` gives one job as `EngineState.to_dict()["jobs"]` holds it.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from allocator.model import AttemptLog, Job, JobSpec, JobState, QueueSpec, ShareMode, Slot, Template

STATE_VERSION = 1


@dataclass
class Track:
    """The engine's bookkeeping for a job that has not ended."""

    seq: int  # submission order: a requeued job keeps its place at the front of its queue
    key: str
    queued_at: dt.datetime  # submit or last requeue
    claim: tuple[str, ...] = ()  # slot ids admitted to, until the job starts (preemption grace)
    grace_until: dt.datetime | None = None  # as a victim: preempted then unless it ends first
    preempted_by: str | None = None


# --- records as JSON ----------------------------------------------------------------------------


def _iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def _time(text: str | None) -> dt.datetime | None:
    return None if text is None else dt.datetime.fromisoformat(text)


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(JobSpec))


def spec_to_dict(spec: JobSpec) -> dict:
    out = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    out["template"] = Template(spec.template).value
    out["share_mode"] = ShareMode(spec.share_mode).value
    return out


def spec_from_dict(data: Mapping) -> JobSpec:
    return JobSpec(**{**data, "template": Template(data["template"]), "share_mode": ShareMode(data["share_mode"])})


def queue_to_dict(queue: QueueSpec) -> dict:
    out = dataclasses.asdict(queue)
    out["gpu_models"] = list(queue.gpu_models)
    out["templates"] = [Template(t).value for t in queue.templates]
    out["shared_with"] = list(queue.shared_with)
    out["quota"] = dict(queue.quota)
    return out


def queue_from_dict(data: Mapping) -> QueueSpec:
    return QueueSpec(**{**data, "gpu_models": tuple(data["gpu_models"]), "quota": dict(data["quota"]),
                        "templates": tuple(Template(t) for t in data["templates"]),
                        "shared_with": tuple(data.get("shared_with", ()))})


def job_to_dict(job: Job) -> dict:
    return {
        "job_id": job.job_id, "spec": spec_to_dict(job.spec), "state": job.state.value, "attempt": job.attempt,
        "submitted_at": _iso(job.submitted_at), "admitted_at": _iso(job.admitted_at),
        "started_at": _iso(job.started_at), "first_started_at": _iso(job.first_started_at),
        "ended_at": _iso(job.ended_at), "slots": [s.slot_id for s in job.slots], "borrowed": job.borrowed,
        "retries_used": job.retries_used, "runtime_cap_s": job.runtime_cap_s, "priority": job.priority,
        "attempts": {str(n): {"started_at": _iso(log.started_at), "ended_at": _iso(log.ended_at),
                              "last_checkpoint_at": _iso(log.last_checkpoint_at)}
                     for n, log in job.attempts.items()},
    }


def _attempts_from_dict(data: Mapping) -> dict[int, AttemptLog]:
    if "attempts" not in data:
        # saved before attempts were kept: the running attempt is the one reports can still name
        started = _time(data["started_at"])
        return {} if started is None else {data["attempt"]: AttemptLog(started, _time(data["ended_at"]))}
    return {int(n): AttemptLog(_time(log["started_at"]), _time(log["ended_at"]), _time(log["last_checkpoint_at"]))
            for n, log in data["attempts"].items()}


def job_from_dict(data: Mapping, slots: Mapping[str, Slot]) -> Job:
    return Job(
        job_id=data["job_id"], spec=spec_from_dict(data["spec"]), state=JobState(data["state"]),
        attempt=data["attempt"], submitted_at=_time(data["submitted_at"]), admitted_at=_time(data["admitted_at"]),
        started_at=_time(data["started_at"]), first_started_at=_time(data["first_started_at"]),
        ended_at=_time(data["ended_at"]), slots=tuple(slots[s] for s in data["slots"]), borrowed=data["borrowed"],
        retries_used=data["retries_used"], runtime_cap_s=data["runtime_cap_s"], priority=data["priority"],
        attempts=_attempts_from_dict(data),
    )


def track_to_dict(track: Track) -> dict:
    return {"seq": track.seq, "key": track.key, "queued_at": _iso(track.queued_at), "claim": list(track.claim),
            "grace_until": _iso(track.grace_until), "preempted_by": track.preempted_by}


def track_from_dict(data: Mapping) -> Track:
    return Track(data["seq"], data["key"], _time(data["queued_at"]), tuple(data["claim"]),
                 _time(data["grace_until"]), data["preempted_by"])


def job_state(job: Job, track: Track | None) -> dict:
    """One job as the state stores it (with the engine's bookkeeping while it is live)."""
    out = job_to_dict(job)
    if track is not None:
        out["track"] = track_to_dict(track)
    return out


@dataclass
class EngineState:
    """Everything an engine needs to resume (see the module docstring)."""

    queues: list[QueueSpec]  # in force, in the pool's order
    jobs: list[tuple[Job, Track | None]]  # a track for the jobs that have not ended
    counters: dict[str, int]
    actions: dict[str, dict]  # idempotency key -> the first answer
    proposals: dict[str, dict]
    dirty_keys: set[str]
    boundaries_done: int
    started_unreported: list[str]  # job ids started since the last `schedule` answer
    drained: dict[str, dict]  # drained node or host/gpu -> how it was drained

    def to_dict(self) -> dict:
        return {
            "version": STATE_VERSION,
            "queues": [queue_to_dict(q) for q in self.queues],
            "jobs": [job_state(job, track) for job, track in self.jobs],
            "counters": dict(self.counters),
            "actions": {k: dict(v) for k, v in self.actions.items()},
            "proposals": {k: dict(v) for k, v in self.proposals.items()},
            "dirty_keys": sorted(self.dirty_keys),
            "boundaries_done": self.boundaries_done,
            "started_unreported": list(self.started_unreported),
            "drained": {k: dict(v) for k, v in self.drained.items()},
        }

    @classmethod
    def from_dict(cls, state: Mapping, queue_names: Collection[str],
                  slots: Mapping[str, Slot]) -> EngineState:
        """Reads a saved state for a pool with these queues and slots; ValueError if it does not fit."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"engine state version {state.get('version')!r}, expected {STATE_VERSION}")
        queues: list[QueueSpec] = []
        for data in state["queues"]:
            queue = queue_from_dict(data)
            if queue.name not in queue_names:
                raise ValueError(f"engine state has queue {queue.name!r}, which the pool does not")
            queues.append(queue)
        jobs: list[tuple[Job, Track | None]] = []
        for data in state["jobs"]:
            try:
                job = job_from_dict(data, slots)
            except KeyError as error:
                raise ValueError(f"engine state: job {data.get('job_id')} holds slot {error}, not in the pool") from None
            track = data.get("track")
            jobs.append((job, None if track is None else track_from_dict(track)))
        # states saved before drains existed have none
        return cls(queues, jobs, dict(state["counters"]), {k: dict(v) for k, v in state["actions"].items()},
                   {k: dict(v) for k, v in state["proposals"].items()}, set(state["dirty_keys"]),
                   state["boundaries_done"], list(state.get("started_unreported", [])),
                   {k: dict(v) for k, v in state.get("drained", {}).items()})
