"""The sample workload as plans: jobs, their attempts, placements and activity, in plain data.

A plan says what happened; `events.py` turns it into the allocator's log lines and `telemetry.py`
into the GPUs' samples, so the two always agree. Times are UTC, tz-naive.

Attempt numbering follows models/contracts/allocator_logs.md: an event that ends a running attempt
(`preempt`, `requeue`, `finish`) carries that attempt's number; the next `admit` and `start` carry
attempt + 1. A preempted job goes straight back to the queue (no separate `requeue` line); a job
retried after a failure is put back with `requeue` (reason "retry after failure").
"""
from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, replace

from pipelines.sample.pool import NODES, QUEUE_BY_NAME, USERS, Slot, slot

OPEN_END = dt.datetime.max  # an attempt still running at the end of any window


@dataclass(frozen=True)
class Segment:
    """An activity profile over part of an attempt, on all its slots or on some of them (by index)."""

    start: dt.datetime
    end: dt.datetime
    kind: str  # training | inference | experiment | interactive | idle | held | rogue
    slots: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Ending:
    event: str  # finish | preempt | requeue
    at: dt.datetime
    state: str | None = None
    reason: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class Attempt:
    number: int
    admit_at: dt.datetime
    start_at: dt.datetime
    slots: tuple[Slot, ...]
    segments: tuple[Segment, ...]
    ending: Ending | None  # None: still running

    @property
    def end_at(self) -> dt.datetime:
        return self.ending.at if self.ending else OPEN_END


@dataclass(frozen=True)
class Job:
    job_id: str
    queue: str
    user: str
    job_name: str
    template: str  # training | inference | experiment | interactive
    gpu_model: str
    gpus: int
    submit_at: dt.datetime
    spec: dict
    attempts: tuple[Attempt, ...] = ()
    share_mode: str = "whole"
    mig_profile: str | None = None

    @property
    def tenant(self) -> str:
        return QUEUE_BY_NAME[self.queue].tenant

    @property
    def priority(self) -> int:
        return QUEUE_BY_NAME[self.queue].priority


@dataclass(frozen=True)
class RogueLoad:
    """A process busy on a GPU the allocator never placed anything on."""

    host: str
    gpu: int
    start: dt.datetime
    end: dt.datetime


@dataclass(frozen=True)
class AuditRecord:
    at: dt.datetime
    actor: str
    actor_role: str
    action: str
    object_kind: str
    object_namespace: str | None
    object_name: str
    decision: str
    reason: str | None = None
    before: dict | None = None
    after: dict | None = None
    request_id: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class KnownFacts:
    """What the sample is known to contain, for tests and the demo to check the pipeline against."""

    idle_session_job_id: str
    idle_session_gpu: tuple[str, int]
    idle_from: dt.datetime
    idle_until: dt.datetime  # the reclaim
    idle_reminded_at: dt.datetime
    preempted_job_id: str
    preempted_by_job_id: str
    preempted_at: dt.datetime
    resumed_at: dt.datetime  # start of attempt 2
    retried_job_id: str
    failed_job_id: str
    cancelled_job_id: str
    timeout_job_id: str
    mig_job_id: str
    mig_slot: tuple[str, int, int, str]  # host, gpu, GPU instance id, profile
    timeslice_job_ids: tuple[str, ...]
    timeslice_gpu: tuple[str, int]
    oversized_job_id: str  # holds 8 GPUs, busy on one
    oversized_busy_gpu: tuple[str, int]
    inference_job_ids: tuple[str, ...]
    refused_reclaim_job_id: str
    rogue_gpu: tuple[str, int]
    rogue_from: dt.datetime
    rogue_until: dt.datetime
    queue_wait_job_id: str  # waited for capacity
    fallback_host: str  # exporter without profiling metrics


@dataclass(frozen=True)
class Workload:
    jobs: tuple[Job, ...]
    rogues: tuple[RogueLoad, ...]
    audit: tuple[AuditRecord, ...]
    facts: KnownFacts


def _clock(start: dt.date):
    base = dt.datetime.combine(start, dt.time())

    def at(day: int, hms: str) -> dt.datetime:
        parts = [int(p) for p in hms.split(":")] + [0]
        return base + dt.timedelta(days=day, hours=parts[0], minutes=parts[1], seconds=parts[2])

    return at


def _slots(host: str, gpus: range | list[int], instance_id: int | None = None) -> tuple[Slot, ...]:
    return tuple(slot(host, g, instance_id) for g in gpus)


def _run(kind: str, attempt_slots: tuple[Slot, ...], number: int, admit: dt.datetime, start: dt.datetime,
         ending: Ending | None, segments: tuple[Segment, ...] = ()) -> Attempt:
    end = ending.at if ending else OPEN_END
    return Attempt(number, admit, start, attempt_slots, segments or (Segment(start, end, kind),), ending)


def _done(at: dt.datetime, reason: str | None = None) -> Ending:
    return Ending("finish", at, "COMPLETED", reason, 0)


def story(start: dt.date) -> tuple[tuple[Job, ...], tuple[RogueLoad, ...], tuple[AuditRecord, ...], KnownFacts]:
    """The fixed scenario over the first three days: every case the pipeline must recognise."""
    at = _clock(start)
    train = {"checkpoint_policy": "hourly"}
    jobs: list[Job] = []

    def add(job_id: str, queue: str, user: str, name: str, template: str, model: str, gpus: int,
            submit: dt.datetime, spec: dict, attempts: list[Attempt], **kw) -> None:
        jobs.append(Job(job_id, queue, user, name, template, model, gpus, submit, spec, tuple(attempts), **kw))

    # Long-running inference services: never finish inside any window.
    add("j-1001", "nlp-serve", "dan", "chat-serve", "inference", "L40S", 2, at(0, "00:01:10"),
        {"min_replicas": 2, "rollback": "previous_revision"},
        [_run("inference", _slots("l40s-01", [0, 1]), 1, at(0, "00:01:12"), at(0, "00:02:30"), None)])
    add("j-1015", "nlp-serve", "carol", "rerank-serve", "inference", "A100", 2, at(0, "00:08:00"),
        {"min_replicas": 2, "rollback": "blue_green"},
        [_run("inference", _slots("a100-01", [6, 7]), 1, at(0, "00:08:02"), at(0, "00:10:40"), None)])

    # Vision borrows nlp's idle H100 quota overnight, then nlp takes it back by preemption.
    preempted_at, resumed_at = at(0, "09:00:00"), at(1, "03:03:00")
    add("j-1002", "vision-train", "alice", "detr-train", "training", "H100", 8, at(0, "01:00:00"),
        {"expected_runtime_s": 86400, **train},
        [_run("training", _slots("h100-02", range(8)), 1, at(0, "01:00:04"), at(0, "01:02:10"),
              Ending("preempt", preempted_at, reason="preempted by job j-1005")),
         _run("training", _slots("h100-02", range(8)), 2, at(1, "03:00:20"), resumed_at,
              _done(at(1, "19:05:00")))])
    h100_01 = _slots("h100-01", range(8))
    add("j-1003", "vision-train", "bob", "seg-finetune", "training", "H100", 8, at(0, "02:00:00"),
        {"expected_runtime_s": 72000, "checkpoint_policy": "every_30m"},
        [_run("training", h100_01, 1, at(0, "02:00:03"), at(0, "02:05:00"), _done(at(0, "22:05:00")),
              (Segment(at(0, "02:05:00"), at(0, "22:05:00"), "training", (0,)),
               Segment(at(0, "02:05:00"), at(0, "22:05:00"), "held", tuple(range(1, 8)))))])
    add("j-1005", "nlp-train", "dan", "llama-ft", "training", "H100", 8, at(0, "08:40:00"),
        {"expected_runtime_s": 64800, **train},
        [_run("training", _slots("h100-02", range(8)), 1, at(0, "09:00:01"), at(0, "09:01:30"),
              _done(at(1, "03:00:00")))])
    add("j-1014", "nlp-train", "dan", "llm-sft", "training", "H100", 8, at(0, "22:50:00"),
        {"expected_runtime_s": 54000, **train},
        [_run("training", h100_01, 1, at(0, "22:50:03"), at(0, "23:00:00"), _done(at(1, "14:00:00")))])
    # Submitted while both H100 nodes are busy: waits ten hours for capacity.
    add("j-1013", "vision-train", "bob", "vit-huge", "training", "H100", 8, at(1, "04:00:00"),
        {"expected_runtime_s": 64800, **train},
        [_run("training", h100_01, 1, at(1, "14:00:05"), at(1, "14:02:30"), _done(at(2, "08:10:00")))])

    # Time-sliced L40S GPU 3: two jobs share it for a while.
    add("j-1007", "speech-exp", "erin", "tts-eval", "experiment", "L40S", 1, at(0, "02:55:00"),
        {"time_limit_s": 28800},
        [_run("experiment", (slot("l40s-01", 3, 0),), 1, at(0, "02:55:02"), at(0, "03:00:00"),
              _done(at(0, "11:00:00")))], share_mode="timeslice")
    add("j-1011", "platform-ops", "grace", "ops-notebook", "interactive", "L40S", 1, at(0, "07:00:00"),
        {"time_limit_s": 28800},
        [_run("interactive", (slot("l40s-01", 3, 1),), 1, at(0, "07:00:01"), at(0, "07:00:40"),
              _done(at(0, "09:30:00"), "session closed by user"))], share_mode="timeslice")
    add("j-1016", "vision-dev", "bob", "clip-probe", "experiment", "L40S", 1, at(2, "01:58:00"),
        {"time_limit_s": 14400},
        [_run("experiment", _slots("l40s-01", [2]), 1, at(2, "01:58:01"), at(2, "02:00:00"),
              _done(at(2, "05:00:00")))])

    # A100 node: MIG slices on GPU 0, failures, a retry, a cancel, the idle session, a timeout.
    mig_slot = ("a100-01", 0, 9, "1g.10gb")
    add("j-1006", "speech-exp", "frank", "whisper-small-ablation", "experiment", "A100", 1, at(0, "06:00:00"),
        {"time_limit_s": 28800, "reservation": "speech-mig"},
        [_run("experiment", (slot("a100-01", 0, 9),), 1, at(0, "06:00:02"), at(0, "06:03:00"),
              _done(at(0, "13:00:00")))], share_mode="mig", mig_profile="1g.10gb")
    add("j-1010", "speech-exp", "erin", "conformer-sweep", "experiment", "A100", 1, at(0, "09:55:00"),
        {"time_limit_s": 57600},
        [_run("experiment", (slot("a100-01", 0, 2),), 1, at(0, "09:55:02"), at(0, "10:00:00"),
              _done(at(1, "01:40:00")))], share_mode="mig", mig_profile="3g.40gb")
    add("j-1019", "speech-exp", "erin", "kws-tiny", "experiment", "A100", 1, at(2, "02:58:00"),
        {"time_limit_s": 28800},
        [_run("experiment", (slot("a100-01", 0, 10),), 1, at(2, "02:58:02"), at(2, "03:00:00"),
              _done(at(2, "09:00:00")))], share_mode="mig", mig_profile="1g.10gb")
    add("j-1008", "nlp-train", "carol", "moe-pretrain", "training", "A100", 2, at(0, "03:58:00"),
        {"expected_runtime_s": 43200, **train},
        [_run("training", _slots("a100-01", [4, 5]), 1, at(0, "03:58:05"), at(0, "04:01:00"),
              Ending("finish", at(0, "05:12:41"), "FAILED",
                     "CUDA error: an illegal memory access was encountered", 1))])
    add("j-1009", "vision-train", "alice", "yolo-train", "training", "A100", 2, at(0, "05:00:00"),
        {"expected_runtime_s": 28800, **train},
        [_run("training", _slots("a100-01", [2, 3]), 1, at(0, "05:00:03"), at(0, "05:02:00"),
              Ending("requeue", at(0, "07:30:15"), reason="retry after failure", exit_code=1)),
         _run("training", _slots("a100-01", [2, 3]), 2, at(0, "07:30:20"), at(0, "07:34:00"),
              _done(at(0, "15:35:00")))])
    add("j-1012", "nlp-train", "carol", "bert-distill", "training", "A100", 2, at(0, "18:00:00"),
        {"expected_runtime_s": 21600, "checkpoint_policy": "per_epoch"},
        [_run("training", _slots("a100-01", [2, 3]), 1, at(0, "18:00:04"), at(0, "18:05:00"),
              Ending("finish", at(0, "19:10:00"), "CANCELLED", "cancelled by carol"))])
    idle_from, reclaim_at, remind_at = at(0, "16:00:00"), at(1, "05:30:00"), at(0, "17:00:00")
    add("j-1004", "vision-dev", "alice", "jupyter-alice", "interactive", "A100", 1, at(0, "13:58:30"),
        {"time_limit_s": 86400},
        [_run("interactive", _slots("a100-01", [1]), 1, at(0, "13:58:31"), at(0, "14:01:00"),
              Ending("finish", at(1, "05:30:02"), "CANCELLED", "reclaimed: idle"),
              (Segment(at(0, "14:01:00"), idle_from, "interactive"),
               Segment(idle_from, at(1, "05:30:02"), "idle")))])
    add("j-1018", "speech-exp", "frank", "asr-sweep", "experiment", "A100", 1, at(1, "15:55:00"),
        {"time_limit_s": 14400},
        [_run("experiment", _slots("a100-01", [1]), 1, at(1, "15:55:02"), at(1, "16:00:00"),
              Ending("finish", at(1, "20:00:00"), "TIMEOUT", "time limit 14400 s reached"))])
    add("j-1017", "platform-ops", "heidi", "notebook-heidi", "interactive", "A100", 1, at(2, "09:00:00"),
        {"time_limit_s": 28800},
        [_run("interactive", _slots("a100-01", [1]), 1, at(2, "09:00:01"), at(2, "09:01:00"),
              _done(at(2, "12:00:00"), "session closed by user"))])

    rogue = RogueLoad("a100-01", 5, at(1, "09:00:00"), at(1, "15:00:00"))
    audit = _story_audit(at)
    facts = KnownFacts(
        idle_session_job_id="j-1004", idle_session_gpu=("a100-01", 1), idle_from=idle_from,
        idle_until=reclaim_at, idle_reminded_at=remind_at,
        preempted_job_id="j-1002", preempted_by_job_id="j-1005", preempted_at=preempted_at,
        resumed_at=resumed_at, retried_job_id="j-1009", failed_job_id="j-1008", cancelled_job_id="j-1012",
        timeout_job_id="j-1018", mig_job_id="j-1006", mig_slot=mig_slot,
        timeslice_job_ids=("j-1007", "j-1011"), timeslice_gpu=("l40s-01", 3),
        oversized_job_id="j-1003", oversized_busy_gpu=("h100-01", 0),
        inference_job_ids=("j-1001", "j-1015"), refused_reclaim_job_id="j-1001",
        rogue_gpu=(rogue.host, rogue.gpu), rogue_from=rogue.start, rogue_until=rogue.end,
        queue_wait_job_id="j-1013", fallback_host="l40s-01",
    )
    return tuple(jobs), (rogue,), audit, facts


def _story_audit(at) -> tuple[AuditRecord, ...]:
    ms = dt.timedelta(milliseconds=1)
    admin, bot = ("ops-admin", "admin"), ("governance-bot", "governance_bot")
    return (
        AuditRecord(at(0, "09:15:00") + 120 * ms, *admin, "permission.grant", "queue", "nlp", "nlp-serve",
                    "allow", "on-call for chat-serve", after={"user": "ivan", "role": "submitter"},
                    request_id="req-0001"),
        AuditRecord(at(0, "10:00:00") + 350 * ms, *admin, "quota.update", "queue", "vision", "vision-train",
                    "allow", "ticket OPS-311: detection project", before={"quota": {"A100": 2, "H100": 8}},
                    after={"quota": {"A100": 4, "H100": 8}}, request_id="req-0002"),
        AuditRecord(at(0, "17:00:00") + 204 * ms, *bot, "enforcement.remind", "job", "vision", "j-1004",
                    "applied", "idle 60 min with activity below 5% (policy idle-interactive v1); "
                    "reclaim follows if it stays idle", request_id="act-0001",
                    idempotency_key="idle-interactive/v1:j-1004:1:remind"),
        AuditRecord(at(1, "04:00:00") + 511 * ms, *bot, "enforcement.reclaim", "job", "nlp", "j-1001",
                    "refused", "production inference is exempt from automatic reclaim",
                    request_id="act-0002", idempotency_key="idle-allocation/v1:j-1001:1:reclaim"),
        AuditRecord(at(1, "05:30:00") + 90 * ms, *bot, "enforcement.reclaim", "job", "vision", "j-1004",
                    "applied", "idle 13.5 h with activity below 5% after a reminder",
                    before={"state": "RUNNING"}, after={"state": "CANCELLED"}, request_id="act-0003",
                    idempotency_key="idle-interactive/v1:j-1004:1:reclaim"),
        AuditRecord(at(1, "09:00:00") + 733 * ms, *admin, "quota.update", "queue", "speech", "speech-exp",
                    "allow", "ticket OPS-318", before={"quota": {"A100": 1, "L40S": 0.5}},
                    after={"quota": {"A100": 1, "L40S": 1}}, request_id="req-0003"),
        AuditRecord(at(1, "11:30:00") + 402 * ms, *bot, "enforcement.quota_proposal", "queue", "vision",
                    "vision-train", "proposed", "vision-train queued 10 h for H100 (job j-1013); "
                    "lend 2 of nlp-train's H100", before={"quota": {"A100": 4, "H100": 8}},
                    after={"quota": {"A100": 4, "H100": 10}}, request_id="qp-0001",
                    idempotency_key="quota-proposal/v1:vision-train:H100"),
        AuditRecord(at(1, "12:00:00") + 18 * ms, "maria", "admin", "approval.grant", "queue", "vision",
                    "vision-train", "approved", "approve quota proposal qp-0001", request_id="qp-0001"),
        AuditRecord(at(1, "12:00:05") + 250 * ms, "maria", "admin", "quota.update", "queue", "vision",
                    "vision-train", "allow", "quota proposal qp-0001", before={"quota": {"A100": 4, "H100": 8}},
                    after={"quota": {"A100": 4, "H100": 10}}, request_id="qp-0001"),
        AuditRecord(at(1, "12:00:05") + 300 * ms, "maria", "admin", "quota.update", "queue", "nlp",
                    "nlp-train", "allow", "quota proposal qp-0001", before={"quota": {"A100": 4, "H100": 8}},
                    after={"quota": {"A100": 4, "H100": 6}}, request_id="qp-0001"),
        AuditRecord(at(2, "10:00:00") + 610 * ms, *admin, "permission.revoke", "queue", "nlp", "nlp-serve",
                    "allow", "on-call rotation ended", before={"user": "ivan", "role": "submitter"},
                    request_id="req-0004"),
    )


# ---- background jobs: seeded, placed first-fit around the story ----

_STEP = dt.timedelta(minutes=5)
_MAX_WAIT = dt.timedelta(hours=18)


class Occupancy:
    """Which slot is held when; refuses overlapping holds."""

    def __init__(self) -> None:
        self._held: dict[tuple, list[tuple[dt.datetime, dt.datetime, str]]] = {}

    def is_free(self, key: tuple, start: dt.datetime, end: dt.datetime) -> bool:
        return all(end <= s or start >= e for s, e, _ in self._held.get(key, ()))

    def take(self, key: tuple, start: dt.datetime, end: dt.datetime, holder: str) -> None:
        for s, e, who in self._held.get(key, ()):
            if not (end <= s or start >= e):
                raise ValueError(f"sample workload: {holder} overlaps {who} on {key} ({start} to {end})")
        self._held.setdefault(key, []).append((start, end, holder))


def _whole_slots_by_host(model: str) -> list[tuple[str, tuple[Slot, ...]]]:
    out = []
    for node in NODES:
        slots = tuple(s for s in node.slots() if s.share_mode == "whole" and s.model.name == model)
        if slots:
            out.append((node.host, slots))
    return out


def _background_day(day_index: int, day: dt.date, seed: int) -> list[dict]:
    """The day's background submissions, drawn from a generator seeded by (seed, date)."""
    rng = random.Random(f"gpupool-sample/{seed}/{day.isoformat()}")
    base = dt.datetime.combine(day, dt.time())
    drafts = []
    for k in range(rng.randint(4, 6)):
        if rng.random() < 0.45:
            queue = rng.choice(["vision-train", "nlp-train"])
            model = rng.choice(["H100", "A100"])
            gpus = rng.choice([1, 2, 4, 8] if model == "H100" else [1, 2, 4])
            run = dt.timedelta(minutes=30 * rng.randint(2, 16))
            spec = {"expected_runtime_s": int(round(run.total_seconds() * rng.uniform(0.8, 1.3) / 600) * 600),
                    "checkpoint_policy": rng.choice(["hourly", "every_30m", "per_epoch"])}
            template = "training"
            name = rng.choice(["resnet50", "unet-seg", "gpt-small", "bert-base", "vit-b16", "t5-base"])
        else:
            queue = rng.choice(["speech-exp", "vision-dev"])
            model = rng.choice(["A100", "L40S"])
            gpus = rng.choice([1, 1, 2])
            run = dt.timedelta(minutes=20 * rng.randint(1, 9))
            spec = {"time_limit_s": 14400}
            template = "experiment"
            name = rng.choice(["lr-sweep", "ablation", "linear-probe", "eval", "hparam-search"])
        tenant = QUEUE_BY_NAME[queue].tenant
        user = rng.choice(USERS[tenant])
        outcome = rng.random()
        if outcome < 0.8:
            ending = ("COMPLETED", None, 0, 1.0)
        elif outcome < 0.9:
            ending = ("FAILED", rng.choice(["NCCL watchdog timeout", "segmentation fault in data loader"]), 1,
                      rng.uniform(0.1, 0.6))
        elif outcome < 0.95:
            ending = ("OUT_OF_MEMORY", "CUDA out of memory", 137, rng.uniform(0.05, 0.3))
        else:
            ending = ("CANCELLED", f"cancelled by {user}", None, rng.uniform(0.1, 0.9))
        drafts.append({
            "job_id": f"j-{3000 + 100 * day_index + k}", "queue": queue, "user": user,
            "job_name": f"{name}-{day.strftime('%m%d')}-{k}", "template": template,
            "model": model, "gpus": gpus, "spec": spec,
            "submit": base + dt.timedelta(seconds=rng.randint(0, 86399)),
            "admit_delay": dt.timedelta(seconds=rng.randint(2, 90)),
            "start_delay": dt.timedelta(seconds=rng.randint(20, 240)),
            "run": run, "ending": ending,
        })
    return drafts


def _place(draft: dict, occupancy: Occupancy) -> Job:
    """First fit on one host, waiting in 5-minute steps; a job that finds no room within 18 h stays pending."""
    state, reason, exit_code, share = draft["ending"]
    run = dt.timedelta(seconds=int(draft["run"].total_seconds() * share))
    admit = draft["submit"] + draft["admit_delay"]
    job = Job(draft["job_id"], draft["queue"], draft["user"], draft["job_name"], draft["template"], draft["model"],
              draft["gpus"], draft["submit"], draft["spec"])
    while admit <= draft["submit"] + _MAX_WAIT:
        start = admit + draft["start_delay"]
        end = start + run
        for host, slots in _whole_slots_by_host(draft["model"]):
            free = [s for s in slots if occupancy.is_free(s.key, start, end)]
            if len(free) >= draft["gpus"]:
                chosen = tuple(free[: draft["gpus"]])
                for s in chosen:
                    occupancy.take(s.key, start, end, job.job_id)
                attempt = _run(draft["template"], chosen, 1, admit, start, Ending("finish", end, state, reason, exit_code))
                return replace(job, attempts=(attempt,))
        admit += _STEP
    return job


def build_workload(start: dt.date, days: int, seed: int) -> Workload:
    """The story plus seeded background jobs for each day of the window."""
    jobs, rogues, audit, facts = story(start)
    occupancy = Occupancy()
    for job in jobs:
        for attempt in job.attempts:
            _check_placement(job, attempt)
            for s in attempt.slots:
                occupancy.take(s.key, attempt.start_at, attempt.end_at, f"{job.job_id}#{attempt.number}")
    for r in rogues:
        occupancy.take((r.host, r.gpu, None), r.start, r.end, "rogue process")
    background = [
        _place(draft, occupancy)
        for i in range(days)
        for draft in _background_day(i, start + dt.timedelta(days=i), seed)
    ]
    return Workload(tuple(jobs) + tuple(background), rogues, audit, facts)


def _check_placement(job: Job, attempt: Attempt) -> None:
    if len(attempt.slots) != job.gpus or any(s.model.name != job.gpu_model for s in attempt.slots):
        raise ValueError(f"sample workload: {job.job_id} attempt {attempt.number} placed on "
                         f"{len(attempt.slots)} slots of the wrong size or model")
    if any(s.share_mode != job.share_mode for s in attempt.slots):
        raise ValueError(f"sample workload: {job.job_id} asks for {job.share_mode} but is placed otherwise")
    if job.mig_profile and any(s.profile != job.mig_profile for s in attempt.slots):
        raise ValueError(f"sample workload: {job.job_id} asks for {job.mig_profile} but is placed otherwise")
