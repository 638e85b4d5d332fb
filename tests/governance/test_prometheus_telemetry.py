"""The tick's telemetry from Prometheus (pipelines/governance/telemetry.py) against recorded-format
answers served on 127.0.0.1: the same minutes as the scrape rounds of the same samples, only the
minutes not held asked for, bounded requests, and hostile answers counted or refused, never a reclaim.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
from urllib.parse import parse_qs, urlsplit

import dagster as dg
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipelines.assets.reclaim import idle_reclaim_sensor
from pipelines.config import ConfigError
from pipelines.connectors.prometheus import PrometheusConfig
from pipelines.governance.factory import build_telemetry
from pipelines.governance.live import SAMPLE_SCHEMA, SCRAPE_SOURCE, recent_gpu_minutes
from pipelines.governance.outbox import Outbox
from pipelines.governance.running import AllocatorWork
from pipelines.governance.telemetry import PrometheusMinutes, ScrapeRounds, TelemetryUnavailable
from pipelines.governance.tick import governance_tick
from pipelines.resources.governance import GovernanceResource
from pipelines.resources.warehouse import WarehouseResource
from tests.connectors.conftest import LoopbackServer, free_port, send
from tests.governance.conftest import Recorder
from tests.governance.test_running_work import ALLOCATOR_JOB, Allocator, idle_catalog

GR, UTIL, FB = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"
START = dt.datetime(2026, 12, 3, 7, 0)
EPOCH = dt.datetime(1970, 1, 1)
TOO_MANY = {"status": "error", "errorType": "execution",
            "error": "query processing would load too many samples into memory in query execution"}


def samples(minutes: int = 40) -> pl.DataFrame:
    """Four samples a minute, at odd milliseconds: a100-01 GPU 0 busy then idle (GR and FB), GPU 1
    with GPU util only (once above 100 %), and MIG instances 1 and 2 of GPU 2 (instance 2 idle)."""
    rows = []
    for m in range(minutes):
        for k in range(4):
            t = START + dt.timedelta(minutes=m, seconds=15 * k + 7, milliseconds=250)
            rows += [
                (t, "a100-01", 0, None, GR, 0.8 - 0.1 * k if m < 15 else 0.01 * k),
                (t, "a100-01", 0, None, FB, 1000.0 + 100 * k + m),
                (t, "a100-01", 1, None, UTIL, 120.0 if (m, k) == (3, 1) else float(10 * ((m + k) % 7))),
                (t, "a100-01", 2, 1, GR, 0.5 + 0.01 * k),
                (t, "a100-01", 2, 2, GR, 0.0),
                (t, "a100-01", 2, 2, FB, 512.0),
            ]
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


def land_rounds(landing, frame: pl.DataFrame) -> None:
    """The samples as the dcgm_scrape sensor lands them: one file per 15 s round."""
    folder = landing / SCRAPE_SOURCE / START.date().isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    for (t,), rows in frame.group_by("sampled_at"):
        rows.write_parquet(folder / f"scrape-{t:%H%M%S}-r{t:%M%S}.parquet")


def labels(host: str, gpu: int, instance: int | None, metric: str) -> dict:
    """dcgm-exporter's labels as Prometheus stores them."""
    out = {"__name__": metric, "gpu": str(gpu), "UUID": f"GPU-{host}-{gpu}", "Hostname": host,
           "modelName": "NVIDIA A100-SXM4-80GB", "job": "dcgm-exporter", "instance": f"{host}:9400"}
    if instance is not None:
        out |= {"GPU_I_ID": str(instance), "GPU_I_PROFILE": "3g.40gb"}
    return out


def matrix(frame: pl.DataFrame, extra: list[dict] | None = None) -> bytes:
    """A /api/v1/query answer (a matrix of raw samples) holding `frame`'s samples."""
    result = []
    for (host, gpu, instance, metric), rows in frame.sort("sampled_at").group_by(
            "host", "gpu", "gpu_instance_id", "metric", maintain_order=True):
        values = [[round((t - EPOCH) / dt.timedelta(milliseconds=1)) / 1000, repr(v)]
                  for t, v in rows.select("sampled_at", "value").iter_rows()]
        result.append({"metric": labels(host, gpu, instance, metric), "values": values})
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result + (extra or [])}}).encode()


@dataclasses.dataclass
class FakePrometheus:
    """Answers `{__name__=~"..."}[<ms>ms]` at `time` with the samples in (time - range, time], as
    Prometheus 3 does ([time - range, time] with `closed`, as Prometheus 2 does); `too_many`: answers
    422 for ranges longer than this many minutes."""

    frame: pl.DataFrame
    too_many: float = math.inf
    closed: bool = False
    extra: list[dict] = dataclasses.field(default_factory=list)
    asked: list[tuple[dt.datetime, dt.timedelta]] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.server = LoopbackServer(self.handle)

    def handle(self, request) -> None:
        url = urlsplit(request.path)
        params = parse_qs(url.query)
        assert url.path == "/api/v1/query", url.path
        selector = re.fullmatch(r'\{__name__=~"([A-Z_|]+)"(?:,job="dcgm-exporter")?\}\[(\d+)ms\]', params["query"][0])
        assert selector is not None, params["query"]
        at = EPOCH + dt.timedelta(seconds=float(params["time"][0]))
        span = dt.timedelta(milliseconds=int(selector[2]))
        self.asked.append((at, span))
        if span / dt.timedelta(minutes=1) > self.too_many:
            send(request, 422, json.dumps(TOO_MANY).encode(), "application/json")
            return
        after = pl.col("sampled_at") >= at - span if self.closed else pl.col("sampled_at") > at - span
        chosen = self.frame.filter(after, pl.col("sampled_at") <= at,
                                   pl.col("metric").is_in(selector[1].split("|")))
        send(request, 200, matrix(chosen, self.extra), "application/json")

    def config(self, **options) -> PrometheusConfig:
        return PrometheusConfig(url=self.server.url, retries=0, **options)


@pytest.fixture
def prometheus():
    started: list[FakePrometheus] = []

    def start(frame: pl.DataFrame, **options) -> FakePrometheus:
        started.append(FakePrometheus(frame, **options))
        return started[-1]

    yield start
    for fake in started:
        fake.server.stop()


def ordered(minutes: pl.DataFrame) -> pl.DataFrame:
    return minutes.with_columns(pl.col("host").cast(pl.String)).sort("host", "gpu", "gpu_instance_id", "minute_at")


LOOKBACK = dt.timedelta(minutes=20)
TICKS = [START + dt.timedelta(minutes=25, seconds=31, milliseconds=500) + dt.timedelta(minutes=i) for i in range(6)]


def test_prometheus_minutes_equal_the_rounds_minutes_tick_after_tick(tmp_path, prometheus):
    frame = samples()
    land_rounds(tmp_path, frame)
    fake = prometheus(frame)
    reader = PrometheusMinutes(fake.config(selector='job="dcgm-exporter"'))
    for now in TICKS:
        got = reader.read(now, LOOKBACK)
        assert not got.skipped
        expected = recent_gpu_minutes(tmp_path, now, LOOKBACK)
        assert expected.height > 60 and expected.columns == got.minutes.columns
        assert_frame_equal(ordered(got.minutes), ordered(expected))
    # the MIG instances read apart: instance 2 idle, instance 1 busy; the last minute so far holds
    # its first two samples only (0.50 and 0.51)
    last = ordered(got.minutes).filter(pl.col("gpu") == 2, pl.col("minute_at") == pl.col("minute_at").max())
    assert last.select("gpu_instance_id", "activity").rows() == [(1, pytest.approx(0.505)), (2, 0.0)]


def test_samples_on_the_minute_count_in_their_own_minute_whichever_end_prometheus_closes(tmp_path, prometheus):
    # samples exactly on the minute and a millisecond before it, where a range closed at both ends
    # (Prometheus 2) also holds the sample a millisecond before its start
    at = pl.col("sampled_at").dt.truncate("15s")
    frame = samples().with_columns(pl.when(at.dt.second() == 45).then(at + pl.duration(milliseconds=14_999)).otherwise(at))
    land_rounds(tmp_path, frame)
    for closed in (False, True):
        reader = PrometheusMinutes(prometheus(frame, closed=closed).config())
        for now in TICKS[:3]:
            assert_frame_equal(ordered(reader.read(now, LOOKBACK).minutes),
                               ordered(recent_gpu_minutes(tmp_path, now, LOOKBACK)))


def test_a_tick_asks_only_for_the_minutes_it_does_not_hold(prometheus):
    fake = prometheus(samples())
    reader = PrometheusMinutes(fake.config(settle_s=60, max_samples_per_request=10_000))
    reader.read(TICKS[0], LOOKBACK)
    first = len(fake.asked)
    fake.asked.clear()
    reader.read(TICKS[1], LOOKBACK)
    # one span from the newly settled minute to now (two minutes and a half), never the twenty of the
    # lookback; the window's cut oldest minute is the part kept of it since the first tick
    assert fake.asked == [(TICKS[1] - dt.timedelta(milliseconds=1), dt.timedelta(minutes=2, seconds=31.5))]
    assert first >= 2
    assert sorted(reader.kept) == [TICKS[1].replace(second=0, microsecond=0) - dt.timedelta(minutes=m)
                                   for m in range(20, 1, -1)]


def test_a_steady_tick_asks_once_for_the_settled_minute_and_the_unsettled_part(tmp_path, prometheus):
    # 24 samples a minute, at most 40 a request: a minute and a half fits in one, two minutes do not
    frame = samples()
    land_rounds(tmp_path, frame)
    fake = prometheus(frame)
    reader = PrometheusMinutes(fake.config(max_samples_per_request=40))
    reader.read(TICKS[0], LOOKBACK)
    assert max(span for _, span in fake.asked) <= dt.timedelta(minutes=40 / 24)
    for now in TICKS[1:]:
        fake.asked.clear()
        got = reader.read(now, LOOKBACK)
        assert fake.asked == [(now - dt.timedelta(milliseconds=1), dt.timedelta(minutes=1, seconds=31.5))]
        assert_frame_equal(ordered(got.minutes), ordered(recent_gpu_minutes(tmp_path, now, LOOKBACK)))


@pytest.mark.parametrize("offset_s", [20.0, 25.0, 31.5, 37.25, 37.5, 59.0])
def test_the_cut_oldest_minute_is_asked_for_again_only_when_the_ticks_moved_past_a_sample(tmp_path, prometheus, offset_s):
    # samples at 7.25, 22.25, 37.25 and 52.25 s past each minute; the first tick (31.5 s past) splits the
    # minutes it keeps there: a later window cut between 22.25 (excluded) and 37.25 s holds the same samples
    frame = samples()
    land_rounds(tmp_path, frame)
    fake = prometheus(frame)
    reader = PrometheusMinutes(fake.config())
    reader.read(TICKS[0], LOOKBACK)
    fake.asked.clear()
    now = TICKS[1].replace(second=0, microsecond=0) + dt.timedelta(seconds=offset_s)
    got = reader.read(now, LOOKBACK)
    assert_frame_equal(ordered(got.minutes), ordered(recent_gpu_minutes(tmp_path, now, LOOKBACK)))
    since = now - LOOKBACK
    cut_end = since.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    kept_part_fits = 22.25 < offset_s <= 37.25
    assert ((cut_end - dt.timedelta(milliseconds=1), cut_end - since) in fake.asked) == (not kept_part_fits)
    assert len(fake.asked) == (1 if kept_part_fits else 2)


def test_requests_stay_within_the_sample_bound_and_halve_when_prometheus_refuses(tmp_path, prometheus):
    frame = samples()
    now = TICKS[0]
    land_rounds(tmp_path, frame)
    expected = ordered(recent_gpu_minutes(tmp_path, now, LOOKBACK))
    # 24 samples a minute: at most 4 minutes per request once the first answer told the rate
    bounded = prometheus(frame)
    got = PrometheusMinutes(bounded.config(max_samples_per_request=100)).read(now, LOOKBACK)
    assert_frame_equal(ordered(got.minutes), expected)
    assert max(span for _, span in bounded.asked) <= dt.timedelta(minutes=4)
    assert len(bounded.asked) >= 20 / 4
    # Prometheus refusing more than 2.5 minutes at once: the requests are halved until it answers
    refusing = prometheus(frame, too_many=2.5)
    got = PrometheusMinutes(refusing.config()).read(now, LOOKBACK)
    assert_frame_equal(ordered(got.minutes), expected)
    assert any(span > dt.timedelta(minutes=2.5) for _, span in refusing.asked)


def test_unreadable_values_and_series_are_counted_and_the_rest_read(tmp_path, prometheus):
    frame = samples()
    land_rounds(tmp_path, frame)
    now, t = TICKS[0], (TICKS[0] - EPOCH).total_seconds() - 30
    hostile = [
        {"metric": labels("a100-01", 0, None, GR), "values": [[t, "NaN"], [t + 1, "+Inf"]]},
        {"metric": {"__name__": GR, "job": "dcgm-exporter"}, "values": [[t, "0.0"]]},  # no host, no gpu
    ]
    fake = prometheus(frame, extra=hostile)
    got = PrometheusMinutes(fake.config()).read(now, LOOKBACK)
    assert_frame_equal(ordered(got.minutes), ordered(recent_gpu_minutes(tmp_path, now, LOOKBACK)))
    reasons = {reason: n for reason, n in got.skipped.items()}
    assert sum(n for r, n in reasons.items() if "NaN" in r or "finite" in r) >= 2, reasons
    assert sum(n for r, n in reasons.items() if "host" in r or "gpu" in r) >= 1, reasons


@pytest.mark.parametrize("answer", [
    (200, b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": '),  # cut short
    (200, b"<html>login</html>"),
    (200, json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1, "1"]}}).encode()),
    (400, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode()),
    (503, b"overloaded"),
])
def test_an_answer_that_is_no_query_answer_makes_the_telemetry_unavailable(answer):
    status, body = answer
    server = LoopbackServer(lambda request: send(request, status, body, "application/json"))
    try:
        with pytest.raises(TelemetryUnavailable, match=server.url):
            PrometheusMinutes(PrometheusConfig(url=server.url, retries=0)).read(TICKS[0], LOOKBACK)
    finally:
        server.stop()


def test_prometheus_unreachable_never_causes_a_reclaim(tmp_path):
    """The allocator's job is idle in the rounds; when the reclaim falls due Prometheus is down:
    nothing is evaluated or planned, and its open finding is left as it was."""
    landing = tmp_path / "landing"
    idle = samples(90).with_columns(pl.lit(0.0).alias("value")).filter(pl.col("gpu") == 0)
    land_rounds(landing, idle)
    cat, lookback = idle_catalog(), dt.timedelta(minutes=60)
    job = ALLOCATOR_JOB | {"started_at": "2026-12-03T06:50:00Z", "gpus": [{"host": "a100-01", "gpu": 0, "fraction": 1.0}]}
    allocator = Allocator()
    allocator.jobs = [job]
    down = PrometheusMinutes(PrometheusConfig(url=f"http://127.0.0.1:{free_port()}", retries=0))
    outbox = Outbox(tmp_path / "outbox.db", landing)
    try:
        def tick(minute: int, telemetry):
            return governance_tick(START + dt.timedelta(minutes=minute), landing=landing, catalog=cat, outbox=outbox,
                                   client=None, enforcers={"allocator": Recorder()}, lookback=lookback,
                                   work=[AllocatorWork(allocator)], telemetry=telemetry)

        first = tick(62, ScrapeRounds(landing))
        assert first.decisions == {"remind queued": 1}
        unreachable = tick(82, down)
        assert unreachable.findings.is_empty() and not unreachable.decisions
        assert "telemetry (prometheus): TelemetryUnavailable" in unreachable.summary()
        assert "nothing evaluated or planned this tick" in unreachable.summary()
        assert [p.job_id for p in outbox.open_findings(START)] == [job["job_id"]]
        # the same tick with telemetry: the reclaim was due
        assert tick(83, ScrapeRounds(landing)).decisions == {"reclaim queued": 1}
    finally:
        outbox.close()


def test_gpupool_yml_chooses_the_telemetry_and_the_sensor_reports_prometheus_down(tmp_path, real_data):
    config = tmp_path / "gpupool.yml"
    config.write_text("governance:\n  telemetry: prometheus\n")
    assert isinstance(build_telemetry(config, "dcgm_scrape", tmp_path), ScrapeRounds)
    with pytest.raises(ConfigError, match="no `prometheus:` section"):
        build_telemetry(config, "prometheus", tmp_path)
    # a Slurm pool (squeue answers the recorded sample) whose Prometheus is down
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat {real_data / 'slurm' / 'squeue_json_slurm_22_5_8_gpupool_cluster.json'}\n")
    squeue.chmod(0o755)
    config.write_text(f"governance:\n  outbox: state/outbox.db\n  telemetry: prometheus\n"
                      f"prometheus:\n  url: http://127.0.0.1:{free_port()}\n  retries: 0\n"
                      f"slurm:\n  squeue: {squeue}\n  governance:\n    partitions: [batch, urgent]\n")
    telemetry = build_telemetry(config, "prometheus", tmp_path)
    assert isinstance(telemetry, PrometheusMinutes) and build_telemetry(config, "prometheus", tmp_path) is telemetry
    context = dg.build_sensor_context(resources={
        "governance": GovernanceResource(config_file=str(config)),
        "warehouse": WarehouseResource(home=str(tmp_path / "home"))})
    message = idle_reclaim_sensor(context).skip_message
    assert "3 running jobs" in message and "findings: none; decisions: none" in message, message
    assert "telemetry (prometheus): TelemetryUnavailable" in message and "nothing evaluated or planned" in message


def test_a_fill_longer_than_its_budget_judges_nothing_and_the_next_tick_goes_on(tmp_path, prometheus):
    frame = samples()
    now = TICKS[0]
    land_rounds(tmp_path, frame)
    fake = prometheus(frame)
    # a budget spent by the first request: each read asks once, keeps what it got, and refuses
    reader = PrometheusMinutes(fake.config(max_samples_per_request=100, fill_budget_s=1e-9))
    refusals = 0
    while True:
        try:
            got = reader.read(now, LOOKBACK)
            break
        except TelemetryUnavailable as exc:
            assert "still filling the lookback" in str(exc) and "nothing is judged" in str(exc)
            refusals += 1
            assert refusals < 30
    assert refusals >= 3  # 20 minutes at most 4 a request
    assert_frame_equal(ordered(got.minutes), ordered(recent_gpu_minutes(tmp_path, now, LOOKBACK)))
