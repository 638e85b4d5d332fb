"""Parsers for Slurm accounting (`sacct --parsable2` text and `sacct --json`) → raw.job_events, raw.job_gpus.

Both formats are first read into one row per job record ("attempt"), then turned into events by
the same Polars code. What counts as a record:
- parsable2: a job row. Step rows (JobID with a dot: `123.batch`, `123.extern`, `123.0`) are not
  jobs: they are not records, and `notes` says how many were ignored. The header line names the
  fields in any order (JobID, State, Submit, Start, End are required); `--parsable` output (a
  trailing `|`) is accepted too. A row with the wrong number of fields (a truncated row), a bad
  timestamp, state, TRES, NodeList, ExitCode or Timelimit is quarantined with its line number.
- json: an entry of `jobs` (Slurm 21.08 to 24.x shapes: state.current a string or a list, numbers
  plain or {set, infinite, number}); a bad entry is quarantined with its 1-based index. A document
  that is not JSON, or has no `jobs` list, is one quarantined record.

Times: sacct text times carry no zone; they are read as UTC (run sacct with TZ=UTC). JSON times
are epoch seconds (0 = unset).

Event semantics (sacct -D lists every attempt of a requeued job as its own row, same JobID):
- the rows of one (cluster, JobID) are ordered by Submit, then Start (unset last), then line, and
  numbered attempt 1..n;
- `submit` at Submit, for attempt 1 only (Slurm resets Submit on requeue);
- `admit` at Eligible, when set, for every attempt;
- `start` at Start, when set, with its job_gpus rows;
- at End, when set: a PREEMPTED row gives `preempt`; a REQUEUED/REQUEUE_HOLD/REQUEUE_FED row, or
  any other state on a row that is not the last, gives `requeue` (state = that row's state); the
  last row, when its state is final (COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY,
  NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, ...), also gives `finish` with the state and exit code
  (a last row that is PREEMPTED gives both `preempt` and `finish`); RUNNING, PENDING, SUSPENDED or
  REQUEUED last rows give no finish;
- state on submit/admit is PENDING, on start RUNNING, on requeue/preempt/finish the row's state;
- reason on the row's requeue/preempt/finish events: "cancelled by uid N" (text `CANCELLED by N`)
  or "cancelled by user X" (JSON kill_request_user), joined with sacct's Reason when that is an
  end reason (Slurm's FAIL_* reasons: NonZeroExitCode, TimeLimit, OutOfMemory, ...; END_REASONS);
- sacct's Reason otherwise is a wait cause (BeginTime, JobHeldUser, Priority, Resources,
  Dependency, ...: the last reason the job was blocked, kept after it ran), never an end reason:
  it goes on the row's last event before it started (submit or admit; start when neither);
- tenant = Account, queue = Partition, user_name = User, job_name = JobName, priority,
  gpus_requested (ReqTRES GPUs, else AllocTRES), gpu_model (typed gres, e.g. gres/gpu:a100 → A100),
  share_mode (whole, or mig for a MIG-typed gres such as a100_3g.20gb) and spec_json
  ({"time_limit_s": ...}) are repeated on every event of the row; exit_code only on finish. An
  ExitCode "r:s" gives r, or 128 + s when a signal s killed the job;
- event_id = `slurm:{cluster}:{job_id}:{attempt}:{event_type}`.

job_gpus: one row per allocated GPU (AllocTRES, else ReqTRES) of each started attempt, spread
evenly over the NodeList hosts (the first hosts take the remainder); sacct carries no GPU
indices, so gpu and uuid are null and such rows cannot join telemetry by index. fraction is 1
(MIG-typed gres: slices / 7). Job ids: the JobID sacct shows (`123`, array task `123_4`, het
component `123+0`); for JSON the same form is rebuilt from array/het fields.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl

from pipelines.contracts import contract
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import (
    Columns,
    DocumentError,
    RecordError,
    Rejects,
    compact_json,
    decode_document,
    json_type,
    load_json_document,
    read_lines,
)

SOURCE = "slurm"
TEXT_SOURCE = "slurm_sacct_parsable2"
JSON_SOURCE = "slurm_sacct_json"
REQUIRED_FIELDS = ("JobID", "State", "Submit", "Start", "End")
NOTHING_FOUND = 9003  # Slurm's error number for a query that matched no job (sacct --json, slurmrestd)
NO_JOBS_NOTE = "no job in the answer: a quiet day"
UNSET = frozenset({"", "Unknown", "None", "none", "(null)"})
REQUEUE_STATES = ("REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")
# sacct's Reason is "the last reason a job was blocked from running" (sacct(1)), kept after the job
# ran: a wait cause (Priority, Resources, BeginTime, Dependency, JobHeldUser, QOSMax..., ...). Only
# Slurm's FAIL_* reasons say why a job ended; those go on the end events, every other on the wait.
END_REASONS = frozenset({
    "NonZeroExitCode", "RaisedSignal", "TimeLimit", "OutOfMemory", "NodeDown", "SystemFailure",
    "JobLaunchFailure", "InactiveLimit", "InvalidAccount", "InvalidQOS", "BadConstraints",
    "BurstBufferOperationFailure", "DeadLine",
})
FINAL_STATES = (
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT", "LAUNCH_FAILED",
)
INT32_MAX = 2**31 - 1
MAX_HOSTS = 100_000

_STATE = re.compile(r"([A-Z_]+)(?: by (\d+))?\+?")
_TEXT_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
_EXIT_CODE = re.compile(r"(\d+):(\d+)")
_DURATION = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_MIG_PROFILE = re.compile(r"(\d+)g\.\d+gb")
_GPU_FAMILY = re.compile(
    r"gh200|gb200|b200|b100|h200|h100|h800|a800|a100|a40|a30|a16|a10g|a10|l40s|l40|l4|v100|t4|p100|p40|"
    r"mi300x|mi250x|mi250|mi210|mi100|rtx_?a?\d{4}"
)


@dataclass
class _Attempt:
    """One sacct job record, normalised (both formats)."""

    cluster: str
    job_id: str
    submit_at: datetime
    eligible_at: datetime | None
    start_at: datetime | None
    end_at: datetime | None
    state: str
    cancelled_by: str | None
    sacct_reason: str | None
    tenant: str | None
    queue: str | None
    user_name: str | None
    job_name: str | None
    gpus_requested: int | None
    gpus_allocated: int
    gpu_model: str | None
    share_mode: str | None
    mig_profile: str | None
    fraction: float
    priority: int | None
    exit_code: int | None
    spec_json: str | None
    hosts: list[str]
    line_number: int


_ATTEMPT_SCHEMA = pl.Schema({
    "cluster": pl.String, "job_id": pl.String, "submit_at": pl.Datetime("us"),
    "eligible_at": pl.Datetime("us"), "start_at": pl.Datetime("us"), "end_at": pl.Datetime("us"),
    "state": pl.String, "cancelled_by": pl.String, "sacct_reason": pl.String, "tenant": pl.String,
    "queue": pl.String, "user_name": pl.String, "job_name": pl.String, "gpus_requested": pl.Int32,
    "gpus_allocated": pl.Int32, "gpu_model": pl.String, "share_mode": pl.String, "mig_profile": pl.String,
    "fraction": pl.Float64, "priority": pl.Int32, "exit_code": pl.Int32, "spec_json": pl.String,
    "hosts": pl.List(pl.String), "line_number": pl.Int32,
})


@dataclass
class _Collected:
    attempts: Columns = field(default_factory=lambda: Columns(_ATTEMPT_SCHEMA))
    rejects: Rejects = field(default_factory=Rejects)
    read: int = 0
    notes: list[str] = field(default_factory=list)
    priority_out_of_range: int = 0

    def add(self, attempt: _Attempt) -> None:
        self.attempts.append(**attempt.__dict__)


# --- shared value parsing -------------------------------------------------------------------


_HOSTLIST_MARK = re.compile(r"[\[\],]")


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm hostlist: `gpu[01-02],cpu7` → gpu01, gpu02, cpu7; `None assigned` → []."""
    text = text.strip()
    if text in UNSET or text == "None assigned":
        return []
    hosts: list[str] = []
    depth, start = 0, 0
    for found in _HOSTLIST_MARK.finditer(text + ","):  # only brackets and commas change anything
        i, char = found.start(), found.group()
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise RecordError(f"NodeList {text!r} has unbalanced brackets")
        if char == "," and depth == 0:
            hosts.extend(_expand_host(text[start:i], text))
            start = i + 1
            if len(hosts) > MAX_HOSTS:
                raise RecordError(f"NodeList {text!r} expands to more than {MAX_HOSTS} hosts")
    if depth:
        raise RecordError(f"NodeList {text!r} has unbalanced brackets")
    return hosts


def _expand_host(item: str, whole: str) -> list[str]:
    if "[" not in item:
        if "]" in item or not item:
            raise RecordError(f"NodeList {whole!r} is not a valid hostlist")
        return [item]
    prefix, _, rest = item.partition("[")
    ranges, _, suffix = rest.partition("]")
    tails = _expand_host(suffix, whole) if suffix else [""]
    out = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        # isascii: str.isdigit() also accepts digits int() refuses, such as '²'
        if not (low + high).isascii() or not low.isdigit() or (high and not high.isdigit()) or (
            high and int(high) < int(low)
        ):
            raise RecordError(f"NodeList {whole!r} has a bad range {part!r}")
        if int(high or low) - int(low) > MAX_HOSTS:
            raise RecordError(f"NodeList {whole!r} expands to more than {MAX_HOSTS} hosts")
        out.extend(f"{prefix}{n:0{len(low)}d}{tail}" for n in range(int(low), int(high or low) + 1) for tail in tails)
    return out


def canonical_gpu_model(gres_type: str) -> tuple[str, str | None]:
    """A Slurm GPU gres type → (canonical model, MIG profile): `nvidia_a100_3g.20gb` → (A100, 3g.20gb)."""
    lowered = gres_type.lower()
    mig = _MIG_PROFILE.search(lowered)
    family = _GPU_FAMILY.search(lowered)
    model = family.group(0).replace("_", "") if family else lowered.removeprefix("nvidia_")
    return model.upper(), (mig.group(0) if mig else None)


@dataclass(frozen=True)
class _Gpus:
    count: int
    model: str | None
    mig_profile: str | None


def _gpus(tres: list[tuple[str, int]]) -> _Gpus | None:
    """GPUs in TRES pairs: `gres/gpu` is the total, `gres/gpu:<type>` the typed share. None if no GPU."""
    total = next((count for name, count in tres if name == "gres/gpu"), None)
    typed = [(name.removeprefix("gres/gpu:"), count) for name, count in tres if name.startswith("gres/gpu:")]
    if total is None and not typed:
        return None
    if total is None:
        total = sum(count for _, count in typed)
    if not typed:
        return _Gpus(total, None, None)
    gres_type = max(typed, key=lambda pair: pair[1])[0]  # mixed types: the largest share names the model
    model, mig_profile = canonical_gpu_model(gres_type)
    return _Gpus(total, model, mig_profile)


def _tres_text(text: str, name: str) -> list[tuple[str, int]]:
    """`billing=4,cpu=4,gres/gpu:a100=2,mem=400M` → the GPU pairs (other TRES are not needed)."""
    pairs = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not item or not sep:
            raise RecordError(f"{name} {text!r} is not a TRES list (name=count,...)")
        if key == "gres/gpu" or key.startswith("gres/gpu:"):
            if not (value.isascii() and value.isdigit()):
                raise RecordError(f"{name} {text!r}: {key} count {value!r} is not an integer")
            pairs.append((key, int(value)))
    return pairs


def _mig_fraction(model: str | None, profile: str | None) -> float:
    if profile is None:
        return 1.0
    slices = int(profile.split("g.", 1)[0])
    return min(slices / (4 if model == "A30" else 7), 1.0)


def _spec_json(time_limit_s: int | None) -> str | None:
    return None if time_limit_s is None else compact_json({"time_limit_s": time_limit_s})


def _priority(value: int | None, collected: _Collected) -> int | None:
    if value is not None and not 0 <= value <= INT32_MAX:
        collected.priority_out_of_range += 1
        return None
    return value


def _attempt(
    *,
    cluster: str,
    job_id: str,
    times: tuple[datetime, datetime | None, datetime | None, datetime | None],
    state: str,
    cancelled_by: str | None,
    sacct_reason: str | None,
    names: tuple[str | None, str | None, str | None, str | None],
    requested: _Gpus | None,
    allocated: _Gpus | None,
    priority: int | None,
    exit_code: int | None,
    time_limit_s: int | None,
    hosts: list[str],
    line_number: int,
) -> _Attempt:
    submit_at, eligible_at, start_at, end_at = times
    tenant, queue, user_name, job_name = names
    gpus = allocated or requested
    for what, value in (("requested GPUs", requested), ("allocated GPUs", allocated), ("exit code", exit_code)):
        number = value.count if isinstance(value, _Gpus) else value
        if number is not None and not -(2**31) <= number <= INT32_MAX:  # INTEGER columns
            raise RecordError(f"{what} {number} out of range for a 32-bit integer")
    return _Attempt(
        cluster=cluster, job_id=job_id, submit_at=submit_at, eligible_at=eligible_at, start_at=start_at,
        end_at=end_at, state=state, cancelled_by=cancelled_by, sacct_reason=sacct_reason, tenant=tenant,
        queue=queue, user_name=user_name, job_name=job_name,
        gpus_requested=(requested or allocated).count if gpus else None,
        gpus_allocated=gpus.count if gpus else 0,
        gpu_model=gpus.model if gpus else None,
        share_mode=("mig" if gpus.mig_profile else "whole") if gpus and gpus.count else None,
        mig_profile=gpus.mig_profile if gpus else None,
        fraction=_mig_fraction(gpus.model, gpus.mig_profile) if gpus else 1.0,
        priority=priority, exit_code=exit_code, spec_json=_spec_json(time_limit_s), hosts=hosts,
        line_number=line_number,
    )


# --- events from attempts (both formats) ----------------------------------------------------


def _events_and_gpus(attempts: pl.DataFrame, source_file: str) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Attempt rows → (job_events, job_gpus, started attempts with GPUs but no host list)."""
    job = ["cluster", "job_id"]
    attempts = attempts.sort(["cluster", "job_id", "submit_at", "start_at", "line_number"], nulls_last=True)
    attempts = attempts.with_columns(attempt=pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over(job))
    attempts = attempts.with_columns(is_last=pl.col("attempt") == pl.len().over(job))

    state, ended = pl.col("state"), pl.col("end_at").is_not_null()
    requeued = ended & (state != "PREEMPTED") & (~pl.col("is_last") | state.is_in(REQUEUE_STATES))
    kinds: list[tuple[str, int, pl.Expr, str, pl.Expr]] = [
        ("submit", 0, pl.col("attempt") == 1, "submit_at", pl.lit("PENDING")),
        ("admit", 1, pl.col("eligible_at").is_not_null(), "eligible_at", pl.lit("PENDING")),
        ("start", 2, pl.col("start_at").is_not_null(), "start_at", pl.lit("RUNNING")),
        ("requeue", 3, requeued, "end_at", state),
        ("preempt", 3, ended & (state == "PREEMPTED"), "end_at", state),
        ("finish", 4, ended & pl.col("is_last") & state.is_in(FINAL_STATES), "end_at", state),
    ]
    events = pl.concat([
        attempts.filter(keep).with_columns(
            event_type=pl.lit(kind), order=pl.lit(order), occurred_at=pl.col(at), event_state=event_state
        )
        for kind, order, keep, at, event_state in kinds
    ])
    row = ["cluster", "job_id", "attempt"]
    is_end_reason = pl.col("sacct_reason").is_in(list(END_REASONS))
    end_reason = pl.concat_str(
        ["cancelled_by", pl.when(is_end_reason).then("sacct_reason")], separator="; ", ignore_nulls=True
    )
    end_reason = pl.when(end_reason != "").then(end_reason)
    wait_reason = pl.when(~is_end_reason).then("sacct_reason")
    terminal = pl.col("order") >= 3
    before_start = pl.col("order") <= 1
    last_wait = pl.when(before_start.any().over(row)).then(
        before_start & (pl.col("order") == pl.col("order").filter(before_start).max().over(row))
    ).otherwise(pl.col("order") == 2)
    # a row with no end event (still running or pending) keeps its end reason, if any, on its last event
    carries_end = terminal | (~terminal.any().over(row) & (pl.col("order") == pl.col("order").max().over(row)))
    row_reason = pl.concat_str(
        [pl.when(carries_end).then(end_reason), pl.when(last_wait).then(wait_reason)], separator="; ",
        ignore_nulls=True,
    )
    events = events.sort([*row, "order", "event_type"]).with_columns(
        event_id=pl.concat_str(
            [pl.lit("slurm"), "cluster", "job_id", pl.col("attempt").cast(pl.String), "event_type"], separator=":"
        ),
        state=pl.col("event_state"),
        reason=pl.when(row_reason != "").then(row_reason),
        exit_code=pl.when(pl.col("event_type") == "finish").then(pl.col("exit_code")),
        source=pl.lit(SOURCE),
        source_file=pl.lit(source_file),
    )

    placed = attempts.filter(pl.col("start_at").is_not_null() & (pl.col("gpus_allocated") > 0))
    hostless = placed.filter(pl.col("hosts").list.len() == 0).height
    gpus = (
        placed.filter(pl.col("hosts").list.len() > 0)
        .with_columns(n_hosts=pl.col("hosts").list.len())
        .with_columns(host_index=pl.int_ranges(0, pl.col("n_hosts")))
        .explode(["hosts", "host_index"])
        .with_columns(  # spread evenly; the first hosts take the remainder
            per_host=pl.col("gpus_allocated") // pl.col("n_hosts")
            + (pl.col("host_index") < pl.col("gpus_allocated") % pl.col("n_hosts")).cast(pl.Int32)
        )
        .filter(pl.col("per_host") > 0)
        .with_columns(slot=pl.int_ranges(0, pl.col("per_host")))
        .explode("slot")
        .select(
            "job_id", "attempt", host="hosts", gpu_instance_profile="mig_profile", gpu_model="gpu_model",
            fraction="fraction", assigned_at="start_at", source=pl.lit(SOURCE), source_file=pl.lit(source_file),
        )
    )
    return contract("job_events").conform(events), contract("job_gpus").conform(gpus), hostless


def _result(collected: _Collected, source: str, source_file: str, *, empty_answer: bool = False) -> ParseResult:
    attempts = collected.attempts.frame()
    events, gpus, hostless = _events_and_gpus(attempts, source_file)
    notes = list(collected.notes)
    if collected.priority_out_of_range:
        notes.append(f"{collected.priority_out_of_range} job records have a priority above 2^31-1; stored as null")
    if hostless:
        notes.append(f"{hostless} started attempts with GPUs have no NodeList: no job_gpus rows for them")
    return ParseResult(
        tables={"job_events": events, "job_gpus": gpus},
        quarantine=collected.rejects.frame(source, source_file),
        records_read=collected.read,
        records_loaded=attempts.height,
        notes=notes,
        empty_answer=empty_answer,
    )


# --- sacct --parsable2 ----------------------------------------------------------------------


def _text_time(value: str | None, name: str, *, required: bool = False) -> datetime | None:
    if value is None or value in UNSET:
        if required:
            raise RecordError(f"{name} is {value or 'empty'!r}, expected a time")
        return None
    if not _TEXT_TIME.fullmatch(value):
        raise RecordError(f"{name} is {value!r}, expected YYYY-MM-DDTHH:MM:SS, Unknown or None")
    try:
        return datetime.fromisoformat(value)
    except ValueError as error:
        raise RecordError(f"{name} is {value!r}: {error}") from error


def _duration_s(value: str, name: str) -> int | None:
    """Slurm time limit text → seconds: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    if value in UNSET or value.upper() in ("UNLIMITED", "PARTITION_LIMIT", "INVALID"):
        return None
    match = _DURATION.fullmatch(value)
    if not match:
        raise RecordError(f"{name} is {value!r}, expected [D-]HH:MM:SS, UNLIMITED or Partition_limit")
    days, a, b, c = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return ((int(days) * 24 + int(a)) * 60 + int(b or 0)) * 60 + int(c or 0)
    parts = [int(p) for p in (a, b, c) if p is not None]
    if len(parts) == 1:
        return parts[0] * 60  # plain minutes
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def _exit_code(value: str | None) -> int | None:
    if value is None or value in UNSET:
        return None
    match = _EXIT_CODE.fullmatch(value)
    if not match:
        raise RecordError(f"ExitCode is {value!r}, expected return_code:signal")
    code, signal = int(match.group(1)), int(match.group(2))
    return 128 + signal if signal else code


def _text_attempt(get: Callable[[str], str | None], cluster: str, line_number: int,
                  collected: _Collected) -> _Attempt:
    job_id = get("JobID")
    if not job_id:
        raise RecordError("JobID is empty")
    raw_state = get("State") or ""
    state_match = _STATE.fullmatch(raw_state)
    if not state_match:
        raise RecordError(f"State is {raw_state!r}, expected a Slurm job state such as COMPLETED or 'CANCELLED by 0'")
    state, uid = state_match.groups()
    times = (
        _text_time(get("Submit"), "Submit", required=True),
        _text_time(get("Eligible"), "Eligible"),
        _text_time(get("Start"), "Start"),
        _text_time(get("End"), "End"),
    )
    limit_text = get("Timelimit")
    time_limit_s = (  # TimelimitRaw is plain minutes, which _duration_s reads too
        _duration_s(limit_text, "Timelimit") if limit_text is not None
        else _duration_s(get("TimelimitRaw") or "", "TimelimitRaw")
    )
    priority_text = get("Priority")
    if priority_text not in (None, "") and not (priority_text.isascii() and priority_text.isdigit()):
        raise RecordError(f"Priority is {priority_text!r}, expected an integer")
    req_tres, alloc_tres = get("ReqTRES"), get("AllocTRES")
    reason = get("Reason")

    def text(name: str) -> str | None:
        return get(name) or None

    return _attempt(
        cluster=text("Cluster") or cluster,
        job_id=job_id,
        times=times,
        state=state,
        cancelled_by=f"cancelled by uid {uid}" if uid is not None else None,
        sacct_reason=None if reason in UNSET or reason is None else reason,
        names=(text("Account"), text("Partition"), text("User"), text("JobName")),
        requested=_gpus(_tres_text(req_tres, "ReqTRES")) if req_tres else None,
        allocated=_gpus(_tres_text(alloc_tres, "AllocTRES")) if alloc_tres else None,
        priority=_priority(int(priority_text) if priority_text else None, collected),
        exit_code=_exit_code(get("ExitCode")),
        time_limit_s=time_limit_s,
        hosts=expand_hostlist(get("NodeList") or ""),
        line_number=line_number,
    )


def parse_sacct_parsable2(data: bytes | str, source_file: str, cluster: str = "slurm") -> ParseResult:
    """`sacct --parsable2 [--duplicates]` output with its header → job_events and job_gpus.

    `cluster` names the cluster when the output has no Cluster field.
    """
    collected = _Collected()
    lines = read_lines(data, collected.rejects)
    collected.read = len(collected.rejects)
    if not lines:
        if not collected.read:
            collected.notes.append("empty file")
        return _result(collected, TEXT_SOURCE, source_file)
    (header_number, header), rows = lines[0], lines[1:]
    names = header.split("|")
    trailing = len(names) > 1 and names[-1] == ""  # --parsable ends every line with a '|'
    if trailing:
        names = names[:-1]
    position = {name.lower(): i for i, name in enumerate(names)}
    missing = [name for name in REQUIRED_FIELDS if name.lower() not in position]
    if missing:
        reason = (
            f"header (line {header_number}) lacks {', '.join(missing)}: expected sacct --parsable2 output "
            f"with its header line"
        )
        for number, line in rows:
            collected.rejects.add(number, reason, line, "parse")
        collected.read += len(rows)
        return _result(collected, TEXT_SOURCE, source_file)

    job_index = position["jobid"]
    steps = 0
    for number, line in rows:
        fields = line.split("|")
        job_id = fields[job_index] if job_index < len(fields) else ""
        if "." in job_id:
            steps += 1
            continue
        collected.read += 1
        if trailing and fields[-1] == "":
            fields = fields[:-1]
        if len(fields) != len(names):
            collected.rejects.add(
                number, f"expected {len(names)} fields, found {len(fields)} (truncated row?)", line, "parse"
            )
            continue

        def get(name: str, fields: list[str] = fields) -> str | None:
            index = position.get(name.lower())
            return None if index is None else fields[index]

        try:
            collected.add(_text_attempt(get, cluster, number, collected))
        except RecordError as error:
            collected.rejects.add(number, str(error), line)
    if steps:
        collected.notes.append(f"{steps} step rows ignored (steps are not jobs)")
    quiet = collected.read == 0  # the header (and maybe step rows), no job row: sacct's answer for no job
    if quiet:
        collected.notes.append(NO_JOBS_NOTE)
    return _result(collected, TEXT_SOURCE, source_file, empty_answer=quiet)


# --- sacct --json ---------------------------------------------------------------------------


def _number(value: object, name: str) -> int | None:
    """A Slurm number: a plain integer, or {set, infinite, number} (unset or infinite → None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise RecordError(f"field '{name}' is boolean, expected integer")
    if isinstance(value, int):
        return value
    if isinstance(value, dict) and "number" in value:
        if value.get("infinite") or value.get("set") is False:
            return None
        number = value["number"]
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    raise RecordError(f"field '{name}' is {json_type(value)} {compact_json(value)[:80]}, expected integer")


def _member(obj: Mapping[str, object], key: str, kind: type, where: str = "") -> object:
    value = obj.get(key)
    if value is not None and not isinstance(value, kind):
        raise RecordError(f"field '{where}{key}' is {json_type(value)}, expected {json_type(kind())}")
    return value


def _epoch(value: object, name: str, *, required: bool = False) -> datetime | None:
    seconds = _number(value, name)
    if not seconds:  # 0 means unset
        if required:
            raise RecordError(f"field '{name}' is {'missing' if value is None else 'unset'}")
        return None
    if seconds < 0:
        raise RecordError(f"field '{name}' is {seconds}, expected epoch seconds")
    try:
        return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError) as error:
        raise RecordError(f"field '{name}' is {seconds}, out of range for a time: {error}") from error


def _json_job_id(job: Mapping[str, object]) -> str:
    job_id = _number(job.get("job_id"), "job_id")
    if job_id is None:
        raise RecordError("field 'job_id' is missing")
    array: Mapping[str, object] = _member(job, "array", dict) or {}
    array_job = _number(array.get("job_id"), "array.job_id")
    task = _number(array.get("task_id"), "array.task_id")
    if array_job and task is not None:
        return f"{array_job}_{task}"
    het: Mapping[str, object] = _member(job, "het", dict) or {}
    het_job = _number(het.get("job_id"), "het.job_id")
    offset = _number(het.get("job_offset"), "het.job_offset")
    if het_job and offset is not None:
        return f"{het_job}+{offset}"
    return str(job_id)


def _json_state(job: Mapping[str, object]) -> tuple[str, str | None]:
    state_obj = _member(job, "state", dict)
    if state_obj is None:
        raise RecordError("field 'state' is missing")
    current = state_obj.get("current")
    if isinstance(current, str) and current:
        states = [current]
    elif isinstance(current, list) and current and all(isinstance(s, str) for s in current):
        states = current  # 23.02+: base state, then flags
    else:
        raise RecordError(f"field 'state.current' is {json_type(current)}, expected a state or a list of states")
    state = next((s for s in states if s in REQUEUE_STATES), states[0])
    reason = _member(state_obj, "reason", str, "state.")
    return state, None if reason in UNSET or reason is None else reason


def _json_tres(tres: Mapping[str, object], key: str) -> _Gpus | None:
    value = tres.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return _gpus(_tres_text(value, f"tres.{key}"))
    if not isinstance(value, list):
        raise RecordError(f"field 'tres.{key}' is {json_type(value)}, expected array")
    pairs = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise RecordError(f"field 'tres.{key}[{i}]' is {json_type(item)}, expected object")
        name = item.get("name")
        if item.get("type") == "gres" and isinstance(name, str) and (name == "gpu" or name.startswith("gpu:")):
            count = _number(item.get("count"), f"tres.{key}[{i}].count")
            if count is None or count < 0:
                raise RecordError(f"field 'tres.{key}[{i}].count' is {count}, expected a GPU count")
            pairs.append((f"gres/{name}", count))
    return _gpus(pairs)


def _json_exit_code(job: Mapping[str, object]) -> int | None:
    exit_obj: Mapping[str, object] | None = _member(job, "exit_code", dict)
    if not exit_obj:
        return None
    code = _number(exit_obj.get("return_code"), "exit_code.return_code")
    signal_obj = _member(exit_obj, "signal", dict, "exit_code.") or {}
    signal = _number(signal_obj.get("id", signal_obj.get("signal_id")), "exit_code.signal.id")
    return 128 + signal if signal else code


def _json_attempt(job_obj: object, index: int, default_cluster: str, collected: _Collected) -> _Attempt:
    if not isinstance(job_obj, dict):
        raise RecordError(f"job is {json_type(job_obj)}, expected a JSON object")
    job = job_obj
    job_id = _json_job_id(job)
    state, reason = _json_state(job)
    time_obj = _member(job, "time", dict)
    if time_obj is None:
        raise RecordError("field 'time' is missing")
    times = (
        _epoch(time_obj.get("submission"), "time.submission", required=True),
        _epoch(time_obj.get("eligible"), "time.eligible"),
        _epoch(time_obj.get("start"), "time.start"),
        _epoch(time_obj.get("end"), "time.end"),
    )
    limit_min = _number(time_obj.get("limit"), "time.limit")
    association: Mapping[str, object] = _member(job, "association", dict) or {}
    tres: Mapping[str, object] = _member(job, "tres", dict) or {}
    killer = _member(job, "kill_request_user", str)

    def text(key: str, obj: Mapping[str, object] = job) -> str | None:
        return _member(obj, key, str) or None

    return _attempt(
        cluster=text("cluster") or default_cluster,
        job_id=job_id,
        times=times,
        state=state,
        cancelled_by=f"cancelled by user {killer}" if killer and state == "CANCELLED" else None,
        sacct_reason=reason,
        names=(text("account"), text("partition"), text("user") or text("user", association), text("name")),
        requested=_json_tres(tres, "requested"),
        allocated=_json_tres(tres, "allocated"),
        priority=_priority(_number(job.get("priority"), "priority"), collected),
        exit_code=_json_exit_code(job),
        # time.limit is in minutes; NO_VAL-like sentinels mean no limit
        time_limit_s=limit_min * 60 if limit_min and limit_min < 0xFFFFFFFE else None,
        hosts=expand_hostlist(text("nodes") or ""),
        line_number=index,
    )


def parse_sacct_json(data: bytes | str, source_file: str) -> ParseResult:
    """`sacct --json` (Slurm 21.08 to 24.x) → job_events and job_gpus; a record is one `jobs` entry."""
    collected = _Collected()
    try:
        text = decode_document(data)
        if not text.strip():
            collected.notes.append("empty file")
            return _result(collected, JSON_SOURCE, source_file)
        doc = load_json_document(text)
        if not isinstance(doc, dict):
            raise RecordError(f"document is {json_type(doc)}, expected a JSON object with a 'jobs' list")
        jobs = doc.get("jobs")
        if not isinstance(jobs, list):
            raise RecordError(f"field 'jobs' is {json_type(jobs)}, expected array")
    except RecordError as error:
        is_syntax = isinstance(error, DocumentError)
        raw = data[:2000] if isinstance(data, str) else data[:2000].decode("utf-8", "replace")
        collected.read = 1
        collected.rejects.add(error.line_number if is_syntax else None, str(error), raw,
                              "parse" if is_syntax else "validate")
        return _result(collected, JSON_SOURCE, source_file)

    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    cluster = slurm.get("cluster") if isinstance(slurm, dict) else None
    default_cluster = cluster if isinstance(cluster, str) and cluster else SOURCE  # a cluster name, or none
    failed = False  # an error other than "Nothing found": an empty `jobs` is then no answer, not a quiet day
    for kind in ("errors", "warnings"):
        reported = doc.get(kind) or []
        for item in reported if isinstance(reported, list) else [reported]:
            collected.notes.append(f"sacct reported {kind[:-1]}: {compact_json(item)[:300]}")
            failed |= kind == "errors" and not (isinstance(item, dict) and item.get("error_number") == NOTHING_FOUND)
    if not jobs and not failed:
        collected.notes.append(NO_JOBS_NOTE)
        return _result(collected, JSON_SOURCE, source_file, empty_answer=True)
    collected.read = len(jobs)
    for index, job in enumerate(jobs, start=1):
        try:
            collected.add(_json_attempt(job, index, default_cluster, collected))
        except RecordError as error:
            collected.rejects.add(index, f"jobs[{index - 1}]: {error}", compact_json(job))
    return _result(collected, JSON_SOURCE, source_file)
