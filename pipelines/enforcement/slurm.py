"""Enforcement through Slurm, behind the same `Enforcer` interface as the built-in allocator.

    reclaim       scancel <job>
    preempt       scontrol requeue <job>   (scontrol requeuehold with slurm.preempt_hold)
    cap_runtime   scontrol update JobId=<job> TimeLimit=<minutes>   (rounded up to whole minutes;
                  Slurm counts the limit from the attempt's start, as the allocator's cap does)
    remind        scontrol update JobId=<job> AdminComment="gpupool: reminded <time> UTC: <finding>; <next step>"
                  (squeue and `scontrol show job` show it to the user and the admins; the job's own
                  Comment, which carries the template and protection markers, is never touched)
    quota_change  proposed only: the answer carries the `sacctmgr` command an admin runs to apply
                  it (target = the Slurm account, quota = {GPU model: whole GPUs})
    drain         scontrol update NodeName=<node> State=DRAIN Reason="gpupool: <reason>"
    undrain       scontrol update NodeName=<node> State=RESUME

The remind's AdminComment is a mark beside the reminder that reaches the owner (the answer's
`reminded` names the user, for the outbox's email or chat). An AdminComment starting with `gpupool:`
is ours and is replaced by the next reminder; one set by someone else is left as it is (the answer
says so). The mark is best effort: when Slurm refuses it (Slurm 22.05 lets only root, SlurmUser or
AdminLevel=Admin set AdminComment; an Operator, who may scancel, requeue and cap, is answered
"Access/permission denied"), the remind is still applied, its reason says why the mark is missing,
and the owner is still told.

Drain and undrain act on a node (target `node-07`; a GPU target `node-07/3` drains or resumes its
whole node, since Slurm drains nodes, and the answer's reason says so). The node is read first
(`scontrol -o show node`): one Slurm does not know is refused; a drain of a node already drained
is refused (our own key again is `already_done`, from the ledger, before Slurm is asked), and so
is an undrain of a node that is not drained, or that someone else drained: only a drain Reason
starting with `gpupool:` is ours to lift. Running jobs keep running (DRAIN, not DOWN).

Rules, as the allocator keeps them: the job is read from slurmctld first (`squeue --json`); a job
Slurm no longer knows (ended more than MinJobAge ago, or never existed) or that is not RUNNING is
refused with the reason. Protected workloads are refused for reclaim, preempt and cap_runtime: a
job is protected when its partition is in `slurm.protected_partitions`, its QOS in
`slurm.protected_qos`, or its Comment contains `slurm.protected_comment` (default
`gpupool:inference`, i.e. `sbatch --comment=gpupool:inference`). Preempt is refused for a job that
is not requeueable. A dry run answers `dry_run` with the command line it would run and runs
nothing. Idempotency and audit come from `ActionLedger`: the same key again answers
`already_done` and runs nothing; a key reused for another action or target is refused; every
answer is audited (engine `slurm`). Applies of one key are serialised by a file lock (striped by
key), so concurrent applies, in threads or processes, run the command once.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import shlex
from collections.abc import Mapping
from pathlib import Path

from allocator.model import (
    NODE_ACTIONS,
    Action,
    ActionKind,
    ActionResult,
    Outcome,
    drain_object_kind,
    drain_target,
)
from pipelines.connectors.slurm import Runner, SlurmCommandError, SlurmConfig, run_command
from pipelines.enforcement.base import ActionLedger, action_reason, claim_key
from pipelines.sources.jsonl import RecordError
from pipelines.sources.slurm_sacct import expand_hostlist
from pipelines.sources.slurm_squeue import gres_gpu_indices, job_id_text, job_state, slurm_number

UNLIMITED_MINUTES = 0xFFFFFFFE  # Slurm's INFINITE / NO_VAL sentinels start here
MARK = "gpupool:"  # a drain Reason or AdminComment starting with it was set by gpupool: only those are ours
MARK_LIMIT = 240  # characters kept in a node's Reason or a job's AdminComment


@dataclasses.dataclass(frozen=True)
class SlurmNode:
    """What drain and undrain need to know of a node, from `scontrol -o show node`."""

    name: str
    state: str  # e.g. IDLE, MIXED+DRAIN, ALLOCATED+DRAIN
    reason: str | None
    reason_by: str | None  # who set the reason, e.g. root

    @property
    def drained(self) -> bool:
        return any(flag.startswith("DRAIN") for flag in self.state.split("+"))

    def snapshot(self) -> dict:
        out: dict = {"state": self.state, "drained": self.drained}
        if self.reason:
            out["reason"] = self.reason
        if self.reason_by:
            out["reason_set_by"] = self.reason_by
        return out


def slurm_node(line: str) -> SlurmNode:
    """One node of `scontrol -o show node` (key=value pairs on one line; Reason, which may hold
    spaces, is last and ends in ` [user@time]`)."""
    head, _, reason = line.strip().partition(" Reason=")
    fields = dict(token.partition("=")[::2] for token in head.split() if "=" in token)
    if "NodeName" not in fields or "State" not in fields:
        raise RecordError(f"scontrol show node answered a line without NodeName and State: {line[:120]!r}")
    by = None
    if reason.endswith("]") and " [" in reason:
        reason, _, stamp = reason.rpartition(" [")
        by = stamp.partition("@")[0] or None
    return SlurmNode(fields["NodeName"], fields["State"], reason or None, by)


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """What enforcement needs to know of a job, from `squeue --json`."""

    job_id: str
    state: str
    partition: str | None
    qos: str | None
    account: str | None
    user: str | None
    comment: str
    admin_comment: str
    requeue: bool
    restarts: int
    time_limit_min: int | None
    started_at: dt.datetime | None
    slots: tuple[str, ...]  # host/gpu index, as the allocator names slots

    def snapshot(self) -> dict:
        out = {"state": self.state, "partition": self.partition, "attempt": self.restarts + 1,
               "slots": list(self.slots)}
        if self.time_limit_min is not None:
            out["runtime_cap_s"] = self.time_limit_min * 60
        if self.admin_comment:
            out["admin_comment"] = self.admin_comment
        return out


def slurm_job(entry: Mapping[str, object]) -> SlurmJob:
    """One entry of `squeue --json`'s jobs (22.05 plain values, 23.02+ {set, number} objects)."""
    hosts = expand_hostlist(entry["nodes"]) if isinstance(entry.get("nodes"), str) else []
    slots = []
    for host, detail in zip(hosts, entry.get("gres_detail") or [], strict=False):
        gpus = gres_gpu_indices(detail) if isinstance(detail, str) else None
        slots.extend(f"{host}/{index}" for index in (gpus[2] if gpus else []))
    limit = slurm_number(entry.get("time_limit"), "time_limit")
    start = slurm_number(entry.get("start_time"), "start_time")

    def text(key: str) -> str | None:
        value = entry.get(key)
        return value if isinstance(value, str) and value else None

    return SlurmJob(
        job_id=job_id_text(entry), state=job_state(entry), partition=text("partition"), qos=text("qos"),
        account=text("account"), user=text("user_name"), comment=text("comment") or "",
        admin_comment=text("admin_comment") or "",
        requeue=entry.get("requeue") is not False,
        restarts=slurm_number(entry.get("restart_cnt"), "restart_cnt") or 0,
        time_limit_min=limit if limit is not None and 0 < limit < UNLIMITED_MINUTES else None,
        started_at=dt.datetime.fromtimestamp(start, dt.UTC).replace(tzinfo=None) if start else None,
        slots=tuple(slots),
    )


@dataclasses.dataclass
class _Plan:
    """What an action would do: the outcome if it goes ahead, and the command that does it."""

    outcome: Outcome
    reason: str
    argv: list[str] | None = None
    object_kind: str = "job"
    before: dict | None = None
    after: dict | None = None
    effects: dict = dataclasses.field(default_factory=dict)
    proposal_id: str | None = None
    mark_only: bool = False  # the command only marks (a remind's AdminComment): its failure leaves it applied


class SlurmEnforcer:
    """`Enforcer` for Slurm (engine "slurm"). `run` executes a command (tests pass recorded answers)."""

    engine = "slurm"

    def __init__(self, ledger: ActionLedger, config: SlurmConfig | None = None, run: Runner = run_command,
                 lock_dir: Path | None = None):
        if ledger.engine != self.engine:
            raise ValueError(f"the ledger is for engine {ledger.engine!r}, expected {self.engine!r}")
        self.ledger = ledger
        self.config = config or SlurmConfig()
        self.run = run
        self.lock_dir = Path(lock_dir) if lock_dir else ledger.audit_root.parent / ".locks" / "slurm"

    # --- the interface ----------------------------------------------------------------------

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        with claim_key(self.lock_dir, action.idempotency_key):
            previous = self.ledger.answered_before(action, now, _object_kind(action))
            if previous is not None:
                return previous
            plan = self._plan(action, now)
            outcome, reason = plan.outcome, plan.reason
            command = shlex.join(plan.argv) if plan.argv else None
            effects = {**plan.effects, **({"command": command} if command else {})}
            after = plan.after
            if outcome in (Outcome.APPLIED, Outcome.PROPOSED) and action.dry_run:
                verb = "propose" if outcome == Outcome.PROPOSED else f"run {command}" if command else "apply"
                outcome, reason = Outcome.DRY_RUN, f"dry run: would {verb}: {reason}"
            elif outcome == Outcome.APPLIED and plan.argv:
                failure = self._execute(plan.argv)
                if failure and plan.mark_only:
                    reason = f"{reason}; the job's AdminComment was not set: {failure}"
                    effects = {**{k: v for k, v in plan.effects.items() if k != "admin_comment"},
                               "command": command, "mark_error": failure}
                    after = None
                elif failure:
                    outcome, reason, effects = Outcome.REFUSED, failure, {"command": command}
            elif action.dry_run:
                reason = f"dry run: {reason}"
            return self.ledger.answer(action, now, outcome, reason, effects, object_kind=plan.object_kind,
                                      before=plan.before, after=after, proposal_id=plan.proposal_id)

    # --- deciding ---------------------------------------------------------------------------

    def _plan(self, action: Action, now: dt.datetime) -> _Plan:
        if action.kind == ActionKind.QUOTA_CHANGE:
            return self._plan_quota(action)
        if action.kind in NODE_ACTIONS:
            return self._plan_drain(action)
        try:
            job = self.find_job(action.target)
        except (SlurmCommandError, RecordError) as error:
            return _Plan(Outcome.REFUSED, f"cannot read job {action.target} from Slurm: {error}")
        if job is None:
            return _Plan(Outcome.REFUSED, f"no job {action.target} in Slurm (ended over MinJobAge ago, or never "
                                          f"existed)")
        before = job.snapshot()
        if action.evidence:
            before["evidence"] = action.evidence
        if job.state != "RUNNING":
            return _Plan(Outcome.REFUSED, f"job {job.job_id} is {job.state}, not running", before=before)
        reason = action_reason(action)
        if action.kind == ActionKind.REMIND:
            return self._plan_remind(job, before, reason, now)
        protection = self.protection(job)
        if protection:
            what = {ActionKind.RECLAIM: "reclaim", ActionKind.PREEMPT: "preemption",
                    ActionKind.CAP_RUNTIME: "run-time caps"}[action.kind]
            return _Plan(Outcome.REFUSED, f"protected workload ({protection}) is exempt from automatic {what}",
                         before=before)
        released = {"released_slots": list(job.slots), "gpus_released": len(job.slots)}
        if action.kind == ActionKind.RECLAIM:
            return _Plan(Outcome.APPLIED, reason, [self.config.scancel, job.job_id], before=before,
                         after={"state": "CANCELLED"}, effects={"state": "CANCELLED", **released})
        if action.kind == ActionKind.PREEMPT:
            if not job.requeue:
                return _Plan(Outcome.REFUSED, f"job {job.job_id} is not requeueable (--no-requeue or JobRequeue=0)",
                             before=before)
            verb = "requeuehold" if self.config.preempt_hold else "requeue"
            state = "PENDING (held)" if self.config.preempt_hold else "PENDING"
            after = {"state": state, "attempt": job.restarts + 2}
            return _Plan(Outcome.APPLIED, reason, [self.config.scontrol, verb, job.job_id], before=before,
                         after=after, effects={**after, **released})
        if action.kind == ActionKind.CAP_RUNTIME:
            return self._plan_cap(action, job, before, reason, now)
        raise ValueError(f"unknown action kind {action.kind!r}")

    def _plan_remind(self, job: SlurmJob, before: dict, reason: str, now: dt.datetime) -> _Plan:
        effects: dict = {"reminded": job.user}  # the person the outbox's reminder goes to
        if job.admin_comment and not job.admin_comment.startswith(MARK):
            return _Plan(Outcome.APPLIED, f"{reason}; the job's AdminComment was set by someone else and is left as "
                                          f"it is", before=before, effects=effects)
        mark = _mark(f"reminded {now:%Y-%m-%d %H:%M} UTC: {reason}")
        argv = [self.config.scontrol, "update", f"JobId={job.job_id}", f"AdminComment={mark}"]
        return _Plan(Outcome.APPLIED, reason, argv, before=before, after={"admin_comment": mark},
                     effects={**effects, "admin_comment": mark}, mark_only=True)

    def _plan_cap(self, action: Action, job: SlurmJob, before: dict, reason: str, now: dt.datetime) -> _Plan:
        if action.runtime_s is None or action.runtime_s < 1:
            return _Plan(Outcome.REFUSED, "cap_runtime needs runtime_s >= 1", before=before)
        minutes = math.ceil(action.runtime_s / 60)  # Slurm's TimeLimit is in whole minutes
        if job.time_limit_min is not None and minutes >= job.time_limit_min:
            return _Plan(Outcome.REFUSED, f"the job's time limit is already {job.time_limit_min} min "
                                          f"(asked {minutes} min)", before=before)
        cap_s = minutes * 60
        effects: dict = {"runtime_cap_s": cap_s}
        if job.started_at is not None:
            ends_at = job.started_at + dt.timedelta(seconds=cap_s)
            effects["ends_at"] = ends_at.isoformat(timespec="seconds") + "Z"
            if ends_at <= now:
                effects["state"] = "TIMEOUT"  # slurmctld ends it at its next limit check
        argv = [self.config.scontrol, "update", f"JobId={job.job_id}", f"TimeLimit={minutes}"]
        return _Plan(Outcome.APPLIED, reason, argv, before=before,
                     after={k: v for k, v in effects.items() if k != "state"}, effects=effects)

    def _plan_drain(self, action: Action) -> _Plan:
        kind = drain_object_kind(action.target)
        try:
            name, gpu = drain_target(action.target)
        except ValueError as error:
            return _Plan(Outcome.REFUSED, str(error), object_kind=kind)
        try:
            node = self.find_node(name)
        except (SlurmCommandError, RecordError) as error:
            return _Plan(Outcome.REFUSED, f"cannot read node {name} from Slurm: {error}", object_kind=kind)
        if node is None:
            return _Plan(Outcome.REFUSED, f"no node {name} in Slurm", object_kind=kind)
        before = node.snapshot()
        if action.evidence:
            before["evidence"] = action.evidence
        reason = action_reason(action)
        if gpu is not None:
            verb = "drains" if action.kind == ActionKind.DRAIN else "resumes"
            reason += f"; Slurm {verb} whole nodes: GPU {gpu}'s node {name}, all its GPUs"
        update = [self.config.scontrol, "update", f"NodeName={name}"]
        if action.kind == ActionKind.DRAIN:
            if node.drained:
                return _Plan(Outcome.REFUSED, f"node {name} is already {node.state} (Reason={node.reason or 'none'}"
                                              f", set by {node.reason_by or 'unknown'}): not drained by this key",
                             object_kind=kind, before=before)
            mark = _mark(action_reason(action))
            return _Plan(Outcome.APPLIED, reason, [*update, "State=DRAIN", f"Reason={mark}"], object_kind=kind,
                         before=before, after={"drained": True, "reason": mark},
                         effects={"drained": True, "node": name})
        if not node.drained:
            return _Plan(Outcome.REFUSED, f"node {name} is not drained (State={node.state})", object_kind=kind,
                         before=before)
        if not (node.reason or "").startswith(MARK):
            return _Plan(Outcome.REFUSED, f"node {name} was drained by someone else (Reason={node.reason or 'none'}, "
                                          f"set by {node.reason_by or 'unknown'}): gpupool resumes only the nodes "
                                          f"it drained", object_kind=kind, before=before)
        return _Plan(Outcome.APPLIED, reason, [*update, "State=RESUME"], object_kind=kind, before=before,
                     after={"drained": False}, effects={"drained": False, "node": name})

    def _plan_quota(self, action: Action) -> _Plan:
        account = action.target
        quota = action.quota
        if not isinstance(quota, Mapping) or not quota:
            return _Plan(Outcome.REFUSED, "a quota change needs quota: {GPU model: GPUs}", object_kind="account")
        for model, gpus in quota.items():
            if isinstance(gpus, bool) or not isinstance(gpus, int | float) or gpus < 0 or gpus != int(gpus):
                return _Plan(Outcome.REFUSED, f"quota {model} is {gpus!r}: Slurm's GrpTRES counts whole GPUs >= 0",
                             object_kind="account")
        try:
            known = self.run([self.config.sacctmgr, "-n", "-P", "show", "account", account, "format=account"],
                             self.config.command_timeout_s)
        except SlurmCommandError as error:
            return _Plan(Outcome.REFUSED, f"cannot read account {account} from Slurm: {error}", object_kind="account")
        if known.returncode != 0:
            return _Plan(Outcome.REFUSED, f"cannot read account {account} from Slurm: {known.stderr}",
                         object_kind="account")
        if account not in known.stdout.decode().split():
            return _Plan(Outcome.REFUSED, f"no Slurm account {account}", object_kind="account")
        total = int(sum(quota.values()))
        where = f"where name={account}" + (f" cluster={self.config.clusters}" if self.config.clusters else "")
        command = f"{self.config.sacctmgr} -i modify account {where} set GrpTRES=gres/gpu={total}"
        proposal_id = "slurm-qp-" + hashlib.sha256(action.idempotency_key.encode()).hexdigest()[:12]
        proposed = {str(m): float(v) for m, v in quota.items()}
        return _Plan(Outcome.PROPOSED, f"{action_reason(action)}; an admin applies it with: {command}",
                     object_kind="account", after={"quota": proposed, "grp_tres": f"gres/gpu={total}"},
                     effects={"quota": proposed, "admin_command": command}, proposal_id=proposal_id)

    # --- Slurm ------------------------------------------------------------------------------

    def find_job(self, job_id: str) -> SlurmJob | None:
        """The job as slurmctld knows it now, or None when it does not."""
        result = self.run([self.config.squeue, "--json", f"--jobs={job_id}"], self.config.command_timeout_s)
        if result.returncode != 0:
            if "Invalid job id" in result.stderr:
                return None
            raise SlurmCommandError(result.argv, f"exit {result.returncode}: {result.stderr or 'no message'}")
        try:
            doc = json.loads(result.stdout)
        except ValueError:
            raise RecordError(f"squeue --json answered something that is not JSON: {result.stdout[:100]!r}") from None
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        if not isinstance(jobs, list):
            raise RecordError("squeue --json answered without a 'jobs' list")
        # 22.05 ignores --jobs with --json: pick the job out of the whole queue
        for entry in jobs:
            if isinstance(entry, dict) and job_id_text(entry) == job_id:
                return slurm_job(entry)
        return None

    def find_node(self, name: str) -> SlurmNode | None:
        """The node as slurmctld knows it now, or None when it does not."""
        result = self.run([self.config.scontrol, "-o", "show", "node", name], self.config.command_timeout_s)
        out = result.stdout.decode()
        if result.returncode != 0:
            if f"Node {name} not found" in f"{out} {result.stderr}":  # scontrol says so on stdout
                return None
            raise SlurmCommandError(result.argv, f"exit {result.returncode}: {result.stderr or out or 'no message'}")
        lines = [line for line in out.splitlines() if line.strip()]
        if len(lines) != 1:
            raise RecordError(f"scontrol show node {name} answered {len(lines)} lines, expected one")
        node = slurm_node(lines[0])
        return node if node.name == name else None

    def protection(self, job: SlurmJob) -> str | None:
        """Why the job is protected (a short description), or None."""
        config = self.config
        if job.partition in config.protected_partitions:
            return f"partition {job.partition}"
        if job.qos in config.protected_qos:
            return f"QOS {job.qos}"
        if config.protected_comment and config.protected_comment in job.comment:
            return f"comment {config.protected_comment}"
        return None

    def _execute(self, argv: list[str]) -> str | None:
        """Run the command; None on success, else why it failed."""
        try:
            result = self.run(argv, self.config.command_timeout_s)
        except SlurmCommandError as error:
            return f"{error} (the job's state is unknown: check squeue)"
        if result.returncode != 0:
            return f"{shlex.join(argv)} failed (exit {result.returncode}): {result.stderr or 'no message'}"
        return None


def _mark(text: str) -> str:
    """`gpupool: <text>` on one line (slurmctld keeps a newline, and `scontrol -o show node` would then
    answer two lines), at most MARK_LIMIT characters."""
    return " ".join(f"{MARK} {text}".split())[:MARK_LIMIT]


def _object_kind(action: Action) -> str:
    kind = ActionKind(action.kind)
    if kind in NODE_ACTIONS:
        return drain_object_kind(action.target)
    return "account" if kind == ActionKind.QUOTA_CHANGE else "job"
