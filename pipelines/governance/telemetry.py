"""Where the governance tick reads its per-GPU minutes (`governance.telemetry` in gpupool.yml):

- `dcgm_scrape` (the default): the scrape rounds the `dcgm_scrape` sensor lands
  (`pipelines.governance.live.recent_gpu_minutes`);
- `prometheus`: the Prometheus the pool already runs (the `prometheus:` section), so that such a
  pool needs no second scraper.

Both give `live.gpu_minutes` of the samples in [now - lookback, now): the same columns and, for the
same samples, the same values; the minute rules (activity from GR engine active, else GPU util,
framebuffer maximum, MIG instances' own series) are live.py's `minute_partials` and
`minutes_of_partials`, applied here to the samples Prometheus answers.

Prometheus is asked for raw samples, not step-interpolated points: an instant query of a range
vector, `{__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED",<selector>}[<ms>ms]`
evaluated at the span's end less a millisecond, whose samples are then cut to the span exactly
(Prometheus 2 closes a range at both ends, 3 opens it on the left). The answer is read by
`pipelines.sources.prometheus.matrix_samples`, the backfill parser's rows and reasons by a faster
path: the same label mapping as the scrape's (host, gpu, MIG instance), each label set mapped once
per process, and NaN or infinite values, DCGM sentinels and series without a host or gpu
quarantined and counted by reason, never loaded.

Every minute's tick asks only for what it does not hold. A completed minute older than
`prometheus.settle_s` is summarised once into live.py's per-GPU-minute partials and kept in memory
(one `PrometheusMinutes` per configuration and process: Dagster builds resources afresh for every
sensor tick), together with the partials of its samples from the second at which that tick cut its
window's oldest minute on: when the minute is itself the window's cut oldest minute, a tick later
(ticks fall at about the same second), those are its samples inside the window, unless the cut has
moved past one of its samples since; only then is that part asked for again. The unsettled recent
minutes are asked for afresh at every tick, so a steady tick makes one request: the newly settled
minute and the unsettled ones. What is asked for is cut at minute boundaries into requests of at
most `max_samples_per_request` (and LIVE_SAMPLES_PER_REQUEST) samples by the last answers' sample
rate (one minute per request until an answer has told it), and halved again when Prometheus answers
that a query loads too many samples.

A read spends at most `prometheus.fill_budget_s` asking: the first tick of a process fills the
whole lookback (tens of seconds at 10,000 GPUs), and past the budget it stops, keeps what it got
(oldest minutes first) and raises `TelemetryUnavailable`; the next tick goes on from there. A telemetry
read that fails (Prometheus down, refusing, answering something that is not a query answer, the
lookback not yet filled) raises `TelemetryUnavailable`: the tick then evaluates nothing and plans nothing, so no job
looks idle because its telemetry could not be read.
"""
from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import polars as pl

from pipelines.connectors.prometheus import PrometheusClient, PrometheusConfig, PrometheusError, TooManyPoints
from pipelines.governance.live import (
    ACTIVITY_METRICS,
    SAMPLE_SCHEMA,
    minute_partials,
    minutes_of_partials,
    recent_gpu_minutes,
)
from pipelines.sources.prometheus import AnswerRejected, MappedSeries, matrix_samples

TELEMETRY_SOURCES = ("dcgm_scrape", "prometheus")
MINUTE = dt.timedelta(minutes=1)
MILLISECOND = dt.timedelta(milliseconds=1)
KNOWN_SERIES_LIMIT = 1_000_000
# an answer's JSON read into Python objects takes some 600 bytes a sample: a tick's requests stay
# below ~150 MB each, whatever the backfill's max_samples_per_request allows
LIVE_SAMPLES_PER_REQUEST = 250_000


class TelemetryUnavailable(RuntimeError):
    """The tick's telemetry could not be read (the message says where and why)."""


@dataclass
class TelemetryRead:
    """The per-GPU minutes of one read (`live.gpu_minutes`'s columns) and the samples left out by reason."""

    minutes: pl.DataFrame
    skipped: Counter = field(default_factory=Counter)


class Telemetry(Protocol):
    """Where the tick's per-GPU minutes come from."""

    source: str

    def read(self, now: dt.datetime, lookback: dt.timedelta) -> TelemetryRead: ...


class ScrapeRounds:
    """The rounds the `dcgm_scrape` sensor lands in `landing` (the scrape counts what it quarantines)."""

    source = "dcgm_scrape"

    def __init__(self, landing: Path):
        self.landing = Path(landing)

    def read(self, now: dt.datetime, lookback: dt.timedelta) -> TelemetryRead:
        return TelemetryRead(recent_gpu_minutes(self.landing, now, lookback))


def _floor(t: dt.datetime) -> dt.datetime:
    return t.replace(second=0, microsecond=0)


def _epoch_ms(t: dt.datetime) -> int:
    return round((t - dt.datetime(1970, 1, 1)) / MILLISECOND)


@dataclass(frozen=True)
class _KeptMinute:
    """A settled minute's partials, and those of its samples from `split` on: the window's cut oldest
    piece when a later tick's window starts at `split` or anywhere between the same two samples."""

    partials: pl.DataFrame
    tail: pl.DataFrame
    before: dt.datetime | None  # the minute's last sample before split and its first from split on (None: none)
    after: dt.datetime | None

    def from_cut(self, since: dt.datetime) -> pl.DataFrame | None:
        """The partials of the minute's samples at or after `since`, when they are the tail's samples:
        no sample lies between `since` and the split; None otherwise."""
        if (self.before is None or self.before < since) and (self.after is None or since <= self.after):
            return self.tail
        return None


@dataclass(frozen=True)
class _Piece:
    """A part of the window inside one minute: [start, end), kept once fetched or asked for every tick."""

    start: dt.datetime
    end: dt.datetime
    kept: bool


class PrometheusMinutes:
    """The tick's per-GPU minutes from Prometheus (see the module docstring), keeping the settled
    minutes' partials between reads."""

    source = "prometheus"

    def __init__(self, config: PrometheusConfig, client: PrometheusClient | None = None):
        self.config = config
        self.key = _config_key(config)
        self.client = client or PrometheusClient(config)
        self.kept: dict[dt.datetime, _KeptMinute] = {}  # settled minute -> its partials
        self.samples_per_minute: float | None = None  # the fleet's, from the answers so far
        self.known: MappedSeries = {}  # label set -> its series, mapped once
        self._lock = threading.Lock()  # two sensor ticks of one process share the kept minutes

    def close(self) -> None:
        self.client.close()

    def query(self, span: dt.timedelta) -> str:
        matchers = ['__name__=~"' + "|".join(ACTIVITY_METRICS) + '"']
        if self.config.selector:
            matchers.append(self.config.selector)
        return "{" + ",".join(matchers) + "}" + f"[{round(span / MILLISECOND)}ms]"

    def read(self, now: dt.datetime, lookback: dt.timedelta) -> TelemetryRead:
        """`live.gpu_minutes` of Prometheus' samples in [now - lookback, now); TelemetryUnavailable
        when Prometheus cannot be read."""
        with self._lock:
            try:
                return self._read(now, lookback)
            except PrometheusError as exc:
                raise TelemetryUnavailable(f"Prometheus at {self.config.url}: {exc}") from exc

    def _read(self, now: dt.datetime, lookback: dt.timedelta) -> TelemetryRead:
        since = now - lookback
        settled = _floor(now - dt.timedelta(seconds=self.config.settle_s))
        pieces = _pieces(since, now, settled)
        # the window's oldest minute stays while it is cut: its tail may be the cut piece
        self.kept = {m: k for m, k in self.kept.items() if _floor(since) <= m and m + MINUTE <= settled}
        parts = [self.kept[p.start].partials for p in pieces if p.kept and p.start in self.kept]
        wanted = [p for p in pieces if not (p.kept and p.start in self.kept)]
        head = self.kept.get(_floor(since)) if not pieces[0].kept else None
        cut = head.from_cut(since) if head is not None else None
        if cut is not None:  # the cut oldest minute from the part kept of it: nothing asked for it
            parts.append(cut)
            wanted.remove(pieces[0])
        elif len(wanted) > 1 and not wanted[0].kept:  # the window's cut oldest minute last: a fill cut short
            wanted.append(wanted.pop(0))              # by the budget has then kept minutes, not this one
        split = since - _floor(since)  # where this tick cut its oldest minute: new minutes are split there
        skipped: Counter = Counter()
        began = time.monotonic()
        while wanted:
            chunk = self._next_chunk(wanted)
            del wanted[:len(chunk)]
            samples = self._fetch(chunk, skipped)
            parts.append(_partials(samples))
            self.kept.update(_kept_minutes(samples, parts[-1], [p.start for p in chunk if p.kept], split))
            # past the budget while minutes to keep are still missing (the fill of a restarted process); the
            # unsettled tail and the cut oldest minute, asked for at every tick, always go
            if any(p.kept for p in wanted) and time.monotonic() - began > self.config.fill_budget_s:
                held = sum(1 for p in pieces if p.kept and p.start in self.kept)
                raise TelemetryUnavailable(
                    f"Prometheus at {self.config.url}: still filling the lookback ({held} of {len(pieces)} minutes "
                    f"held after {self.config.fill_budget_s:g} s, prometheus.fill_budget_s); nothing is judged "
                    "until it is whole, and the next tick goes on from here")
        partials = pl.concat(parts) if parts else _partials(pl.DataFrame(schema=SAMPLE_SCHEMA))
        # every (series, minute) is in one part only: each minute of the window is one piece
        return TelemetryRead(minutes_of_partials(partials.lazy()), skipped)

    def _next_chunk(self, pieces: list[_Piece]) -> list[_Piece]:
        """The first run of adjacent pieces spanning at most the minutes one request may hold by the
        sample rate of the answers so far (one minute until an answer has told it), at least one piece."""
        most = MINUTE
        if self.samples_per_minute:
            most = MINUTE * (self._limit() / self.samples_per_minute)
        chunk = pieces[:1]
        for piece in pieces[1:]:
            if piece.start != chunk[-1].end or piece.end - chunk[0].start > most:
                break
            chunk.append(piece)
        return chunk

    def _limit(self) -> int:
        return min(self.config.max_samples_per_request, LIVE_SAMPLES_PER_REQUEST)

    def _fetch(self, chunk: list[_Piece], skipped: Counter) -> pl.DataFrame:
        """The samples in the chunk's span; halved while Prometheus answers that it is too many samples."""
        start, end = chunk[0].start, chunk[-1].end
        try:
            body = self.client.query(self.query(end - start), _epoch_ms(end - MILLISECOND) / 1000)
        except TooManyPoints:
            if len(chunk) == 1:
                raise
            middle = len(chunk) // 2
            self.samples_per_minute = max(self.samples_per_minute or 0.0, self._limit() / middle)
            return pl.concat([self._fetch(chunk[:middle], skipped), self._fetch(chunk[middle:], skipped)])
        if len(self.known) > KNOWN_SERIES_LIMIT:  # label sets of series long gone (pods come and go)
            self.known.clear()
        samples = _samples(body, f"prometheus:{self.config.url} {start:%Y-%m-%dT%H:%M:%S.%f}", self.known, skipped)
        minutes = (end - start) / MINUTE
        if minutes >= 1 or self.samples_per_minute is None:  # a part of a minute may hold more rounds than its share
            self.samples_per_minute = samples.height / max(minutes, 1 / 60)
        return samples.filter(pl.col("sampled_at") >= start, pl.col("sampled_at") < end)


def _pieces(since: dt.datetime, now: dt.datetime, settled: dt.datetime) -> list[_Piece]:
    """[since, now) cut at minute boundaries; a whole minute ending by `settled` is kept."""
    out, start = [], since
    while start < now:
        end = min(_floor(start) + MINUTE, now)
        out.append(_Piece(start, end, start == _floor(start) and end == start + MINUTE and end <= settled))
        start = end
    return out


def _partials(samples: pl.DataFrame) -> pl.DataFrame:
    return minute_partials(samples).collect().with_columns(pl.col("host").cast(pl.Categorical))


def _kept_minutes(samples: pl.DataFrame, partials: pl.DataFrame, minutes: list[dt.datetime],
                  split: dt.timedelta) -> dict[dt.datetime, _KeptMinute]:
    """The minutes to keep of a chunk's samples and partials, each with the partials of its samples
    from `split` past the minute on (and the two samples around that point)."""
    if not minutes:
        return {}
    minute = pl.col("sampled_at").dt.truncate("1m")
    ours = samples.filter(minute.is_in(minutes))
    late = pl.col("sampled_at") >= minute + split
    tails = _partials(ours.filter(late))
    bounds = {m: (before, after) for m, before, after in ours.group_by(minute.alias("minute_at")).agg(
        before=pl.col("sampled_at").filter(~late).max(), after=pl.col("sampled_at").filter(late).min()).iter_rows()}
    return {
        m: _KeptMinute(partials.filter(pl.col("minute_at") == m), tails.filter(pl.col("minute_at") == m),
                       *bounds.get(m, (None, None)))
        for m in minutes
    }


def _samples(body: bytes, source_file: str, known: MappedSeries, skipped: Counter) -> pl.DataFrame:
    """An answer's activity samples (SAMPLE_SCHEMA); what the parser quarantined is counted in
    `skipped` by reason. PrometheusError when the answer is no query answer at all."""
    try:
        samples, quarantined = matrix_samples(body, source_file, known)
    except AnswerRejected as exc:
        raise PrometheusError(f"unreadable answer: {exc}") from None
    skipped.update({f"samples left out: {reason}": n for reason, n in quarantined.items()})
    return samples.cast(SAMPLE_SCHEMA).filter(pl.col("metric").is_in(ACTIVITY_METRICS))


def _config_key(config: PrometheusConfig) -> str:
    return json.dumps(config.model_dump(mode="json"), sort_keys=True)


_SHARED: dict[str, PrometheusMinutes] = {}
_SHARED_LOCK = threading.Lock()


def shared_prometheus_minutes(config: PrometheusConfig) -> PrometheusMinutes:
    """One PrometheusMinutes per process (the kept minutes outlive a sensor tick); a new configuration
    starts afresh."""
    key = _config_key(config)
    with _SHARED_LOCK:
        reader = _SHARED.get("prometheus")
        if reader is None or reader.key != key:
            if reader is not None:
                reader.close()
            reader = _SHARED["prometheus"] = PrometheusMinutes(config)
        return reader
