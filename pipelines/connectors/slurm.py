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
- `sacctmgr -P list transactions WithAssoc Start=<day> End=<next day>` (accounting kind
  `transactions`; the admin audit: account, user, association and QOS changes) →
  landing/slurm_sacctmgr/<day>/transactions.txt, for `pipelines.sources.slurm_sacctmgr`.
  `land_transactions` lands the day so far (the `slurm_admin_audit` sensor runs it periodically).
  slurmrestd has no equivalent: its slurmdb API (v0.0.38 in Slurm 22.05) serves the current
  accounts, associations, users and QOS, not the transactions that changed them.
Landing the same day again replaces its files (a later fetch knows more: jobs that ended since).
`LiveAccounting` asks Slurm (subprocess / slurmrestd), `OfflineAccounting` reads recorded outputs
in a folder; the Dagster resource that picks one is `pipelines.resources.slurm.SlurmAccounting`.

GPU indices. sacct never carries them: its TRES say how many GPUs, not which. Two ways exist:
1. `squeue --json` (slurmctld's view, running jobs only) lists `gres_detail` per node, e.g.
   `gpu:2(IDX:0-1)`: `snapshot_running_jobs` lands it (landing/slurm_squeue/<day>/) and
   `pipelines.sources.slurm_squeue.parse_squeue_job_gpus` turns it into raw.job_gpus rows with `gpu` set. Only jobs running at
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
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import requests
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.config import section
from pipelines.connectors.bounded import Budget, NotJson, SourceAnswerError, loads_bounded
from pipelines.connectors.http import HttpStatusError, RetryPolicy, new_session, with_retries
from pipelines.sources.slurm_sacct import NOTHING_FOUND
from pipelines.sources.slurm_squeue import SOURCE as SQUEUE_SOURCE

SECTION = "slurm"
TEXT_SOURCE = "slurm_sacct"
JSON_SOURCE = "slurm_sacct_json"
TRANSACTIONS_SOURCE = "slurm_sacctmgr"
TRANSACTIONS_FILE = "transactions.txt"

# what pipelines.sources.slurm_sacct.parse_sacct_parsable2 reads (JobID, State, Submit, Start, End required)
SACCT_FIELDS = (
    "JobID", "Cluster", "Account", "Partition", "User", "JobName", "State", "Reason", "Submit", "Eligible",
    "Start", "End", "Timelimit", "Priority", "ReqTRES", "AllocTRES", "NodeList", "ExitCode",
)
OFFLINE_FILES = {"sacct.txt": TEXT_SOURCE, "sacct.json": JSON_SOURCE, "slurmrestd.json": JSON_SOURCE,
                 TRANSACTIONS_FILE: TRANSACTIONS_SOURCE}
MAX_RESTD_BODY_MIB = 1024.0  # a day of a large cluster's accounting is hundreds of MB of JSON


class SlurmGovernance(BaseModel):
    """`slurm.governance` in gpupool.yml: which running jobs the live governance tick reads from
    slurmctld (`squeue --json`), and how each becomes a job of the policies (queue, template).
    Without this section the tick reads nothing from Slurm: the scope is explicit."""

    model_config = ConfigDict(extra="forbid")
    partitions: list[str] = Field(min_length=1, description="only running jobs of these partitions are read")
    queue_from: Literal["partition", "qos"] = Field(
        "partition", description="what the policies' queue (per-queue overrides) is: the partition or the QOS")
    template_comment_prefix: str | None = Field(
        "gpupool:", description="a job whose Comment holds <prefix><template> (sbatch --comment=gpupool:training) "
                                "has that template; the first such word wins")
    template_by_qos: dict[str, str] = Field(default_factory=dict, description="QOS -> template")
    template_by_partition: dict[str, str] = Field(default_factory=dict, description="partition -> template")
    default_template: str | None = Field(None, description="the template of a job nothing else names one for")


class SlurmConfig(BaseModel):
    """The `slurm:` section of the connector configuration (gpupool.yml)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not a silent default
    accounting: list[Literal["sacct", "sacct_json", "slurmrestd", "transactions"]] = Field(
        default_factory=lambda: ["sacct", "sacct_json"],
        description="what the live connector fetches per day: sacct text, sacct --json, slurmrestd, "
                    "sacctmgr transactions (the admin audit)",
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
    governance: SlurmGovernance | None = Field(
        None, description="running jobs the every-minute governance tick reads (none without this section)")

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


def transactions_command(config: SlurmConfig, day: dt.date) -> list[str]:
    """`sacctmgr -P list transactions` of one UTC day (so far, for today); WithAssoc names the
    associations a transaction touched (User|Account|Cluster columns), which Where gives as ids."""
    start, end = day_window(day)
    argv = [config.sacctmgr, "-P", "list", "transactions", "WithAssoc", f"Start={start}", f"End={end}"]
    if config.clusters:
        argv.append(f"Clusters={config.clusters}")
    return argv


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
            elif kind == "transactions":
                out.append(transactions_delivery(self.config, day, self.run))
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
        # the whole fetch, body included, within accounting_timeout_s (a dripping server cannot stretch
        # it), the body within the size cap; JSON depth bounded (connectors/bounded.py)
        budget = Budget(deadline_s=config.accounting_timeout_s, max_body_bytes=int(MAX_RESTD_BODY_MIB * 2**20))

        def attempt() -> tuple[int, str, bytes]:
            response = session.get(url, params=params, headers=headers, stream=True,
                                   timeout=budget.timeout(url, config.accounting_timeout_s))
            content = budget.read(response, url)
            # slurmrestd answers 500 with a JSON body for a query it cannot run: that is not retryable
            if response.status_code >= 400 and not _slurm_errors(content):
                raise HttpStatusError(url, response.status_code, response.reason,
                                      content[:300].decode("utf-8", "replace"))
            return response.status_code, response.reason, content

        try:
            (status, _reason, content), _ = with_retries(attempt, RetryPolicy(), deadline=budget.deadline)
            try:
                doc = loads_bounded(content, url, budget.max_depth)
            except NotJson:
                doc = None
        except SourceAnswerError as err:
            raise SlurmRestError(str(err)) from None
        finally:
            if self._session is None:
                session.close()
        if not isinstance(doc, dict):
            raise SlurmRestError(f"{url}: HTTP {status}, body is not a JSON object: "
                                 f"{content[:200].decode('utf-8', 'replace')!r}")
        errors = [e for e in _slurm_errors(content) if e.get("error_number") != NOTHING_FOUND]
        if errors or status != 200:
            detail = "; ".join(f"{e.get('error_number')} {e.get('description') or e.get('error')}" for e in errors)
            raise SlurmRestError(f"{url}: HTTP {status}: slurmrestd reported {detail or 'an error'}")
        if "jobs" not in doc:  # Nothing found: the day had no jobs
            doc = {**doc, "jobs": []}
            return json.dumps(doc, indent=2).encode()
        return content


def _slurm_errors(body: bytes) -> list[dict]:
    """The `errors` slurmrestd put in a JSON body; [] when there are none or it is not JSON."""
    try:
        doc = loads_bounded(body, "slurmrestd")
    except SourceAnswerError:
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


def land(landing: Path, day: dt.date, deliveries: Sequence[Delivery]) -> list[Path]:
    """Write each delivery to <landing>/<source>/<day>/<filename>, atomically (temp file, rename),
    so an ingest never reads half a file."""
    paths = []
    for delivery in deliveries:
        target = Path(landing) / delivery.source / day.isoformat() / delivery.filename
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{delivery.filename}.partial")
        temp.write_bytes(delivery.data)
        os.replace(temp, target)
        paths.append(target)
    return paths


# --- GPU indices of running jobs ------------------------------------------------------------


def squeue_command(config: SlurmConfig) -> list[str]:
    return [config.squeue, "--json", "--states=RUNNING"]


def snapshot_running_jobs(landing: Path, now: dt.datetime, config: SlurmConfig | None = None,
                          run: Runner = run_command) -> Path:
    """Land `squeue --json` (running jobs with their GPU indices) as
    <landing>/slurm_squeue/<day>/squeue-<HHMMSS>.json, for `pipelines.sources.slurm_squeue`."""
    config = config or SlurmConfig()
    data = checked(run(squeue_command(config), config.command_timeout_s))
    delivery = Delivery(SQUEUE_SOURCE, f"squeue-{now:%H%M%S}.json", data)
    return land(landing, now.date(), [delivery])[0]


# --- the admin audit ------------------------------------------------------------------------


def transactions_delivery(config: SlurmConfig, day: dt.date, run: Runner = run_command) -> Delivery:
    data = checked(run(transactions_command(config, day), config.command_timeout_s))
    return Delivery(TRANSACTIONS_SOURCE, TRANSACTIONS_FILE, data)


def land_transactions(landing: Path, day: dt.date, config: SlurmConfig | None = None,
                      run: Runner = run_command) -> Path:
    """Land the UTC day's sacctmgr transactions (so far, for today) as
    <landing>/slurm_sacctmgr/<day>/transactions.txt, replacing the day's file: each landing holds
    everything the one before held, and a landing after the day ends all of it."""
    return land(landing, day, [transactions_delivery(config or SlurmConfig(), day, run)])[0]
