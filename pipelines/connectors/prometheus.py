"""Backfill DCGM history from Prometheus (`/api/v1/query_range`) into the landing zone.

For a window [start, end) the backfill
1. picks the step (`choose_step`, unless the config sets `step_s`): the scrape interval for
   windows up to a day, then at least 60 s (up to 7 days), 300 s (up to 31 days) and 900 s
   beyond, rounded up to a divisor of a day. query_range returns, at each step, the latest raw
   sample within the lookback (5 min): a step below the scrape interval would repeat samples,
   a longer one keeps one sample per step (a point sample of the gauge, not an average);
2. lists the metrics: the configured ones, or every `__name__` matching `metric_regex`
   (default `DCGM_FI_.*`) in the window (`/api/v1/label/__name__/values`);
3. per metric, counts its series in the window (`/api/v1/series`) and cuts time into blocks of
   at most `max_points_per_series` steps (Prometheus refuses more than 11,000 points per series)
   and at most `max_samples_per_request` points over all series. Block lengths divide a day, so
   blocks never straddle midnight and a block is always the same block: the window is widened
   to whole blocks, each block's response is written to
   `landing/prometheus/<day>/prom-<metric>-<start>-<end>-s<step>.json` (epoch seconds, end
   exclusive), and files of an earlier run that overlap the block are replaced. A re-run is
   idempotent; the `prometheus` ingest of a day reads every file of that day.
   If Prometheus still refuses (too many points or samples), the block is halved and retried.

Retries: connection failures and 5xx answers (Prometheus answers 503 on a query timeout), with
exponential backoff; 4xx are not retried. Authentication: a bearer token, or basic auth, taken
from the environment through the config file's `${VAR}` substitution. Label variants of
relabelled setups (`exported_pod`, `exported_namespace`, `exported_container`) are mapped by
the ingest's parser (`pipelines/sources/labels.py`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import requests
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipelines.clock import utc_naive
from pipelines.connectors.http import HttpStatusError, RetryPolicy, describe, new_session, with_retries

LANDING_SOURCE = "prometheus"
DAY_S = 86_400
PROMETHEUS_POINT_LIMIT = 11_000
DAY_DIVISORS = tuple(d for d in range(1, DAY_S + 1) if DAY_S % d == 0)
# (window up to, smallest step): longer windows get coarser steps so that a month of a large
# fleet stays a manageable number of samples
STEP_TIERS: tuple[tuple[dt.timedelta, int], ...] = (
    (dt.timedelta(days=1), 0),
    (dt.timedelta(days=7), 60),
    (dt.timedelta(days=31), 300),
)
LONG_WINDOW_STEP_S = 900
_FILE = re.compile(
    r"^prom-(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)-(?P<start>\d+)-(?P<end>\d+)-s(?P<step>\d+)\.json$"
)
_TOO_MANY = re.compile(
    r"exceeded maximum resolution|too many samples|would load too many samples", re.IGNORECASE
)
_EPOCH = dt.datetime(1970, 1, 1)


class PrometheusConfig(BaseModel):
    """The `prometheus` section of gpupool.yml (see gpupool.example.yml)."""

    model_config = ConfigDict(extra="forbid")

    url: str
    bearer_token: str | None = None
    username: str | None = None
    password: str | None = None
    tls_verify: bool | str = True  # or a CA bundle path
    metrics: list[str] = Field(default_factory=list)  # empty: every name matching metric_regex
    metric_regex: str = "DCGM_FI_.*"
    selector: str = ""  # extra label matchers, e.g. job="dcgm-exporter"
    scrape_interval_s: int = Field(15, ge=1)
    step_s: int | None = Field(None, ge=1)
    max_points_per_series: int = Field(10_000, ge=1, le=PROMETHEUS_POINT_LIMIT)
    max_samples_per_request: int = Field(1_000_000, ge=1)
    timeout_s: float = Field(60.0, gt=0)
    retries: int = Field(3, ge=0, le=10)
    backoff_s: float = Field(1.0, ge=0)
    # the governance tick's telemetry (`governance.telemetry: prometheus`): a completed minute is kept
    # once it is this old, so samples Prometheus stores late still count: a scrape's samples are stored
    # when it ends (at most its scrape_timeout after their time); raise it behind a remote write
    settle_s: int = Field(30, ge=0)
    # the time one tick may spend asking for minutes it does not hold (a restarted process fills the
    # whole lookback: tens of seconds at 10,000 GPUs, near Dagster's 60 s sensor timeout); past it the
    # tick judges nothing and the next one goes on from the minutes kept so far
    fill_budget_s: float = Field(30.0, gt=0)
    # the prometheus_pull sensor: every pull_interval_s it lands [the last pull's end, now - settle_s)
    # and requests the ingest of each day it touched; its first pull reaches pull_first_window_s back,
    # and one pull asks for at most pull_max_window_s (a sensor stopped for long catches up over pulls)
    pull_interval_s: int = Field(300, ge=15)
    pull_first_window_s: int = Field(3600, ge=60)
    pull_max_window_s: int = Field(6 * 3600, ge=60, le=DAY_S)

    @field_validator("bearer_token", "username", "password", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # `${PROMETHEUS_TOKEN:-}` in the file gives "" when the variable is unset
        return None if value == "" else value

    @model_validator(mode="after")
    def _consistent(self) -> PrometheusConfig:
        if self.bearer_token and (self.username or self.password):
            raise ValueError("give either bearer_token or username/password, not both")
        if bool(self.username) != bool(self.password):
            raise ValueError("basic auth needs both username and password")
        if self.step_s is not None and DAY_S % self.step_s:
            raise ValueError(f"step_s {self.step_s} must divide a day (86400 s) so that blocks align to days")
        return self

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(retries=self.retries, backoff_s=self.backoff_s, max_backoff_s=30.0)


class PrometheusError(RuntimeError):
    """Prometheus refused a request (the message names the endpoint and Prometheus' error)."""


class TooManyPoints(PrometheusError):
    pass


# -- planning (pure) ---------------------------------------------------------------------------
def epoch_s(moment: dt.datetime, up: bool = False) -> int:
    """Whole seconds since the epoch of a UTC time (naive = UTC), rounded down (or up)."""
    seconds = (utc_naive(moment) - _EPOCH) / dt.timedelta(seconds=1)
    return math.ceil(seconds) if up else math.floor(seconds)


def from_epoch(seconds: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(seconds=seconds)


def choose_step(window: dt.timedelta, scrape_interval_s: int) -> int:
    """The query step for a window: the scrape interval up to a day, coarser beyond (STEP_TIERS),
    rounded up to a divisor of a day."""
    floor = LONG_WINDOW_STEP_S
    for limit, tier_floor in STEP_TIERS:
        if window <= limit:
            floor = tier_floor
            break
    wanted = max(scrape_interval_s, floor, 1)
    return next((d for d in DAY_DIVISORS if d >= wanted), DAY_S)


def block_seconds(step_s: int, series: int, max_points: int, max_samples: int) -> int:
    """The longest block (a divisor of a day, a multiple of the step) whose query stays within
    max_points per series and max_samples over `series` series; at least one step."""
    if DAY_S % step_s:
        raise ValueError(f"step {step_s} s does not divide a day")
    points = max(1, min(max_points, max_samples // max(series, 1)))
    fitting = [d for d in DAY_DIVISORS if d % step_s == 0 and d <= points * step_s]
    return fitting[-1] if fitting else step_s


def plan_blocks(start: int, end: int, block_s: int) -> list[tuple[int, int]]:
    """Blocks [a, a + block_s) on the day-aligned grid covering [start, end) (epoch seconds)."""
    first = start // block_s * block_s
    return [(a, a + block_s) for a in range(first, end, block_s)]


def block_file(landing: Path, metric: str, start: int, end: int, step_s: int) -> Path:
    day = from_epoch(start).date().isoformat()
    return landing / LANDING_SOURCE / day / f"prom-{metric}-{start}-{end}-s{step_s}.json"


def overlapping_files(folder: Path, metric: str, start: int, end: int) -> list[Path]:
    """This metric's backfill files in `folder` whose [start, end) overlaps [start, end)."""
    if not folder.is_dir():
        return []
    out = []
    for path in folder.iterdir():
        match = _FILE.match(path.name)
        if match and match["metric"] == metric and int(match["start"]) < end and start < int(match["end"]):
            out.append(path)
    return sorted(out)


# -- the client --------------------------------------------------------------------------------
class PrometheusClient:
    """The few endpoints the backfill needs, with auth, timeouts and retries."""

    def __init__(self, config: PrometheusConfig, sleep: Callable[[float], None] | None = None):
        self.config = config
        self.base = config.url.rstrip("/")
        self.session = new_session(pool_maxsize=2, pool_connections=1)
        if config.bearer_token:
            self.session.headers["Authorization"] = f"Bearer {config.bearer_token}"
        elif config.username:
            self.session.auth = (config.username, config.password or "")
        self.session.verify = config.tls_verify
        self._sleep = sleep
        self.requests = 0

    def close(self) -> None:
        self.session.close()

    def get(self, path: str, params: dict[str, str | list[str]]) -> requests.Response:
        url = f"{self.base}{path}"

        def attempt() -> requests.Response:
            self.requests += 1
            response = self.session.get(url, params=params, timeout=self.config.timeout_s)
            if response.status_code >= 500:
                raise HttpStatusError(url, response.status_code, response.reason or "", response.text[:300])
            return response

        kwargs = {"sleep": self._sleep} if self._sleep else {}
        try:
            response, _ = with_retries(attempt, self.config.retry, **kwargs)
        except HttpStatusError as exc:
            raise PrometheusError(f"{exc} (after {self.config.retries + 1} attempts)") from None
        except requests.RequestException as exc:
            raise PrometheusError(f"{url}: {describe(exc)}") from exc
        if response.status_code != 200:
            message = _error_message(response)
            error = TooManyPoints if _TOO_MANY.search(message) else PrometheusError
            raise error(f"{url}: HTTP {response.status_code}: {message}")
        return response

    def metric_names(self, start: int, end: int) -> list[str]:
        matcher = f'__name__=~"{self.config.metric_regex}"'
        if self.config.selector:
            matcher += f",{self.config.selector}"
        params = {"match[]": "{" + matcher + "}", "start": str(start), "end": str(end)}
        return sorted(_data(self.get("/api/v1/label/__name__/values", params), "label values"))

    def series_count(self, query: str, start: int, end: int) -> int:
        params = {"match[]": query, "start": str(start), "end": str(end)}
        return len(_data(self.get("/api/v1/series", params), "series"))

    def query(self, query: str, at: float) -> bytes:
        """The raw response body of an instant query at `at` (epoch seconds, millisecond precision):
        a range-vector query answers a matrix of the raw samples, not step-aligned points."""
        return self.get("/api/v1/query", {"query": query, "time": f"{at:.3f}"}).content

    def query_range(self, query: str, start: int, end: int, step_s: int) -> bytes:
        """The raw response body (a matrix); start and end inclusive, as in Prometheus."""
        params = {"query": query, "start": str(start), "end": str(end), "step": str(step_s)}
        return self.get("/api/v1/query_range", params).content


def _error_message(response: requests.Response) -> str:
    try:
        body = response.json()
        return f"{body.get('errorType', 'error')}: {body.get('error', response.text[:300])}"
    except ValueError:
        return response.text[:300] or response.reason or "no message"


def _data(response: requests.Response, what: str) -> list:
    try:
        body = response.json()
    except ValueError:
        raise PrometheusError(
            f"{response.url}: {what} response is not JSON: {response.text[:200]!r}"
        ) from None
    if body.get("status") != "success" or not isinstance(body.get("data"), list):
        raise PrometheusError(f"{response.url}: unexpected {what} response: {response.text[:200]!r}")
    return body["data"]


def metric_query(metric: str, selector: str) -> str:
    return f"{metric}{{{selector}}}" if selector else metric


# -- the backfill ------------------------------------------------------------------------------
@dataclass
class BackfillReport:
    start: dt.datetime
    end: dt.datetime
    step_s: int
    metrics: list[str] = field(default_factory=list)
    requests: int = 0
    files_written: int = 0
    files_replaced: int = 0
    bytes_written: int = 0
    empty_blocks: int = 0
    days: list[dt.date] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"prometheus backfill {self.start:%Y-%m-%d %H:%M:%S} .. {self.end:%Y-%m-%d %H:%M:%S} step {self.step_s} s: "
            f"{len(self.metrics)} metrics, {self.requests} requests, {self.files_written} files "
            f"({self.bytes_written / 1e6:.1f} MB, {self.files_replaced} replaced, {self.empty_blocks} empty blocks) "
            f"over {len(self.days)} days"
        )


def pull_window(last_end: dt.datetime | None, now: dt.datetime, config: PrometheusConfig
                ) -> tuple[dt.datetime, dt.datetime] | None:
    """The window the pull sensor lands at `now` after a pull that ended at `last_end` (None: none yet):
    [last_end, now - settle_s) cut to whole seconds, at most pull_max_window_s long from its start (the
    rest is the next pull's); the first reaches pull_first_window_s back. None when nothing is new.
    The backfill widens a window to whole blocks, so samples Prometheus stored after the last pull
    inside a block it touched are fetched again with it."""
    end = (now - dt.timedelta(seconds=config.settle_s)).replace(microsecond=0)
    start = last_end if last_end is not None else end - dt.timedelta(seconds=config.pull_first_window_s)
    end = min(end, start + dt.timedelta(seconds=config.pull_max_window_s))
    return (start, end) if end > start else None


def backfill_prometheus(
    landing: Path,
    start: dt.datetime,
    end: dt.datetime,
    config: PrometheusConfig,
    *,
    now: dt.datetime | None = None,
    log: Callable[[str], None] | None = None,
    client: PrometheusClient | None = None,
) -> BackfillReport:
    """Fetch DCGM series for [start, end) into <landing>/prometheus/<day>/ (see the module's
    docstring); `report.days` are the days touched, for the caller to ingest. Times are UTC
    (naive = UTC)."""
    begin, finish = epoch_s(start), epoch_s(end, up=True)
    if finish <= begin:
        raise ValueError(f"backfill window {start} .. {end}: end must be after start")
    step = config.step_s or choose_step(dt.timedelta(seconds=finish - begin), config.scrape_interval_s)
    horizon = epoch_s(now or dt.datetime.now(dt.UTC)) // step * step
    report = BackfillReport(from_epoch(begin), from_epoch(finish), step)
    own_client = client is None
    client = client or PrometheusClient(config)
    say = log or (lambda _: None)
    try:
        report.metrics = list(config.metrics) or client.metric_names(begin, finish)
        say(f"{len(report.metrics)} metrics, step {step} s")
        days: set[dt.date] = set()
        for metric in report.metrics:
            query = metric_query(metric, config.selector)
            series = client.series_count(query, begin, finish)
            if series == 0:
                continue
            block = block_seconds(step, series, config.max_points_per_series, config.max_samples_per_request)
            for a, b in plan_blocks(begin, finish, block):
                last = min(b - step, horizon)
                if last < a:
                    continue
                parts = _fetch_block(client, query, a, last, step)
                if not parts:
                    report.empty_blocks += 1
                    continue
                written, replaced = _replace_block(Path(landing), metric, a, b, step, parts)
                report.files_written += len(written)
                report.files_replaced += replaced
                report.bytes_written += sum(len(body) for _, _, body in parts)
                days.add(from_epoch(a).date())
            say(f"{metric}: {series} series, blocks of {block} s")
        report.days = sorted(days)
    finally:
        report.requests = client.requests
        if own_client:
            client.close()
    return report


def _fetch_block(
    client: PrometheusClient, query: str, first: int, last: int, step: int
) -> list[tuple[int, int, bytes]]:
    """(first, last, body) of each non-empty response covering the steps first..last; halves
    the range while Prometheus answers that it is too many points or samples."""
    try:
        body = client.query_range(query, first, last, step)
    except TooManyPoints:
        if last == first:
            raise
        middle = first + (last - first) // step // 2 * step
        return _fetch_block(client, query, first, middle, step) + _fetch_block(
            client, query, middle + step, last, step
        )
    return [] if _no_series(body) else [(first, last, body)]


def _no_series(body: bytes) -> bool:
    """An answer without series is a few dozen bytes; anything long holds series."""
    return len(body) < 4096 and not json.loads(body).get("data", {}).get("result")


def _replace_block(
    landing: Path,
    metric: str,
    block_start: int,
    block_end: int,
    step: int,
    parts: Sequence[tuple[int, int, bytes]],
) -> tuple[list[Path], int]:
    """Write the block's parts (temp files, then renamed), then remove the earlier files of this
    metric that overlap the block. Returns the files written and how many were replaced."""
    targets = [block_file(landing, metric, first, last + step, step) for first, last, _ in parts]
    folder = targets[0].parent
    folder.mkdir(parents=True, exist_ok=True)
    temps = []
    try:
        for path, (_, _, body) in zip(targets, parts, strict=True):
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_bytes(body)
            temps.append(tmp)
        old = overlapping_files(folder, metric, block_start, block_end)
        for path in old:
            if path not in targets:
                path.unlink()
        for tmp, path in zip(temps, targets, strict=True):
            os.replace(tmp, path)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    return targets, len(old)
