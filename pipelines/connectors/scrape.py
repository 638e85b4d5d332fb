"""dcgm-exporter scraping: one round of every target -> a Parquet file in the landing zone.

A round fetches every target concurrently (one `requests.Session`, a thread pool of
`concurrency` workers, per-target connect and read timeouts, bounded retries), then parses all
bodies at once with the project's exposition parser (one parse of the concatenated bodies costs
about what one parse of a single body does; the line ranges say which target each quarantined
line came from), every line without its own timestamp taking the round's time. The loaded
samples are written as one Parquet file in the raw.dcgm_samples contract to
`landing/dcgm_parquet/<day>/scrape-<HHMMSS>-<round id>.parquet` (temp file, then rename), so the
`dcgm_parquet` ingest of that day reads every round.

A target that yields nothing usable is a gap, a row of the round's `gaps` with its error (the
caller appends them to `ops.scrape_gaps` with `pipelines.ingest.record_scrape_gaps`):
down (connection refused or reset), timeout (connect, read, or the body not complete within the
read timeout), http_status (anything but 200), truncated (Content-Length or chunked body cut
short), too_large, garbage (not text, or every sample line quarantined), empty (no sample line),
deadline (the round's time ran out before the target's turn), error (anything else). A target
whose body loads but has some lines quarantined is recorded as `partial`, with the count and the
first reason: its good samples are kept. No target's failure touches another's samples.

node_exporter targets (the `node_exporter` section) are scraped by the same code with another
`Feed`: each body is parsed on its own by the node_exporter parser (host: the target's host name,
else the exposition's node_uname_info nodename; time: node_time_seconds, else the round's time),
and the round lands in `landing/node_exporter_parquet/<day>/` in the raw.host_samples contract.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import polars as pl
import requests
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipelines.clock import utc_naive
from pipelines.config import ConfigError
from pipelines.connectors.http import (
    HttpStatusError,
    RetryPolicy,
    describe,
    is_read_timeout,
    new_session,
    with_retries,
)
from pipelines.contracts import GAPS_SCHEMA, contract
from pipelines.sources.dcgm_text import parse_dcgm_text
from pipelines.sources.node_exporter import parse_node_exporter_text
from pipelines.yamlfile import load_yaml

LANDING_SOURCE = "dcgm_parquet"
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
GAP_KINDS = (
    "down",
    "timeout",
    "http_status",
    "truncated",
    "too_large",
    "garbage",
    "empty",
    "partial",
    "deadline",
    "error",
)
_ERROR_TEXT_LIMIT = 500
_CHUNK = 64 * 1024


class DcgmConfig(BaseModel):
    """The `dcgm` section of gpupool.yml (see gpupool.example.yml)."""

    model_config = ConfigDict(extra="forbid")

    targets: list[str] = Field(default_factory=list)  # URLs, or host:port (http, /metrics)
    file_sd: list[str] = Field(default_factory=list)  # Prometheus file_sd files, re-read each round
    interval_s: float = Field(15.0, gt=0)
    connect_timeout_s: float = Field(2.0, gt=0)
    read_timeout_s: float = Field(5.0, gt=0)
    retries: int = Field(2, ge=0, le=10)
    backoff_s: float = Field(0.25, ge=0)
    concurrency: int = Field(64, ge=1, le=1024)
    max_body_mib: float = Field(64.0, gt=0)
    ingest_every_rounds: int = Field(40, ge=1)
    # sent as `Authorization: Bearer` to every target: the allocator's /nodes/<host>/metrics names the
    # jobs on a GPU (hpc_job) only to an admin or governance_bot token. Write ${GPUPOOL_ALLOCATOR_TOKEN}
    # (never the token); leave it out for real dcgm-exporters, which need none.
    bearer_token: str | None = Field(None, repr=False)

    @field_validator("bearer_token", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # `${GPUPOOL_ALLOCATOR_TOKEN:-}` in the file gives "" when the variable is unset
        return None if value == "" else value

    @model_validator(mode="after")
    def _attempt_fits_the_interval(self) -> DcgmConfig:
        if self.connect_timeout_s + self.read_timeout_s >= self.interval_s:
            raise ValueError(
                f"connect_timeout_s + read_timeout_s ({self.connect_timeout_s} + {self.read_timeout_s}) "
                f"must be below interval_s ({self.interval_s}): one attempt must fit in a round"
            )
        return self

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(retries=self.retries, backoff_s=self.backoff_s)


class NodeExporterConfig(DcgmConfig):
    """The `node_exporter` section of gpupool.yml: the same settings as `dcgm`, for node_exporter
    targets (port 9100); the `node_exporter_scrape` sensor lands them in node_exporter_parquet."""


# -- targets -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    url: str
    labels: tuple[tuple[str, str], ...] = ()


def target_url(address: str, scheme: str = "http", metrics_path: str = "/metrics") -> str:
    """A full URL as is; `host:port` becomes scheme://host:port/metrics_path, as Prometheus does."""
    if "://" in address:
        return address
    return f"{scheme}://{address}{metrics_path if metrics_path.startswith('/') else '/' + metrics_path}"


def load_file_sd(path: str | Path) -> list[Target]:
    """Targets of a Prometheus file_sd file: `[{"targets": ["host:9400"], "labels": {...}}]` in
    JSON (.json) or YAML (.yml/.yaml). The labels `__scheme__` and `__metrics_path__` set the
    URL, as in Prometheus; the others stay on the target."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: file_sd file not readable: {err.strerror or err}") from None
    try:
        doc = json.loads(text) if path.suffix == ".json" else load_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConfigError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {err}"
        ) from None
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise ConfigError(f"{path}: expected a list of target groups, found {type(doc).__name__}")
    out: list[Target] = []
    for i, group in enumerate(doc):
        where = f"{path}: group {i}"
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            raise ConfigError(f"{where}: expected an object with a 'targets' list")
        labels = group.get("labels") or {}
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise ConfigError(f"{where}: 'labels' must map strings to strings")
        for address in group["targets"]:
            if not isinstance(address, str) or not address:
                raise ConfigError(f"{where}: target {address!r} is not a host:port string")
            url = target_url(
                address, labels.get("__scheme__", "http"), labels.get("__metrics_path__", "/metrics")
            )
            kept = tuple(sorted((k, v) for k, v in labels.items() if not k.startswith("__")))
            out.append(Target(url, kept))
    return out


def targets_of(config: DcgmConfig) -> list[Target]:
    """The static targets, then every file_sd file's, each URL once (first wins)."""
    found = [Target(target_url(t)) for t in config.targets]
    for path in config.file_sd:
        found += load_file_sd(path)
    unique: dict[str, Target] = {}
    for target in found:
        unique.setdefault(target.url, target)
    return list(unique.values())


# -- fetching ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fetched:
    """One target's answer in a round: its body, or why there is none."""

    target: Target
    body: bytes | None
    content_type: str | None = None
    error_kind: str | None = None
    error: str | None = None
    duration_s: float = 0.0
    attempts: int = 0


class BodyTimeout(Exception):
    pass


class BodyTooLarge(Exception):
    pass


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, HttpStatusError):
        return "http_status"
    if isinstance(exc, BodyTooLarge):
        return "too_large"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "truncated"
    if isinstance(exc, BodyTimeout | requests.Timeout) or is_read_timeout(exc):
        return "timeout"
    if isinstance(exc, requests.exceptions.ContentDecodingError):
        return "garbage"
    if isinstance(exc, requests.ConnectionError):
        return "down"
    return "error"


def fetch_target(session: requests.Session, target: Target, config: DcgmConfig, deadline: float) -> Fetched:
    """GET one target; never raises. No attempt starts after `deadline` (time.monotonic())."""
    started = time.monotonic()
    if started >= deadline:
        return Fetched(
            target, None, error_kind="deadline", error="the round's time ran out before this target's turn"
        )
    limit = int(config.max_body_mib * 1024 * 1024)
    attempts = 0
    headers = {"Accept": ACCEPT}
    if config.bearer_token:
        headers["Authorization"] = f"Bearer {config.bearer_token}"

    def attempt() -> tuple[bytes, str | None]:
        nonlocal attempts
        attempts += 1
        t0 = time.monotonic()
        with session.get(
            target.url,
            timeout=(config.connect_timeout_s, config.read_timeout_s),
            stream=True,
            headers=headers,
        ) as response:
            if response.status_code != 200:
                head = next(response.iter_content(256), b"").decode("utf-8", errors="replace")
                raise HttpStatusError(target.url, response.status_code, response.reason or "", head)
            chunks, size = [], 0
            for chunk in response.iter_content(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(f"body larger than {config.max_body_mib} MiB")
                if time.monotonic() - t0 > config.read_timeout_s:
                    raise BodyTimeout(
                        f"body not complete within {config.read_timeout_s} s ({size} bytes read)"
                    )
                chunks.append(chunk)
            return b"".join(chunks), response.headers.get("Content-Type")

    try:
        (body, content_type), _ = with_retries(attempt, config.retry, deadline=deadline)
    except Exception as exc:  # noqa: BLE001 - every failure of a target becomes its gap
        return Fetched(
            target,
            None,
            error_kind=error_kind(exc),
            error=describe(exc) if not isinstance(exc, HttpStatusError) else str(exc)[:_ERROR_TEXT_LIMIT],
            duration_s=time.monotonic() - started,
            attempts=attempts,
        )
    return Fetched(target, body, content_type, duration_s=time.monotonic() - started, attempts=attempts)


def read_folder(
    folder: str | Path, patterns: Sequence[str] = ("*.prom", "*.txt", "*.metrics")
) -> list[Fetched]:
    """The offline 'targets': each exposition file of a folder, read as if scraped."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: exposition folder not found")
    files = sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})
    out = []
    for path in files:
        started = time.monotonic()
        try:
            body = path.read_bytes()
        except OSError as err:
            out.append(Fetched(Target(path.as_uri()), None, error_kind="error", error=str(err), attempts=1))
            continue
        out.append(
            Fetched(
                Target(path.as_uri()), body, "text/plain", duration_s=time.monotonic() - started, attempts=1
            )
        )
    return out


# -- what a round parses into -------------------------------------------------------------------
# The round's bodies (with their targets), its time and id -> (samples, each body's sample-line count,
# each body's (quarantined lines, first bad line's number within the body, its reason) or None).
ParseBodies = Callable[
    [Sequence[tuple["Target", bytes]], dt.datetime, str],
    tuple[pl.DataFrame, list[int], list[tuple[int, int, str] | None]],
]


@dataclass(frozen=True)
class Feed:
    """One kind of exporter: how its bodies parse and where a round of them lands."""

    name: str
    landing_source: str  # ingest source reading the rounds' Parquet: landing/<landing_source>/<day>/
    table: str  # the raw contract of the rounds' samples
    parse: ParseBodies


# -- a round -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScrapeRound:
    """What one round yielded: the samples of every target that answered, and the gaps."""

    round_id: str
    round_at: dt.datetime  # UTC, naive: every line without a timestamp gets this time
    targets: int
    samples: pl.DataFrame = field(repr=False)  # the Feed's contract (raw.dcgm_samples, raw.host_samples)
    gaps: pl.DataFrame = field(repr=False)  # GAPS_SCHEMA, one row per target with a problem
    records_read: int = 0
    records_quarantined: int = 0
    bytes_read: int = 0
    fetch_s: float = 0.0
    parse_s: float = 0.0
    landing_source: str = LANDING_SOURCE  # the Feed's: where write_round lands the samples
    table: str = "dcgm_samples"  # the Feed's contract

    @property
    def targets_ok(self) -> int:
        """Targets whose every sample line loaded."""
        return self.targets - self.gaps.height

    def gap_counts(self) -> dict[str, int]:
        return dict(self.gaps.group_by("error_kind").len().sort("error_kind").iter_rows())

    def summary(self) -> str:
        gaps = ", ".join(f"{k} {n}" for k, n in self.gap_counts().items()) or "none"
        return (
            f"round {self.round_id} at {self.round_at:%Y-%m-%d %H:%M:%S}: {self.targets_ok}/{self.targets} "
            f"targets ok, {self.samples.height} samples, {self.records_quarantined} lines quarantined, "
            f"gaps: {gaps} (fetch {self.fetch_s:.2f} s, parse {self.parse_s:.2f} s)"
        )


def new_round_id() -> str:
    return uuid.uuid4().hex[:12]


def _is_text(body: bytes, content_type: str | None) -> str | None:
    """Why a body is not exposition text, or None."""
    media = (content_type or "text/plain").split(";", 1)[0].strip().lower()
    if not (media.startswith("text/") or media == "application/openmetrics-text"):
        return f"content type {media!r} is not a text exposition"
    if b"\x00" in body:
        return "body is not text (NUL bytes)"
    return None


def assemble_round(
    fetched: Sequence[Fetched],
    round_at: dt.datetime,
    round_id: str | None = None,
    fetch_s: float = 0.0,
    feed: Feed | None = None,
) -> ScrapeRound:
    """Parse the round's bodies in one go and decide each target's gap, if any."""
    round_id = round_id or new_round_id()
    round_at = utc_naive(round_at)
    feed = feed or DCGM
    gaps: list[dict] = []

    def gap(f: Fetched, kind: str, error: str) -> None:
        gaps.append(
            {
                "target": f.target.url,
                "round_at": round_at,
                "round_id": round_id,
                "error_kind": kind,
                "error": error[:_ERROR_TEXT_LIMIT],
                "duration_s": f.duration_s,
                "attempts": f.attempts,
            }
        )

    texts: list[tuple[Fetched, bytes]] = []
    for f in fetched:
        if f.body is None:
            gap(f, f.error_kind or "error", f.error or "no body")
        elif (why := _is_text(f.body, f.content_type)) is not None:
            gap(f, "garbage", why)
        else:
            body = f.body.removeprefix(b"\xef\xbb\xbf")
            texts.append((f, body if body.endswith(b"\n") or not body else body + b"\n"))
    started = time.perf_counter()
    samples, records, quarantined = feed.parse([(f.target, b) for f, b in texts], round_at, round_id)
    for (f, _), n_records, bad in zip(texts, records, quarantined, strict=True):
        if n_records == 0:
            gap(f, "empty", "no sample lines in the body")
        elif bad is not None and bad[0] == n_records:
            gap(f, "garbage", f"all sample lines quarantined ({n_records}); first: line {bad[1]}: {bad[2]}")
        elif bad is not None:
            gap(
                f,
                "partial",
                f"{bad[0]} of {n_records} sample lines quarantined; first: line {bad[1]}: {bad[2]}",
            )
    return ScrapeRound(
        round_id=round_id,
        round_at=round_at,
        targets=len(fetched),
        samples=samples,
        gaps=pl.DataFrame(gaps, schema=GAPS_SCHEMA),
        records_read=int(sum(records)),
        records_quarantined=int(sum(b[0] for b in quarantined if b is not None)),
        bytes_read=sum(len(f.body) for f in fetched if f.body is not None),
        fetch_s=fetch_s,
        parse_s=time.perf_counter() - started,
        landing_source=feed.landing_source,
        table=feed.table,
    )


def _parse_dcgm_bodies(
    texts: Sequence[tuple[Target, bytes]], round_at: dt.datetime, round_id: str
) -> tuple[pl.DataFrame, list[int], list[tuple[int, int, str] | None]]:
    """Samples of all bodies, and per body: its sample lines, and (quarantined lines, the first
    bad line's number within the body, its reason) or None."""
    bodies = [body for _, body in texts]
    if not bodies:
        return contract("dcgm_samples").empty_frame(), [], []
    data = b"".join(bodies)
    result = parse_dcgm_text(data, f"scrape:{round_id}", round_at)
    line_counts = np.array([b.count(b"\n") for b in bodies], dtype=np.int64)
    first_line = np.concatenate([[1], 1 + np.cumsum(line_counts)[:-1]])

    def body_of(line_numbers: pl.Series) -> np.ndarray:
        return np.searchsorted(first_line, line_numbers.to_numpy(), side="right") - 1

    # A sample line is what the parser counts as a record: not blank, not a # comment.
    stripped = pl.col("line").str.strip_suffix("\r").str.strip_chars_start(" \t")
    record_lines = (
        pl.Series("line", [data.decode("utf-8", errors="replace")])
        .str.split("\n")
        .explode()
        .head(int(line_counts.sum()))
        .to_frame()
        .with_row_index("line_number", offset=1)
        .filter((stripped != "") & ~stripped.str.starts_with("#"))
        .get_column("line_number")
    )
    records = np.bincount(body_of(record_lines), minlength=len(bodies))
    bad = result.quarantine.filter(pl.col("line_number").is_not_null()).sort("line_number")
    bad_body = body_of(bad.get_column("line_number"))
    bad_count = np.bincount(bad_body, minlength=len(bodies))
    problems: list[tuple[int, int, str] | None] = [None] * len(bodies)
    bodies_hit, first_row = np.unique(bad_body, return_index=True)
    for body, row in zip(bodies_hit.tolist(), first_row.tolist(), strict=True):  # per target, not per line
        line = int(bad.item(row, "line_number"))
        problems[body] = (int(bad_count[body]), line - int(first_line[body]) + 1, bad.item(row, "reason"))
    return result.tables["dcgm_samples"], records.tolist(), problems


def target_host(target: Target) -> str | None:
    """The node a target names: its URL's host name, or None for an IP address or localhost (then the
    exposition's node_uname_info nodename names it)."""
    host = urlsplit(target.url).hostname
    if not host or host == "localhost":
        return None
    try:
        ip_address(host)
    except ValueError:
        return host
    return None


def _parse_node_bodies(
    texts: Sequence[tuple[Target, bytes]], round_at: dt.datetime, round_id: str
) -> tuple[pl.DataFrame, list[int], list[tuple[int, int, str] | None]]:
    """Each body parsed on its own: its host and node_time_seconds are its own (the bodies are small,
    ~60 KB, so one parse per target costs little)."""
    frames, records, problems = [contract("host_samples").empty_frame()], [], []
    for target, body in texts:
        result = parse_node_exporter_text(body, target.url, host=target_host(target), scraped_at=round_at)
        frames.append(result.tables["host_samples"])
        records.append(result.records_read)
        bad = result.quarantine.sort("line_number", nulls_last=True)
        problems.append(
            (bad.height, bad.item(0, "line_number"), bad.item(0, "reason")) if bad.height else None
        )
    return pl.concat(frames), records, problems


DCGM = Feed("dcgm", LANDING_SOURCE, "dcgm_samples", _parse_dcgm_bodies)
NODE_EXPORTER = Feed("node_exporter", "node_exporter_parquet", "host_samples", _parse_node_bodies)


# -- the scraper -------------------------------------------------------------------------------
class Scraper:
    """Scrapes the configured targets; keeps one Session and thread pool across rounds so that
    connections to the exporters are reused (dcgm-exporter keeps them alive)."""

    def __init__(self, config: DcgmConfig, feed: Feed | None = None):
        self.config = config
        self.feed = feed or DCGM
        self._executor = ThreadPoolExecutor(config.concurrency, thread_name_prefix=f"{self.feed.name}-scrape")
        self._session: requests.Session | None = None
        self._hosts = 0
        self._lock = threading.Lock()

    def session_for(self, targets: Iterable[Target]) -> requests.Session:
        """The Session, re-made when the targets span more host:ports than it keeps pools for
        (urllib3 keeps one pool per host:port, each of up to `concurrency` connections)."""
        hosts = len({urlsplit(t.url)[:2] for t in targets})
        with self._lock:
            if self._session is None or hosts > self._hosts:
                if self._session is not None:
                    self._session.close()
                self._hosts = max(hosts, 16)
                self._session = new_session(self.config.concurrency, self._hosts)
            return self._session

    def scrape_round(
        self, round_at: dt.datetime | None = None, targets: Sequence[Target] | None = None
    ) -> ScrapeRound:
        round_at = utc_naive(round_at)
        targets = list(targets if targets is not None else targets_of(self.config))
        session = self.session_for(targets)
        started = time.monotonic()
        deadline = (
            started + self.config.interval_s - self.config.connect_timeout_s - self.config.read_timeout_s
        )
        fetched = list(self._executor.map(lambda t: fetch_target(session, t, self.config, deadline), targets))
        return assemble_round(fetched, round_at, fetch_s=time.monotonic() - started, feed=self.feed)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if self._session is not None:
            self._session.close()


_SCRAPERS: dict[str, Scraper] = {}
_SCRAPERS_LOCK = threading.Lock()


def shared_scraper(config: DcgmConfig, feed: Feed | None = None) -> Scraper:
    """One Scraper per feed and configuration per process: Dagster builds resources afresh for every
    sensor tick, while the connections should outlive the tick. A feed's new configuration closes
    its old Scraper."""
    feed = feed or DCGM
    key = config.model_dump_json()
    with _SCRAPERS_LOCK:
        scraper = _SCRAPERS.get(feed.name)
        if scraper is None or scraper.config.model_dump_json() != key:
            if scraper is not None:
                scraper.close()
            scraper = _SCRAPERS[feed.name] = Scraper(config, feed)
        return scraper


# -- writing -----------------------------------------------------------------------------------
def round_path(landing: Path, scrape: ScrapeRound) -> Path:
    day = scrape.round_at.date().isoformat()
    return Path(landing) / scrape.landing_source / day / f"scrape-{scrape.round_at:%H%M%S}-{scrape.round_id}.parquet"


def write_round(landing: Path, scrape: ScrapeRound) -> Path | None:
    """The round's samples as one Parquet file under `landing` (None when it has none); the file
    appears whole or not at all (temp file, rename). Its gaps are the caller's to record."""
    path = None
    if scrape.samples.height:
        path = round_path(landing, scrape)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            contract(scrape.table).conform(scrape.samples).write_parquet(tmp, compression="zstd")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path
