"""The built-in allocator's HTTP API as a connector: its logs by cursor, and the jobs running now.

`AllocatorClient.pull(landing, "events" | "audit" | "artifacts")` follows `next_cursor` pages of
/v1/events, /v1/audit or /v1/artifacts and appends the records, one JSON line each, to
`landing/allocator_events|allocator_audit|allocator_artifacts/<day of the record's ts>/api.jsonl`,
where the ingest sources of the same names read them (the simulator writes the same records to
events.jsonl / audit.jsonl / artifacts.jsonl instead; feed a warehouse from one or the other).

Exactly once, even across a crash: the cursor lives in `landing/.cursors/allocator_<source>.json`.
Before a page is appended, the state file records the size of every file the page will touch;
after the append it records the new cursor. A pull that finds sizes recorded (the previous one
died mid-page) cuts those files back to them and asks for the page again, so a line is never
written twice and never skipped.

`running_jobs()` lists RUNNING jobs with their placement (the API's job view).
"""
from __future__ import annotations

import datetime as dt
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import requests
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.config import section
from pipelines.connectors.bounded import PULL_DEADLINE_S, Budget, SourceAnswerError
from pipelines.connectors.http import HttpStatusError, RetryPolicy, new_session, with_retries
from pipelines.sources.jsonl import RecordError, parse_rfc3339

SECTION = "allocator"
LANDING = {"events": "allocator_events", "audit": "allocator_audit", "artifacts": "allocator_artifacts"}
FILE_NAME = "api.jsonl"
MAX_PAGE = 10000  # the API's largest `limit`


class AllocatorConfig(BaseModel):
    """The `allocator:` section of the connector configuration (gpupool.yml)."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(description="the allocator API's base URL, e.g. http://allocator.internal:8080")
    token: str = Field(description="a governance_bot bearer token: write ${GPUPOOL_ALLOCATOR_TOKEN}")
    timeout_s: float = Field(10.0, gt=0, description="per request")
    page_size: int = Field(1000, ge=1, le=MAX_PAGE, description="log records per page")
    retries: int = Field(2, ge=0, description="more attempts on connection failures and 5xx (reads only)")
    backoff_s: float = Field(0.5, gt=0)

    @field_validator("token")
    @classmethod
    def _token_set(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("empty: set the environment variable the file names (e.g. GPUPOOL_ALLOCATOR_TOKEN)")
        return value


def load_allocator_config(path: Path | None = None) -> AllocatorConfig | None:
    """The `allocator` section of the configuration file, or None when it has none."""
    return section(SECTION, AllocatorConfig, path)


class AllocatorAuthError(RuntimeError):
    """The API refused the token (401) or its role (403): a configuration error, not a transient one."""


def check_auth(response: requests.Response, url: str) -> None:
    if response.status_code in (401, 403):
        raise AllocatorAuthError(
            f"{url}: HTTP {response.status_code}: {response.text.strip()[:300]} (check allocator.token in "
            "gpupool.yml: it needs a governance_bot or admin token of the allocator)"
        )


@dataclass(frozen=True)
class PullReport:
    source: str
    records: int  # appended this pull
    pages: int
    cursor: int  # where the next pull starts
    days: tuple[str, ...]  # day folders written
    repaired: int  # files cut back after an interrupted pull


class AllocatorClient:
    """Reads the allocator API with a bearer token (GET only: safe to retry)."""

    def __init__(self, base_url: str, token: str, session: requests.Session | None = None,
                 timeout_s: float = 10.0, page_size: int = 1000, retry: RetryPolicy | None = None):
        self.base_url = base_url.rstrip("/")
        self.session = session or new_session(pool_maxsize=2)
        self.headers = {"Authorization": f"Bearer {token}"}
        self.timeout_s = timeout_s
        self.page_size = min(page_size, MAX_PAGE)
        self.retry = retry or RetryPolicy()

    @classmethod
    def from_config(cls, config: AllocatorConfig) -> AllocatorClient:
        return cls(config.url, config.token, timeout_s=config.timeout_s, page_size=config.page_size,
                   retry=RetryPolicy(retries=config.retries, backoff_s=config.backoff_s))

    def _get(self, path: str, params: dict, budget: Budget | None = None) -> dict:
        """One answer, a JSON object read within `budget` (the pull's; else one of its own): its
        deadline, body size and JSON depth (SourceAnswerError naming the URL)."""
        url = f"{self.base_url}{path}"
        budget = budget or Budget(deadline_s=PULL_DEADLINE_S)

        def attempt() -> dict:
            response = self.session.get(url, params=params, headers=self.headers, stream=True,
                                        timeout=budget.timeout(url, self.timeout_s))
            if response.status_code != 200:
                said = budget.read(response, url)[:500].decode("utf-8", "replace")
                if response.status_code in (401, 403):
                    check_auth(SimpleNamespace(status_code=response.status_code, text=said), url)
                raise HttpStatusError(url, response.status_code, response.reason, said)
            doc = budget.json(response, url)
            if not isinstance(doc, dict):
                raise SourceAnswerError(url, f"the answer is a JSON {type(doc).__name__}, expected an object")
            return doc

        return with_retries(attempt, self.retry, deadline=budget.deadline)[0]

    def running_jobs(self) -> list[dict]:
        """RUNNING jobs as the API shows them: job_id, attempt, tenant, queue, gpus (placement), spec, ..."""
        body = self._get("/v1/jobs", {"state": "RUNNING", "limit": MAX_PAGE})
        if body["count"] > len(body["jobs"]):
            raise RuntimeError(f"{body['count']} running jobs, more than one listing returns ({MAX_PAGE})")
        return body["jobs"]

    def queues(self) -> list[dict]:
        """Queues as the API shows them (GET /v1/queues): name, tenant, max_runtime_s, low_priority, ..."""
        return self._get("/v1/queues", {})["queues"]

    def pull(self, landing: Path, source: Literal["events", "audit", "artifacts"], max_pages: int | None = None) -> PullReport:
        """Append every record after the saved cursor to the landing zone; see the module docstring."""
        folder = LANDING[source]
        state_file = Path(landing) / ".cursors" / f"{folder}.json"
        state = _read_state(state_file)
        repaired = _repair(Path(landing), state)
        cursor, records, pages, days = state["cursor"], 0, 0, set()
        if repaired:
            _write_state(state_file, {"cursor": cursor})
        budget = Budget(deadline_s=PULL_DEADLINE_S)
        endpoint = f"{self.base_url}/v1/{source}"
        while (max_pages is None or pages < max_pages) and pages < budget.max_pages:
            page = self._get(f"/v1/{source}", {"cursor": cursor, "limit": self.page_size}, budget)
            found, following = page.get("records"), page.get("next_cursor")
            if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
                raise SourceAnswerError(endpoint, "'records' is not a list of objects")
            if not found:
                break
            if not isinstance(following, int) or isinstance(following, bool) or following <= cursor:
                # the same cursor again would append the same page forever
                raise SourceAnswerError(endpoint, f"next_cursor {str(following)[:40]!r} does not advance past "
                                        f"{cursor}: the page would be read again")
            by_file: dict[str, list[str]] = defaultdict(list)
            for record in page["records"]:
                day = _day_of(record)
                by_file[f"{folder}/{day}/{FILE_NAME}"].append(json.dumps(record, sort_keys=True) + "\n")
                days.add(day)
            sizes = {name: _size(Path(landing) / name) for name in by_file}
            _write_state(state_file, {"cursor": cursor, "sizes": sizes})
            for name, lines in sorted(by_file.items()):
                _append(Path(landing) / name, "".join(lines))
            cursor = following
            _write_state(state_file, {"cursor": cursor})
            records += len(page["records"])
            pages += 1
            if len(page["records"]) < self.page_size:
                break
        return PullReport(source, records, pages, cursor, tuple(sorted(days)), repaired)


def _day_of(record: dict) -> str:
    """The UTC day of the record's `ts`; a record without a readable one lands under today (and the
    ingest quarantines it with the reason)."""
    try:
        return parse_rfc3339(str(record.get("ts")), "ts").date().isoformat()
    except RecordError:
        return dt.datetime.now(dt.UTC).date().isoformat()


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())


def _read_state(path: Path) -> dict:
    if not path.exists():
        return {"cursor": 0}
    return json.loads(path.read_text())


def _write_state(path: Path, state: dict) -> None:
    """Atomically: a crash leaves the old state or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(state, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _repair(landing: Path, state: dict) -> int:
    """Cut the files of an interrupted page back to their sizes before it; how many were cut."""
    cut = 0
    for name, size in state.get("sizes", {}).items():
        path = landing / name
        if path.exists() and path.stat().st_size > size:
            with open(path, "r+b") as out:
                out.truncate(size)
            cut += 1
    return cut
