"""MLflow: runs linked to gpupool jobs, their logged artifacts and registered model versions, into
the landing zone as `gpupool.artifact/v1` JSON lines (ingest source `mlflow` → raw.artifact_events).

The link is a run tag, `gpupool.job_id` (the `job_tag` of the `mlflow:` section), set by the
training code to the job id of the scheduler that ran it (docs/connectors.md: Slurm's
SLURM_JOB_ID, the allocator's GPUPOOL_JOB_ID, a Kueue pod's job); `gpupool.attempt` (optional)
names the attempt. Runs without the tag are not gpupool's: they are counted, never landed.

One pull (`pull`) reads, through MLflow's REST API 2.0 with `requests`:
- `experiments/search` (every experiment, unless `experiment_ids` is set), then `runs/search`
  with a filter on the tag (and a second search, counting only, for the runs without it);
- `artifacts/list` per linked run, recursively;
- `model-versions/search` by `run_id` per linked run.
`to_records` maps the answers to records (pure); the pull writes them to
`landing/mlflow/<day>/pull-<UTC time>.jsonl` through a hidden temp file and a rename, after every
request succeeded: a failed pull (HTTP error, an answer that is not JSON) lands nothing.
Every request keeps the pull's bounds (`pipelines/connectors/bounded.py`: a deadline for the whole
pull, a page cap, a repeated-token check, body size, JSON depth); an answer that breaks them or is not
the documented shape (an experiment without an id, an item that is not an object, a folder listing
itself) fails the pull. What a tenant controls is judged per run: a job id tag over MAX_JOB_ID_CHARS
or with control characters, an artifact tree over MAX_ARTIFACT_DEPTH / MAX_ARTIFACT_FILES, lands one
`refused` line for the run (ingest quarantines it with the reason); an impossible time is unknown.

What a record says (docs/connectors.md, "MLflow"):
- kind `checkpoint`: each entry directly under `checkpoints/` (a file, or a directory whose files'
  sizes are summed), its step parsed from the name (`step-1000.pt`, `step_1000/`, `1000.ckpt`);
  kind `artifact`: every other logged file; kind `model_version`: each registered version of the run.
- status `failed` for what cannot be used: an empty checkpoint (0 bytes), the artifacts of a run
  that ended FAILED or KILLED, a version whose registration failed; `ok` otherwise. A failed run's
  checkpoints stay `ok`: they are what its restart resumes from. Versions still registering are
  left for a later pull.
- occurred_at (`ts`): MLflow records no time for an artifact, so a running run's artifacts take
  the pull's time (first seen, precise to the pull interval) and an ended run's take its end time
  when that is earlier; a model version takes its creation time. Each pull is a full snapshot of
  the linked runs: readers keep one row per event id (`artifact_id`), the earliest.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import requests
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.connectors.bounded import (
    MAX_BODY_MIB,
    MAX_PAGES,
    PULL_DEADLINE_S,
    Budget,
    NotJson,
    SourceAnswerError,
    loads_bounded,
)
from pipelines.connectors.http import HttpStatusError, RetryPolicy, describe, new_session, with_retries

SECTION = "mlflow"
SOURCE = "mlflow"
ARTIFACT_SCHEMA = "gpupool.artifact/v1"
ENDED_BADLY = ("FAILED", "KILLED")
_STEP = re.compile(r"(?:^|[^a-z])(?:step|iter|it|global_step)[-_=]?(\d+)", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"^(\d+)(?:\.[A-Za-z0-9]+)*$")
# Tenant-controlled values (run tags, artifact names) a record may carry; a run whose job id tag
# breaks these is landed as one refused line that ingest quarantines with the reason.
MAX_JOB_ID_CHARS = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_ARTIFACT_DEPTH = 32  # folders inside folders of one run's artifacts
MAX_ARTIFACT_FILES = 100_000  # files of one run
REFUSED_KIND = "refused"
_LAST_MS = 253402300799999  # 9999-12-31T23:59:59.999Z: a later "timestamp" is no time at all


class MlflowConfig(BaseModel):
    """The `mlflow:` section of the connector configuration (gpupool.yml)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not a silent default

    tracking_uri: str = Field(description="the tracking server, e.g. http://mlflow.internal:5000")
    token: str | None = Field(None, description="Bearer token: write ${MLFLOW_TRACKING_TOKEN}, never the token")
    job_tag: str = Field("gpupool.job_id", min_length=1, description="the run tag holding the job id")
    attempt_tag: str = Field("gpupool.attempt", min_length=1, description="the run tag holding the attempt")
    checkpoint_dir: str = Field("checkpoints", min_length=1, description="artifacts under it are checkpoints")
    experiment_ids: list[str] = Field(default_factory=list, description="empty: every experiment")
    page_size: int = Field(1000, gt=0, le=50000)
    request_timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(2, ge=0, description="more attempts after a connection failure or a 5xx")
    deadline_s: float = Field(PULL_DEADLINE_S, gt=0, description="the whole pull, every request together")
    max_pages: int = Field(MAX_PAGES, ge=1, description="pages of one listing")
    max_body_mib: float = Field(MAX_BODY_MIB, gt=0, description="one answer's body")

    @field_validator("tracking_uri")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL (the REST API of `mlflow server`)")
        return value.rstrip("/")


class MlflowError(SourceAnswerError):
    """MLflow answered with an error, or with something that is not the answer the API documents:
    `endpoint` (e.g. "MLflow runs/search") and what was wrong."""


@dataclass(frozen=True)
class Answers:
    """What one pull read: the runs found by the tag, each run's artifact files and model versions."""

    runs: list[dict]
    artifacts: dict[str, list[dict]]  # run_id -> files {path, file_size} (directories expanded)
    versions: dict[str, list[dict]]  # run_id -> ModelVersion objects
    untagged_runs: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # run_id -> why its artifacts cannot be listed


@dataclass(frozen=True)
class PullResult:
    path: Path | None  # the landed file; None when no linked run had anything to land
    records: int
    runs_linked: int
    runs_untagged: int
    notes: list[str] = field(default_factory=list)


def _ms_to_rfc3339(ms: object) -> str | None:
    if isinstance(ms, str) and ms.isdigit() and len(ms) <= 20:
        ms = int(ms)
    if not isinstance(ms, int) or isinstance(ms, bool) or not 0 < ms <= _LAST_MS:
        return None  # missing, or no time a calendar has ("99999999999999999999"): unknown
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _int(value: object) -> int | None:
    """MLflow writes int64 fields as numbers or, through protobuf's JSON, as strings."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) <= 24:  # int64: 19 digits
        return int(value)
    return None


def training_step(name: str) -> int | None:
    """The step in a checkpoint's name: step-1000.pt, global_step_1000/, iter=5, 1000.ckpt; else None."""
    match = _STEP.search(name) or _BARE_NUMBER.match(name)
    if match is None:
        return None
    # past int64 (a tenant's name): 2**63 stands for it, so that ingest quarantines it as out of range,
    # and int() never meets a name of 5,000 digits (Python refuses over 4,300)
    return int(match.group(1)) if len(match.group(1)) <= 19 else 2**63


def _object(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def run_tags(run: Mapping) -> dict[str, str]:
    tags = _object(run.get("data")).get("tags")
    return {t["key"]: _text(t.get("value")) for t in (tags if isinstance(tags, list) else [])
            if isinstance(t, dict) and isinstance(t.get("key"), str)}


def run_id_of(run: Mapping) -> str | None:
    info = _object(run.get("info"))
    run_id = info.get("run_id") or info.get("run_uuid")
    return run_id if isinstance(run_id, str) and run_id else None


def _run_fields(run: Mapping, config: MlflowConfig, pulled_at: dt.datetime) -> dict:
    info = _object(run.get("info"))
    tags = run_tags(run)
    attempt = tags.get(config.attempt_tag, "").strip()
    ended = _int(info.get("end_time"))
    seen = int(pulled_at.timestamp() * 1000)
    return {
        "run_id": run_id_of(run),
        "job_id": tags.get(config.job_tag, "").strip(),
        "attempt": int(attempt) if attempt.isdigit() and 0 < len(attempt) < 10 and int(attempt) > 0 else None,
        "status": info.get("status"),
        "artifact_uri": _text(info.get("artifact_uri")).rstrip("/"),
        "reported_by": _text(info.get("user_id")) or None,
        "artifact_ts": _ms_to_rfc3339(min(ended, seen) if ended and ended > 0 else seen),
    }


def _job_id_problem(job_id: str, tag: str) -> str | None:
    """Why a job id tag cannot link a run (tenant-controlled: the training code sets it); None when it can."""
    if len(job_id) > MAX_JOB_ID_CHARS:
        return f"the {tag} tag is {len(job_id):,} characters long, more than {MAX_JOB_ID_CHARS}"
    if _CONTROL.search(job_id):
        return f"the {tag} tag holds a control character"
    return None


def refused_record(run: dict, reason: str) -> dict:
    """One line standing for a run whose records cannot be landed (the parser quarantines it with
    `reason`, counted against the run's user: see `pipelines/sources/mlflow.py`)."""
    return {"schema": ARTIFACT_SCHEMA, "artifact_id": f"{run['run_id']}:{REFUSED_KIND}", "kind": REFUSED_KIND,
            "refused": reason, "run_id": run["run_id"], "reported_by": run["reported_by"],
            "job_id": run["job_id"][:80]}


def _record(run: dict, kind: str, key: str, **values: object) -> dict:
    return {
        "schema": ARTIFACT_SCHEMA,
        "artifact_id": f"{run['run_id']}:{kind}:{key}",
        "job_id": run["job_id"],
        "attempt": run["attempt"],
        "kind": kind,
        "run_id": run["run_id"],
        "reported_by": run["reported_by"],
        "training_step": None,
        "model_name": None,
        "model_version": None,
        **values,
    }


def _artifact_records(run: dict, files: list[dict], checkpoint_dir: str) -> list[dict]:
    prefix = checkpoint_dir.strip("/") + "/"
    checkpoints: dict[str, int | None] = {}  # entry directly under checkpoints/ -> summed size
    records = []
    ended_badly = run["status"] in ENDED_BADLY
    for item in sorted(files, key=lambda f: f["path"]):
        path, size = item["path"], _int(item.get("file_size"))
        if path.startswith(prefix) and len(path) > len(prefix):
            entry = prefix + path[len(prefix):].split("/", 1)[0]
            known = checkpoints.get(entry, 0)
            checkpoints[entry] = None if size is None or known is None else known + size
            continue
        records.append(_record(run, "artifact", path, ts=run["artifact_ts"],
                               status="failed" if ended_badly else "ok",
                               location=f"{run['artifact_uri']}/{path}", size_bytes=size))
    for entry, size in checkpoints.items():
        records.append(_record(run, "checkpoint", entry, ts=run["artifact_ts"],
                               status="failed" if size == 0 else "ok",
                               location=f"{run['artifact_uri']}/{entry}", size_bytes=size,
                               training_step=training_step(entry.rsplit("/", 1)[1])))
    return records


def _version_records(run: dict, versions: list[dict]) -> list[dict]:
    records = []
    for v in versions:
        status = v.get("status", "READY")
        if status == "PENDING_REGISTRATION":
            continue
        name, version = v.get("name"), str(v.get("version", ""))
        records.append(_record(
            run, "model_version", f"{name}/{version}",
            ts=_ms_to_rfc3339(v.get("creation_timestamp")) or run["artifact_ts"],
            status="failed" if status == "FAILED_REGISTRATION" else "ok",
            location=v.get("source") or None, size_bytes=None, model_name=name, model_version=version))
    return records


def to_records(answers: Answers, config: MlflowConfig, pulled_at: dt.datetime) -> list[dict]:
    """The `gpupool.artifact/v1` records of a pull (module doc), sorted by artifact_id. Runs whose
    tag is empty are skipped (the search finds only tagged runs; an empty value links nothing)."""
    records: list[dict] = []
    for raw in answers.runs:
        run = _run_fields(raw, config, pulled_at)
        if not run["job_id"] or not run["run_id"]:
            continue
        problem = _job_id_problem(run["job_id"], config.job_tag) or answers.refused.get(run["run_id"])
        if problem:
            records.append(refused_record(run, problem))
            continue
        records += _artifact_records(run, answers.artifacts.get(run["run_id"], []), config.checkpoint_dir)
        records += _version_records(run, answers.versions.get(run["run_id"], []))
    return sorted(records, key=lambda r: r["artifact_id"])


class MlflowClient:
    """The few REST calls the connector makes, inside one pull's bounds (`Budget`: deadline, page cap,
    body size, JSON depth); every answer checked to be a JSON object."""

    def __init__(self, config: MlflowConfig, session: requests.Session | None = None):
        self.config = config
        self.session = session or new_session(1)
        if config.token:
            self.session.headers["Authorization"] = f"Bearer {config.token}"
        self.policy = RetryPolicy(retries=config.retries)
        self.budget = Budget(deadline_s=config.deadline_s, max_pages=config.max_pages,
                             max_body_bytes=int(config.max_body_mib * 2**20))

    def call(self, method: str, endpoint: str, body: dict) -> dict:
        """One request's JSON object; every failure (bounds included) is an MlflowError."""
        try:
            return self._call(method, endpoint, body)
        except MlflowError:
            raise
        except SourceAnswerError as err:
            raise MlflowError(err.endpoint, err.what) from None

    def _call(self, method: str, endpoint: str, body: dict) -> dict:
        url = f"{self.config.tracking_uri}/api/2.0/mlflow/{endpoint}"
        where = f"MLflow {endpoint}"

        def attempt() -> requests.Response:
            kwargs = {"json": body} if method == "POST" else {"params": body}
            response = self.session.request(method, url, stream=True, **kwargs,
                                            timeout=self.budget.timeout(where, self.config.request_timeout_s))
            if response.status_code != 200:
                said = self.budget.read(response, where)[:300].decode("utf-8", "replace")
                raise HttpStatusError(url, response.status_code, response.reason, said)
            return response

        try:
            response, _ = with_retries(attempt, self.policy, deadline=self.budget.deadline)
        except HttpStatusError as err:
            raise MlflowError(where, str(err)) from None
        except requests.RequestException as err:
            self.budget.left(where)  # a timeout because the pull's time ran out says so
            raise MlflowError(where, f"{url}: {describe(err)} (is the tracking server up?)") from None
        data = self.budget.read(response, where)
        try:
            doc = loads_bounded(data, where, self.budget.max_depth)
        except SourceAnswerError as err:
            hint = ": is tracking_uri the MLflow server?" if isinstance(err, NotJson) else ""
            raise MlflowError(where, f"{url} answered 200, but {err.what}{hint}") from None
        if not isinstance(doc, dict):
            raise MlflowError(where, f"{url} answered a JSON {type(doc).__name__}, expected an object")
        return doc

    def _pages(self, method: str, endpoint: str, body: dict, items: str, token_key: str) -> Iterable[dict]:
        """Every item of a paged listing; each must be a JSON object (else the server is not MLflow)."""
        token = None
        cursor = self.budget.cursor(f"MLflow {endpoint}")
        while True:
            doc = self.call(method, endpoint, {**body, token_key: token} if token else body)
            found = doc.get(items, [])
            if not isinstance(found, list):
                raise MlflowError(f"MLflow {endpoint}", f"'{items}' is not a list")
            for n, item in enumerate(found):
                if not isinstance(item, dict):
                    raise MlflowError(f"MLflow {endpoint}",
                                      f"'{items}' item {n} is a JSON {type(item).__name__}, expected an object")
            yield from found
            token = doc.get("next_page_token")
            if not cursor.advance(token):
                return

    def experiment_ids(self) -> list[str]:
        if self.config.experiment_ids:
            return self.config.experiment_ids
        body = {"max_results": min(self.config.page_size, 1000), "view_type": "ALL"}
        ids = []
        for n, experiment in enumerate(self._pages("POST", "experiments/search", body, "experiments", "page_token")):
            found = experiment.get("experiment_id")
            if not isinstance(found, str | int) or isinstance(found, bool) or not str(found):
                raise MlflowError("MLflow experiments/search", f"experiment {n} has no experiment_id")
            ids.append(str(found))
        return ids

    def search_runs(self, experiment_ids: list[str], filter_string: str) -> list[dict]:
        if not experiment_ids:
            return []
        body = {"experiment_ids": experiment_ids, "filter": filter_string,
                "max_results": self.config.page_size, "run_view_type": "ALL"}
        return list(self._pages("POST", "runs/search", body, "runs", "page_token"))

    def artifact_files(self, run_id: str) -> list[dict]:
        """Every file of the run (directories listed, breadth first). A listing that answers an entry
        outside the folder asked for, or one already listed, is a server fault (MlflowError); a tree
        deeper than MAX_ARTIFACT_DEPTH or over MAX_ARTIFACT_FILES files is the run's (ArtifactsRefused)."""
        where = "MLflow artifacts/list"
        files: list[dict] = []
        folders, seen = [("", 0)], {""}
        while folders:
            path, depth = folders.pop(0)
            body = {"run_id": run_id, **({"path": path} if path else {})}
            for item in self._pages("GET", "artifacts/list", body, "files", "page_token"):
                name = item.get("path")
                if not isinstance(name, str) or not name or (path and not name.startswith(path + "/")):
                    raise MlflowError(where, f"run {run_id}: listing {path or 'the root'!r} answered the entry "
                                      f"{str(name)[:100]!r}, which is not inside it")
                if name in seen:
                    raise MlflowError(where, f"run {run_id}: the folder {name[:100]!r} is listed twice "
                                      "(a folder that lists itself): the listing would never end")
                seen.add(name)
                if item.get("is_dir"):
                    if depth + 1 > MAX_ARTIFACT_DEPTH:
                        raise ArtifactsRefused(f"artifact folders nested more than {MAX_ARTIFACT_DEPTH} deep "
                                               f"({name[:100]!r})")
                    folders.append((name, depth + 1))
                else:
                    files.append(item)
                    if len(files) > MAX_ARTIFACT_FILES:
                        raise ArtifactsRefused(f"more than {MAX_ARTIFACT_FILES:,} artifact files")
        return files

    def model_versions(self, run_id: str) -> list[dict]:
        body = {"filter": f"run_id = '{run_id}'", "max_results": min(self.config.page_size, 10000)}
        return list(self._pages("GET", "model-versions/search", body, "model_versions", "page_token"))


class ArtifactsRefused(Exception):
    """One run's artifact tree is too large or too deep to land (the run's own doing: its records are
    refused with this reason, the other runs land)."""


def _tag_filter(tag: str, linked: bool) -> str:
    # backquotes: tag keys with dots (gpupool.job_id) are not plain identifiers in MLflow's filter grammar
    return f"tags.`{tag}` {'IS NOT NULL' if linked else 'IS NULL'}"


def read_answers(client: MlflowClient) -> Answers:
    """Every request of a pull (module doc); raises MlflowError on the first that fails."""
    experiments = client.experiment_ids()
    runs = client.search_runs(experiments, _tag_filter(client.config.job_tag, linked=True))
    untagged = len(client.search_runs(experiments, _tag_filter(client.config.job_tag, linked=False)))
    ids = [run_id for run_id in map(run_id_of, runs) if run_id]
    artifacts: dict[str, list[dict]] = {}
    refused: dict[str, str] = {}
    for run_id in ids:
        try:
            artifacts[run_id] = client.artifact_files(run_id)
        except ArtifactsRefused as why:
            refused[run_id] = str(why)
    return Answers(
        runs=runs,
        artifacts=artifacts,
        versions={run_id: client.model_versions(run_id) for run_id in ids if run_id not in refused},
        untagged_runs=untagged,
        refused=refused,
    )


def write_records(landing: Path, records: list[dict], pulled_at: dt.datetime) -> Path:
    """`landing/mlflow/<day>/pull-<time>.jsonl`, written whole: a hidden temp file, then a rename."""
    folder = landing / SOURCE / pulled_at.date().isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"pull-{pulled_at.strftime('%Y%m%dT%H%M%S%fZ')}.jsonl"
    temp = folder / f".{final.name}.{os.getpid()}.tmp"
    try:
        with temp.open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)
        temp.replace(final)
    finally:
        temp.unlink(missing_ok=True)
    return final


def pull(
    landing: Path,
    config: MlflowConfig,
    *,
    client: MlflowClient | None = None,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> PullResult:
    """Read MLflow and land one file of records (none when nothing is linked); MlflowError lands nothing."""
    started = time.monotonic()
    try:
        answers = read_answers(client or MlflowClient(config))
    except MlflowError:
        raise
    except SourceAnswerError as err:  # a bound of the pull (page cap, repeated token, deadline)
        raise MlflowError(err.endpoint, err.what) from None
    pulled_at = now()
    records = to_records(answers, config, pulled_at)
    notes = [f"{answers.untagged_runs} run(s) without the {config.job_tag} tag ignored",
             f"pulled in {time.monotonic() - started:.1f} s"]
    path = write_records(landing, records, pulled_at) if records else None
    return PullResult(path, len(records), len(answers.runs), answers.untagged_runs, notes)
