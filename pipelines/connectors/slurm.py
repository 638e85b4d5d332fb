"""Slurm: accounting into the landing zone, and which GPU indices a running job holds.

Accounting. For one UTC day the connector asks Slurm for every job record that was eligible or
running in the day (`-S day 00:00 -E next day 00:00`, every attempt of a requeued job with
`--duplicates`, all users) and lands the answer, byte for byte, where the ingest sources read it:
- `sacct --parsable2` (TZ=UTC, `--format` = the fields the parser reads) → landing/slurm_sacct/<day>/sacct.txt
- `sacct --json` → landing/slurm_sacct_json/<day>/sacct.json
- slurmrestd `GET /slurmdb/<version>/jobs` (same document as sacct --json) →
  landing/slurm_sacct_json/<day>/slurmrestd.json. Debian's Slurm is built without auth/jwt: its
  slurmrestd serves only rest_auth/local on a unix socket (as an ordinary user, behind socat for
  HTTP); with a jwt build, set `restd_user` and `restd_token` (`${SLURM_JWT}`).
Landing the same day again replaces its files (a later fetch knows more: jobs that ended since).
`SlurmAccounting` is the Dagster resource: live (subprocess / slurmrestd) or offline (recorded
outputs in a folder).

GPU indices. sacct never carries them: its TRES say how many GPUs, not which. Two ways exist:
1. `squeue --json` (slurmctld's view, running jobs only) lists `gres_detail` per node, e.g.
   `gpu:2(IDX:0-1)`: `snapshot_running_jobs` lands it (landing/slurm_squeue/<day>/) and
   `parse_squeue_job_gpus` turns it into raw.job_gpus rows with `gpu` set. Only jobs running at
   the snapshot are seen; a job that starts and ends between snapshots has no indices. IDX is the
   position in gres.conf's File= list, which is the NVML/DCGM index when the files are listed in
   minor-number order (nvidia0..N) and minor numbers follow NVML order (the usual case, not a
   guarantee). MIG-typed gres get no index: their IDX counts MIG devices, not GPUs.
2. dcgm-exporter's HPC job mapping: scripts/slurm/prolog-hpc-job-map.sh and
   epilog-hpc-job-map.sh keep one file per GPU index naming its job (`--hpc-job-mapping-dir`),
   and dcgm-exporter labels that GPU's samples `hpc_job="<id>"`; raw.dcgm_samples.hpc_job then
   says which job each sample belongs to, for every job however short.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import dagster as dg
import polars as pl
import requests
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.config import section
from pipelines.connectors import HttpStatusError, RetryPolicy, new_session, with_retries
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
)
from pipelines.sources.slurm_sacct import canonical_gpu_model, expand_hostlist
from pipelines.warehouse import Warehouse

SECTION = "slurm"
TEXT_SOURCE = "slurm_sacct"
JSON_SOURCE = "slurm_sacct_json"
SQUEUE_SOURCE = "slurm_squeue"
# what pipelines.sources.slurm_sacct.parse_sacct_parsable2 reads (JobID, State, Submit, Start, End required)
SACCT_FIELDS = (
    "JobID", "Cluster", "Account", "Partition", "User", "JobName", "State", "Reason", "Submit", "Eligible",
    "Start", "End", "Timelimit", "Priority", "ReqTRES", "AllocTRES", "NodeList", "ExitCode",
)
OFFLINE_FILES = {"sacct.txt": TEXT_SOURCE, "sacct.json": JSON_SOURCE, "slurmrestd.json": JSON_SOURCE}
NOTHING_FOUND = 9003  # slurmrestd's error number for a query that matched no job
MAX_NODE_GPUS = 1024  # GPU (or MIG device) count and index range of one node's gres: more is not a node
_GRES = re.compile(r"(?P<name>[^:(,]+)(?::(?P<first>[^:(,]+))?(?::(?P<second>[^:(,]+))?\(IDX:(?P<idx>[^)]*)\)")


class SlurmConfig(BaseModel):
    """The `slurm:` section of the connector configuration (gpupool.yml)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not a silent default
    accounting: list[Literal["sacct", "sacct_json", "slurmrestd"]] = Field(
        default_factory=lambda: ["sacct", "sacct_json"],
        description="what the live connector fetches per day: sacct text, sacct --json, slurmrestd",
    )
    sacct: str = "sacct"
    squeue: str = "squeue"
    scontrol: str = "scontrol"
    scancel: str = "scancel"
    sacctmgr: str = "sacctmgr"
    clusters: str | None = Field(None, description="sacct --clusters; default the local cluster")
    restd_url: str | None = Field(None, description="slurmrestd base URL, e.g. http://127.0.0.1:6820")
    restd_api: str = "v0.0.38"
    restd_user: str | None = Field(None, description="X-SLURM-USER-NAME (auth/jwt builds only)")
    restd_token: str | None = Field(None, description="X-SLURM-USER-TOKEN: write ${SLURM_JWT}, never the token")
    restd_timezone: str = Field("UTC", description="slurmrestd reads query times in its own local time zone")
    accounting_timeout_s: float = Field(120.0, gt=0)
    command_timeout_s: float = Field(30.0, gt=0, description="squeue, scontrol, scancel, sacctmgr")
    # enforcement: which jobs are never preempted, reclaimed or capped automatically
    protected_partitions: list[str] = Field(default_factory=list)
    protected_qos: list[str] = Field(default_factory=list)
    protected_comment: str | None = Field("gpupool:inference", description="a job whose Comment contains it")
    preempt_hold: bool = Field(False, description="preempt with `scontrol requeuehold` (held until released)")

    @field_validator("restd_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as UTC or Europe/Berlin)") from None
        return value


def load_slurm_config(path: Path | None = None) -> SlurmConfig:
    """The `slurm` section of the configuration file, or the defaults when it has none."""
    return section(SECTION, SlurmConfig, path) or SlurmConfig()


# --- commands -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: str


Runner = Callable[[Sequence[str], float], CommandResult]


class SlurmCommandError(RuntimeError):
    """A Slurm command failed or could not run; the message names the command and what it said."""

    def __init__(self, argv: Sequence[str], message: str):
        self.argv = tuple(argv)
        super().__init__(f"{' '.join(argv)}: {message}")


class SlurmRestError(RuntimeError):
    """slurmrestd reported an error, or answered something that is not its JSON document."""


def run_command(argv: Sequence[str], timeout_s: float) -> CommandResult:
    """Run a Slurm client command with TZ=UTC (sacct's text times are then UTC); never raises for
    a non-zero exit, only when the command cannot be started or overruns its timeout."""
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=timeout_s, env={**os.environ, "TZ": "UTC"},
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        raise SlurmCommandError(argv, f"command not found: {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise SlurmCommandError(argv, f"no answer within {timeout_s:g} s") from None
    return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr.decode("utf-8", "replace").strip())


def checked(result: CommandResult) -> bytes:
    """stdout of a command that succeeded; SlurmCommandError with its stderr otherwise."""
    if result.returncode != 0:
        raise SlurmCommandError(result.argv, f"exit {result.returncode}: {result.stderr or 'no message'}")
    return result.stdout


# --- accounting -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One file for the landing zone: landing/<source>/<day>/<filename>."""

    source: str
    filename: str
    data: bytes


class AccountingClient(Protocol):
    def fetch(self, day: dt.date) -> list[Delivery]: ...


def day_window(day: dt.date) -> tuple[str, str]:
    """sacct's -S/-E for one UTC day (read as UTC because the commands run with TZ=UTC)."""
    start = dt.datetime.combine(day, dt.time())
    return start.isoformat(timespec="seconds"), (start + dt.timedelta(days=1)).isoformat(timespec="seconds")


def sacct_command(config: SlurmConfig, day: dt.date, *, as_json: bool) -> list[str]:
    start, end = day_window(day)
    argv = [config.sacct, "--duplicates", "--allusers", "-S", start, "-E", end]
    if config.clusters:
        argv.append(f"--clusters={config.clusters}")
    if as_json:
        return [*argv, "--json"]
    return [*argv, "--parsable2", f"--format={','.join(SACCT_FIELDS)}"]


class LiveAccounting:
    """sacct on this host (subprocess) and/or slurmrestd over HTTP, as `config.accounting` says."""

    def __init__(self, config: SlurmConfig, run: Runner = run_command, session: requests.Session | None = None):
        self.config = config
        self.run = run
        self._session = session

    def fetch(self, day: dt.date) -> list[Delivery]:
        out = []
        for kind in self.config.accounting:
            if kind == "sacct":
                out.append(Delivery(TEXT_SOURCE, "sacct.txt", self._sacct(day, as_json=False)))
            elif kind == "sacct_json":
                out.append(Delivery(JSON_SOURCE, "sacct.json", self._sacct(day, as_json=True)))
            else:
                out.append(Delivery(JSON_SOURCE, "slurmrestd.json", self.restd_jobs(day)))
        return out

    def _sacct(self, day: dt.date, *, as_json: bool) -> bytes:
        return checked(self.run(sacct_command(self.config, day, as_json=as_json), self.config.accounting_timeout_s))

    def restd_jobs(self, day: dt.date) -> bytes:
        """`GET /slurmdb/<api>/jobs` for the day: the sacct --json document. "Nothing found" is an
        empty `jobs` list; any other error Slurm reports raises, naming the URL."""
        config = self.config
        if not config.restd_url:
            raise ValueError("slurm.restd_url is not set: slurmrestd accounting needs its URL")
        zone = ZoneInfo(config.restd_timezone)
        start = dt.datetime.combine(day, dt.time(), dt.UTC).astimezone(zone).replace(tzinfo=None)
        params = {"start_time": start.isoformat(timespec="seconds"),
                  "end_time": (start + dt.timedelta(days=1)).isoformat(timespec="seconds")}
        url = f"{config.restd_url.rstrip('/')}/slurmdb/{config.restd_api}/jobs"
        headers = {}
        if config.restd_token:
            headers = {"X-SLURM-USER-NAME": config.restd_user or "", "X-SLURM-USER-TOKEN": config.restd_token}
        session = self._session or new_session(1)
        deadline = time.monotonic() + config.accounting_timeout_s

        def attempt() -> requests.Response:
            response = session.get(url, params=params, headers=headers, timeout=config.accounting_timeout_s)
            # slurmrestd answers 500 with a JSON body for a query it cannot run: that is not retryable
            if response.status_code >= 400 and not _slurm_errors(response.content):
                raise HttpStatusError(url, response.status_code, response.reason, response.text[:300])
            return response

        try:
            response, _ = with_retries(attempt, RetryPolicy(), deadline=deadline)
        finally:
            if self._session is None:
                session.close()
        try:
            doc = json.loads(response.content)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise SlurmRestError(f"{url}: HTTP {response.status_code}, body is not a JSON object: {response.text[:200]!r}")
        errors = [e for e in _slurm_errors(response.content) if e.get("error_number") != NOTHING_FOUND]
        if errors or response.status_code != 200:
            detail = "; ".join(f"{e.get('error_number')} {e.get('description') or e.get('error')}" for e in errors)
            raise SlurmRestError(f"{url}: HTTP {response.status_code}: slurmrestd reported {detail or 'an error'}")
        if "jobs" not in doc:  # Nothing found: the day had no jobs
            doc = {**doc, "jobs": []}
            return json.dumps(doc, indent=2).encode()
        return response.content


def _slurm_errors(body: bytes) -> list[dict]:
    """The `errors` slurmrestd put in a JSON body; [] when there are none or it is not JSON."""
    try:
        doc = json.loads(body)
    except ValueError:
        return []
    errors = doc.get("errors") if isinstance(doc, dict) else None
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []


class OfflineAccounting:
    """Recorded outputs in `folder/<day>/`: sacct.txt, sacct.json and/or slurmrestd.json."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def fetch(self, day: dt.date) -> list[Delivery]:
        day_dir = self.folder / day.isoformat()
        if not day_dir.is_dir():
            raise FileNotFoundError(f"{day_dir}: no recorded Slurm accounting for {day}")
        out = [Delivery(source, name, (day_dir / name).read_bytes())
               for name, source in OFFLINE_FILES.items() if (day_dir / name).is_file()]
        if not out:
            raise FileNotFoundError(f"{day_dir}: none of {', '.join(OFFLINE_FILES)}")
        return out


def land(warehouse: Warehouse, day: dt.date, deliveries: Sequence[Delivery]) -> list[Path]:
    """Write each delivery to landing/<source>/<day>/<filename>, atomically (temp file, rename),
    so an ingest never reads half a file."""
    paths = []
    for delivery in deliveries:
        target = warehouse.landing / delivery.source / day.isoformat() / delivery.filename
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{delivery.filename}.partial")
        temp.write_bytes(delivery.data)
        os.replace(temp, target)
        paths.append(target)
    return paths


class SlurmAccounting(dg.ConfigurableResource):
    """Slurm accounting for a day, into the landing zone.

    Live (default): sacct on this host and/or slurmrestd, per the `slurm:` section of the
    configuration file (`config_file`, else $GPUPOOL_CONFIG, else ./gpupool.yml; defaults without
    one). Offline: `offline_dir` holds recorded outputs, `<offline_dir>/<day>/sacct.txt`,
    `sacct.json`, `slurmrestd.json`.
    """

    offline_dir: str = ""
    config_file: str = ""

    def settings(self) -> SlurmConfig:
        return load_slurm_config(Path(self.config_file) if self.config_file else None)

    def client(self) -> AccountingClient:
        if self.offline_dir:
            return OfflineAccounting(Path(self.offline_dir))
        return LiveAccounting(self.settings())

    def land_day(self, warehouse: Warehouse, day: dt.date) -> list[Path]:
        return land(warehouse, day, self.client().fetch(day))


# --- GPU indices of running jobs ------------------------------------------------------------


def squeue_command(config: SlurmConfig) -> list[str]:
    return [config.squeue, "--json", "--states=RUNNING"]


def snapshot_running_jobs(warehouse: Warehouse, now: dt.datetime, config: SlurmConfig | None = None,
                          run: Runner = run_command) -> Path:
    """Land `squeue --json` (running jobs with their GPU indices) as
    landing/slurm_squeue/<day>/squeue-<HHMMSS>.json, for `parse_squeue_job_gpus`."""
    config = config or SlurmConfig()
    data = checked(run(squeue_command(config), config.command_timeout_s))
    delivery = Delivery(SQUEUE_SOURCE, f"squeue-{now:%H%M%S}.json", data)
    return land(warehouse, now.date(), [delivery])[0]


def gres_gpu_indices(entry: str) -> tuple[str | None, int, list[int]] | None:
    """One node's `gres_detail` entry → (gres type, GPU count, GPU indices); None without GPUs.

    `gpu:2(IDX:0-1)` → (None, 2, [0, 1]); `gpu:a100:3(IDX:0,2-3)` → ("a100", 3, [0, 2, 3]);
    `gpu:1(IDX:N/A)` → (None, 1, []). Other gres on the node (`nic:1(IDX:0)`) are skipped.
    """
    gpu_items = [m for m in _GRES.finditer(entry) if m.group("name").strip() == "gpu"]
    if not gpu_items:
        if re.match(r"\s*gpu\b", entry):
            raise RecordError(f"gres_detail {entry!r} is not gpu[:type][:count](IDX:...)")
        return None
    gres_type, count, indices = None, 0, []
    for item in gpu_items:
        first, second = item.group("first"), item.group("second")
        if second is not None:
            item_type, item_count = first, second
        elif first is not None and first.isascii() and first.isdigit():  # isdigit alone accepts '²'
            item_type, item_count = None, first
        else:
            item_type, item_count = first, None
        if item_count is not None and not (item_count.isascii() and item_count.isdigit()):
            raise RecordError(f"gres_detail {entry!r}: count {item_count!r} is not an integer")
        if item_count is not None and int(item_count) > MAX_NODE_GPUS:
            raise RecordError(f"gres_detail {entry!r}: count {item_count} is more than a node holds")
        item_indices = _index_list(item.group("idx"), entry)
        gres_type = gres_type or item_type
        count += int(item_count) if item_count is not None else len(item_indices)
        indices.extend(item_indices)
    return gres_type, count, indices


def _index_list(text: str, entry: str) -> list[int]:
    if text in ("N/A", ""):
        return []
    out = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not part.isascii() or not low.isdigit() or (high and (not high.isdigit() or int(high) < int(low))):
            raise RecordError(f"gres_detail {entry!r}: bad index range {part!r}")
        if int(high or low) >= MAX_NODE_GPUS:
            raise RecordError(f"gres_detail {entry!r}: index range {part!r} goes past what a node holds")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def slurm_number(value: object, name: str) -> int | None:
    """A squeue number: plain (22.05) or {set, infinite, number} (23.02+); unset → None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping) and "number" in value:
        if value.get("infinite") or value.get("set") is False:
            return None
        if isinstance(value["number"], int):
            return value["number"]
    raise RecordError(f"field '{name}' is {json_type(value)} {compact_json(value)[:60]}, expected integer")


def job_state(job: Mapping[str, object]) -> str:
    """squeue's job_state: a string (22.05) or a list of base state then flags (23.02+)."""
    state = job.get("job_state")
    if isinstance(state, list) and state and all(isinstance(s, str) for s in state):
        return state[0]
    if isinstance(state, str) and state:
        return state
    raise RecordError(f"field 'job_state' is {json_type(state)}, expected a state")


def job_id_text(job: Mapping[str, object]) -> str:
    """The job id as sacct shows it: `123`, or `123_4` for an array task."""
    job_id = slurm_number(job.get("job_id"), "job_id")
    if job_id is None:
        raise RecordError("field 'job_id' is missing")
    array_job = slurm_number(job.get("array_job_id"), "array_job_id")
    task = slurm_number(job.get("array_task_id"), "array_task_id")
    return f"{array_job}_{task}" if array_job and task is not None else str(job_id)


_PLACEMENT_SCHEMA = pl.Schema({
    "job_id": pl.String, "attempt": pl.Int32, "host": pl.String, "gpu": pl.Int32,
    "gpu_instance_profile": pl.String, "gpu_model": pl.String, "fraction": pl.Float64,
    "assigned_at": pl.Datetime("us"),
})


def _placements(job: Mapping[str, object]) -> tuple[list[dict], int]:
    """One running job's GPU rows, and how many of them are MIG-typed (no GPU index)."""
    job_id = job_id_text(job)
    start = slurm_number(job.get("start_time"), "start_time")
    if not start:
        raise RecordError(f"job {job_id} is RUNNING without a start_time")
    attempt = (slurm_number(job.get("restart_cnt"), "restart_cnt") or 0) + 1
    if not 1 <= attempt <= 2**31 - 1:
        raise RecordError(f"job {job_id}: restart_cnt {attempt - 1} out of range")
    try:
        started = dt.datetime.fromtimestamp(start, dt.UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError) as error:
        raise RecordError(f"job {job_id}: start_time {start} out of range for a time: {error}") from error
    nodes = job.get("nodes")
    hosts = expand_hostlist(nodes) if isinstance(nodes, str) else []
    detail = job.get("gres_detail") or []
    if not isinstance(detail, list) or not all(isinstance(d, str) for d in detail):
        raise RecordError(f"field 'gres_detail' is {json_type(detail)}, expected a list of strings")
    if detail and len(detail) != len(hosts):
        raise RecordError(f"job {job_id}: {len(detail)} gres_detail entries for {len(hosts)} nodes {nodes!r}")
    base = {"job_id": job_id, "attempt": attempt, "assigned_at": started}
    rows, unindexed = [], 0
    for host, entry in zip(hosts, detail, strict=False):
        gpus = gres_gpu_indices(entry)
        if gpus is None:
            continue
        gres_type, count, indices = gpus
        model, profile = canonical_gpu_model(gres_type) if gres_type else (None, None)
        if profile:  # IDX counts MIG devices, not GPUs
            unindexed += count
            fraction = min(int(profile.split("g.", 1)[0]) / 7, 1.0)
            rows.extend({**base, "host": host, "gpu": None, "gpu_instance_profile": profile, "gpu_model": model,
                         "fraction": fraction} for _ in range(count))
        else:
            rows.extend({**base, "host": host, "gpu": index, "gpu_instance_profile": None, "gpu_model": model,
                         "fraction": 1.0} for index in indices)
    return rows, unindexed


def parse_squeue_job_gpus(data: bytes | str, source_file: str) -> ParseResult:
    """`squeue --json` → raw.job_gpus rows with GPU indices for the RUNNING jobs.

    A record is one running job (jobs in other states are no placement: counted in `notes`);
    attempt = restart_cnt + 1, which is how sacct --duplicates numbers the job's rows;
    assigned_at = the attempt's start_time. A job whose fields cannot be read is quarantined with
    its 1-based index in `jobs`.
    """
    rejects, rows, notes = Rejects(), Columns(_PLACEMENT_SCHEMA), []
    try:
        doc = load_json_document(decode_document(data))
        if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
            raise RecordError("document is not squeue --json output: expected an object with a 'jobs' list")
    except RecordError as error:
        raw = data[:2000] if isinstance(data, str) else data[:2000].decode("utf-8", "replace")
        syntax = isinstance(error, DocumentError)
        rejects.add(error.line_number if syntax else None, str(error), raw, "parse" if syntax else "validate")
        return _placement_result(rows, rejects, 1, 0, notes, source_file)
    read = loaded = not_running = unindexed = 0
    for index, job in enumerate(doc["jobs"], start=1):
        try:
            if not isinstance(job, dict):
                raise RecordError(f"job is {json_type(job)}, expected a JSON object")
            running = job_state(job) == "RUNNING"
        except RecordError as error:
            read += 1
            rejects.add(index, f"jobs[{index - 1}]: {error}", compact_json(job)[:2000])
            continue
        if not running:
            not_running += 1
            continue
        read += 1
        try:
            job_rows, job_unindexed = _placements(job)
        except RecordError as error:
            rejects.add(index, f"jobs[{index - 1}]: {error}", compact_json(job)[:2000])
            continue
        for row in job_rows:
            rows.append(**row)
        unindexed += job_unindexed
        loaded += 1
    if not_running:
        notes.append(f"{not_running} jobs not running: no placement")
    if unindexed:
        notes.append(f"{unindexed} MIG-typed GPUs have no GPU index (their gres IDX counts MIG devices)")
    return _placement_result(rows, rejects, read, loaded, notes, source_file)


def _placement_result(rows: Columns, rejects: Rejects, read: int, loaded: int, notes: list[str],
                      source_file: str) -> ParseResult:
    frame = rows.frame().with_columns(source=pl.lit("slurm"), source_file=pl.lit(source_file))
    return ParseResult(
        tables={"job_gpus": contract("job_gpus").conform(frame)},
        quarantine=rejects.frame(SQUEUE_SOURCE, source_file),
        records_read=read,
        records_loaded=loaded,
        notes=notes,
    )
