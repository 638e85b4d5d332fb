"""Prometheus backfill against a loopback server that speaks Prometheus' HTTP API and enforces its
limits (11,000 points per series, a samples budget), auth, and failures on demand."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import polars as pl
import pytest

from pipelines.config import section
from pipelines.connectors.prometheus import (
    DAY_S,
    PrometheusConfig,
    PrometheusError,
    backfill_prometheus,
    block_seconds,
    choose_step,
    epoch_s,
    plan_blocks,
    pull_window,
)
from tests.connectors.conftest import backfill_and_ingest, send

pytestmark = pytest.mark.slow  # backfills ingested and built into warehouses

DAY1 = dt.datetime(2026, 3, 1)
DATA_END = DAY1 + dt.timedelta(days=1, hours=12)  # data until day 2, 12:00 ("now")
RAW_INTERVAL_S = 15
TOO_MANY_POINTS = "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"
TOO_MANY_SAMPLES = "query processing would load too many samples into memory in query execution"
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|=)\s*"([^"]*)"')


def dcgm_series(hosts: int = 2, gpus: int = 3) -> list[dict[str, str]]:
    out = []
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"):
        for h in range(hosts):
            for g in range(gpus):
                out.append(
                    {
                        "__name__": metric,
                        "gpu": str(g),
                        "UUID": f"GPU-{h}-{g}",
                        "Hostname": f"node-{h}",
                        "instance": f"10.0.0.{h}:9400",
                        "job": "dcgm",
                    }
                )
    return [*out, {"__name__": "up", "instance": "10.0.0.0:9400", "job": "dcgm"}]


def value_at(index: int, t: int) -> float:
    """The raw sample of series `index` at epoch second t (a multiple of the raw interval): a
    different value per series and time, within 0..100 like a utilisation percent."""
    return float((index * 37 + t // RAW_INTERVAL_S) % 101)


@dataclass
class FakePrometheus:
    """query_range, series and label values over raw samples every 15 s in [DAY1, DATA_END]."""

    series: list[dict[str, str]]
    token: str | None = None
    basic: tuple[str, str] | None = None
    max_points: int = 11_000
    max_samples: int = 50_000_000
    fail_first: int = 0  # query_range requests answered 503 first
    requests: list[tuple[str, dict]] = field(default_factory=list)

    def handle(self, request) -> None:
        url = urlsplit(request.path)
        params = {k: v if k == "match[]" else v[0] for k, v in parse_qs(url.query).items()}
        self.requests.append((url.path, params))
        if not self._authorised(request.headers.get("Authorization")):
            return send(request, 401, b"Unauthorized\n", "text/plain")
        if url.path == "/api/v1/query_range":
            if self.fail_first > 0:
                self.fail_first -= 1
                return self._error(request, 503, "timeout", "query timed out in expression evaluation")
            return self._query_range(request, params)
        start, end = float(params["start"]), float(params["end"])
        matched = [s for m in params["match[]"] for s in self._select(m) if self._has_data(start, end)]
        if url.path == "/api/v1/series":
            return self._ok(request, matched)
        if url.path == "/api/v1/label/__name__/values":
            return self._ok(request, sorted({s["__name__"] for s in matched}))
        return send(request, 404, b"404 page not found\n", "text/plain")

    def _authorised(self, header: str | None) -> bool:
        import base64

        if self.token:
            return header == f"Bearer {self.token}"
        if self.basic:
            return header == "Basic " + base64.b64encode(":".join(self.basic).encode()).decode()
        return True

    def _select(self, selector: str) -> list[dict[str, str]]:
        name, _, rest = selector.partition("{")
        matchers = [("__name__", "=", name.strip())] if name.strip() else []
        matchers += _MATCHER.findall(rest)
        return [
            s
            for s in self.series
            if all(
                re.fullmatch(v, s.get(k, "")) if op == "=~" else s.get(k, "") == v for k, op, v in matchers
            )
        ]

    @staticmethod
    def _has_data(start: float, end: float) -> bool:
        return start <= epoch_s(DATA_END) and end >= epoch_s(DAY1)

    def _query_range(self, request, params: dict) -> None:
        start, end, step = int(params["start"]), int(params["end"]), int(params["step"])
        points = (end - start) // step + 1
        if points > self.max_points:
            return self._error(request, 400, "bad_data", TOO_MANY_POINTS)
        chosen = self._select(params["query"])
        if points * len(chosen) > self.max_samples:
            return self._error(request, 422, "execution", TOO_MANY_SAMPLES)
        first, last = epoch_s(DAY1), epoch_s(DATA_END)
        result = []
        for s in chosen:
            index = self.series.index(s)
            values = []
            for t in range(start, end + 1, step):
                raw = min(t, last) // RAW_INTERVAL_S * RAW_INTERVAL_S  # latest raw sample <= t
                if raw >= first and t - raw <= 300:  # within the 5 min lookback
                    values.append([t, f"{value_at(index, raw):g}"])
            if values:
                result.append({"metric": s, "values": values})
        return self._ok(request, {"resultType": "matrix", "result": result})

    @staticmethod
    def _ok(request, data) -> None:
        send(request, 200, json.dumps({"status": "success", "data": data}).encode(), "application/json")

    @staticmethod
    def _error(request, status: int, kind: str, message: str) -> None:
        body = {"status": "error", "errorType": kind, "error": message}
        send(request, status, json.dumps(body).encode(), "application/json")

    def query_ranges(self) -> list[dict]:
        return [p for path, p in self.requests if path == "/api/v1/query_range"]


@pytest.fixture
def fake_prometheus(loopback):
    def start(**kwargs) -> tuple[FakePrometheus, str]:
        fake = FakePrometheus(dcgm_series(), **kwargs)
        return fake, loopback(fake.handle).url

    return start


def expected_rows(
    series: list[dict[str, str]], start: dt.datetime, end: dt.datetime, step: int
) -> pl.DataFrame:
    """Every (series, step) point in [start, end] at which Prometheus has a raw sample."""
    first, last = epoch_s(start), epoch_s(end)
    rows = [
        {
            "metric": s["__name__"],
            "host": s["Hostname"],
            "gpu": int(s["gpu"]),
            "t": t,
            "value": value_at(i, t // 15 * 15),
        }
        for i, s in enumerate(series)
        if s["__name__"].startswith("DCGM_")
        for t in range(first, last + 1, step)
    ]
    return (
        pl.DataFrame(rows)
        .with_columns(sampled_at=pl.from_epoch("t", time_unit="s").cast(pl.Datetime("us")))
        .drop("t")
    )


def loaded(warehouse) -> pl.DataFrame:
    with warehouse.connect() as con:
        return con.sql(
            "select metric, host, gpu, value, sampled_at, k8s_pod, k8s_namespace from raw.dcgm_samples"
        ).pl()


# -- planning ----------------------------------------------------------------------------------
def test_step_follows_the_window():
    assert choose_step(dt.timedelta(hours=1), 15) == 15
    assert choose_step(dt.timedelta(days=1), 15) == 15
    assert choose_step(dt.timedelta(days=3), 15) == 60
    assert choose_step(dt.timedelta(days=20), 15) == 300
    assert choose_step(dt.timedelta(days=90), 15) == 900
    assert choose_step(dt.timedelta(hours=1), 7) == 8  # rounded up to a divisor of a day
    assert choose_step(dt.timedelta(days=3), 120) == 120  # never below the scrape interval


@pytest.mark.parametrize(
    ("step", "series", "max_points", "max_samples", "block"),
    [
        (15, 6, 10_000, 1_000_000, 86_400),  # a day is 5,760 points
        (1, 8, 10_000, 1_000_000, 9_600),  # 9,600 points of 1 s
        (15, 4_000, 10_000, 1_000_000, 3_600),  # 250 points per series at most: an hour
        (60, 10, 11_000, 1_000_000, 86_400),
        (15, 1_000_000, 10_000, 1_000, 15),  # never less than one step
    ],
)
def test_blocks_respect_both_limits_and_divide_the_day(step, series, max_points, max_samples, block):
    got = block_seconds(step, series, max_points, max_samples)
    assert got == block
    assert DAY_S % got == 0 and got % step == 0
    assert got // step <= max_points and (got // step) * series <= max(max_samples, series)


def test_blocks_never_straddle_midnight():
    start, end = (
        epoch_s(DAY1 + dt.timedelta(hours=17, minutes=3)),
        epoch_s(DAY1 + dt.timedelta(days=2, hours=1)),
    )
    blocks = plan_blocks(start, end, 7_200)
    assert blocks[0][0] <= start < blocks[0][1] and blocks[-1][0] < end <= blocks[-1][1]
    assert all(a // DAY_S == (b - 1) // DAY_S for a, b in blocks)
    assert all(b == a2 for (_, b), (a2, _) in itertools.pairwise(blocks))


# -- against the fake server -------------------------------------------------------------------
def test_backfill_chunks_under_the_point_limit_and_the_numbers_land(fake_prometheus, warehouse):
    fake, url = fake_prometheus()
    config = PrometheusConfig(url=url, max_points_per_series=500)
    window = (DAY1 + dt.timedelta(hours=18), DAY1 + dt.timedelta(days=1, hours=6))
    report, ingested = backfill_and_ingest(warehouse, *window, config, now=DATA_END)

    assert report.step_s == 15 and report.metrics == [
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
    ]
    queries = fake.query_ranges()
    points = [(int(q["end"]) - int(q["start"])) // int(q["step"]) + 1 for q in queries]
    assert max(points) == 480  # 2 h blocks: 480 points of 15 s, under 500
    assert all(int(q["start"]) % 7_200 == 0 for q in queries)
    # 18:00 .. 06:00 (next day) is 6 blocks of 2 h per metric
    assert len(queries) == 3 * 6 and report.days == [DAY1.date(), DAY1.date() + dt.timedelta(days=1)]
    assert report.files_written == 18 and report.requests == 1 + 3 + 18  # names, series counts, blocks

    expected = expected_rows(fake.series, window[0], window[1] - dt.timedelta(seconds=15), 15)
    got = loaded(warehouse).drop("k8s_pod", "k8s_namespace")
    key = ["metric", "host", "gpu", "sampled_at"]
    assert got.height == expected.height == 3 * 6 * 12 * 240
    assert (
        got.sort(key)
        .select(expected.columns)
        .equals(expected.sort(key).with_columns(pl.col("gpu").cast(pl.Int32)))
    )
    assert sum(r.records_quarantined for r in ingested) == 0


@pytest.mark.parametrize(("limit", "error"), [({"max_points": 200}, "400"), ({"max_samples": 1_000}, "422")])
def test_a_refused_block_is_halved_until_prometheus_accepts(fake_prometheus, warehouse, limit, error):
    fake, url = fake_prometheus(**limit)
    config = PrometheusConfig(url=url, metrics=["DCGM_FI_DEV_POWER_USAGE"], step_s=60)
    report, _ = backfill_and_ingest(warehouse, DAY1, DAY1 + dt.timedelta(hours=6), config, now=DATA_END)
    queries = fake.query_ranges()
    assert len(queries) > 1 and report.files_written > 1  # the day block came back refused and was cut
    got = loaded(warehouse)
    assert got.height == 6 * 1_440  # the whole day at 60 s, each point once
    assert got.select("host", "gpu", "sampled_at").is_unique().all()


def test_rerun_is_idempotent_and_another_step_replaces_the_files(fake_prometheus, warehouse):
    from pipelines.ingest import ingest_partition

    _, url = fake_prometheus()
    config = PrometheusConfig(url=url, metrics=["DCGM_FI_DEV_GPU_UTIL"])
    window = (DAY1 + dt.timedelta(hours=1), DAY1 + dt.timedelta(hours=2))
    folder = warehouse.landing / "prometheus" / DAY1.date().isoformat()
    first = backfill_prometheus(warehouse.landing, *window, config, now=DATA_END)
    names = sorted(p.name for p in folder.iterdir())
    again = backfill_prometheus(warehouse.landing, *window, config, now=DATA_END)
    assert (
        sorted(p.name for p in folder.iterdir()) == names and again.files_replaced == first.files_written == 1
    )
    coarse = backfill_prometheus(warehouse.landing, *window, config.model_copy(update={"step_s": 300}), now=DATA_END)
    assert coarse.files_replaced == 1
    assert [p.name for p in folder.iterdir()] == [
        f"prom-DCGM_FI_DEV_GPU_UTIL-{epoch_s(DAY1)}-{epoch_s(DAY1) + DAY_S}-s300.json"
    ]
    report = ingest_partition(warehouse, "prometheus", DAY1.date())
    assert report.records_loaded == 6 * 288


def test_token_from_the_environment_retries_on_503_and_refusals_are_not_retried(
    fake_prometheus, warehouse, tmp_path, monkeypatch
):
    fake, url = fake_prometheus(token="s3cret-token", fail_first=2)
    path = tmp_path / "gpupool.yml"
    path.write_text(
        f"prometheus:\n  url: {url}\n  bearer_token: ${{PROM_TOKEN}}\n  metrics: [DCGM_FI_DEV_FB_USED]\n"
        "  backoff_s: 0.01\n  retries: 2\n"
    )
    monkeypatch.setenv("PROM_TOKEN", "s3cret-token")
    config = section("prometheus", PrometheusConfig, path)
    window = (DAY1, DAY1 + dt.timedelta(hours=1))
    report = backfill_prometheus(warehouse.landing, *window, config, now=DATA_END)
    assert report.files_written == 1 and len(fake.query_ranges()) == 3  # two 503s, then the answer

    fake.requests.clear()
    wrong = config.model_copy(update={"bearer_token": "wrong-token"})
    with pytest.raises(PrometheusError, match=r"/api/v1/series: HTTP 401"):
        backfill_prometheus(warehouse.landing, *window, wrong, now=DATA_END)
    assert len(fake.requests) == 1

    fake.fail_first = 5
    with pytest.raises(PrometheusError, match=r"HTTP 503"):
        backfill_prometheus(warehouse.landing, *window, config, now=DATA_END)


def test_basic_auth_and_a_selector(fake_prometheus, warehouse):
    fake, url = fake_prometheus(basic=("grafana", "pa55word"))
    fake.series.append({**fake.series[0], "job": "other", "Hostname": "elsewhere"})
    config = PrometheusConfig(
        url=url, username="grafana", password="pa55word", selector='job="dcgm"', step_s=3600
    )
    report, _ = backfill_and_ingest(warehouse, DAY1, DAY1 + dt.timedelta(days=1), config, now=DATA_END)
    assert report.metrics == ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"]
    assert all(q["query"].endswith('{job="dcgm"}') for q in fake.query_ranges())
    assert "elsewhere" not in loaded(warehouse).get_column("host").to_list()


def test_config_validation():
    with pytest.raises(ValueError, match="either bearer_token or username/password"):
        PrometheusConfig(url="http://p", bearer_token="t", username="u", password="p")
    with pytest.raises(ValueError, match="must divide a day"):
        PrometheusConfig(url="http://p", step_s=7)
    assert PrometheusConfig(url="http://p", bearer_token="").bearer_token is None  # ${VAR:-} unset


def test_relabelled_series_map_exported_pod_and_namespace(fake_prometheus, warehouse):
    fake, url = fake_prometheus()
    fake.series[:] = [
        {
            **s,
            "exported_pod": f"train-{s['gpu']}",
            "exported_namespace": "team-a",
            "pod": "dcgm-exporter-x2k9f",  # the scrape target's own pod, renamed away from the workload's
            "namespace": "gpu-operator",
        }
        for s in fake.series
        if "gpu" in s
    ]
    config = PrometheusConfig(url=url, metrics=["DCGM_FI_DEV_GPU_UTIL"], step_s=3600)
    backfill_and_ingest(warehouse, DAY1, DAY1 + dt.timedelta(hours=3), config, now=DATA_END)
    got = loaded(warehouse)
    assert got.height == 6 * 24
    assert set(got.select("k8s_pod", "k8s_namespace").unique().iter_rows()) == {
        ("train-0", "team-a"),
        ("train-1", "team-a"),
        ("train-2", "team-a"),
    }


def test_the_example_config_file_validates(monkeypatch):
    from pipelines.connectors.scrape import DcgmConfig
    from pipelines.paths import REPO_ROOT

    monkeypatch.delenv("PROMETHEUS_TOKEN", raising=False)
    example = REPO_ROOT / "gpupool.example.yml"
    dcgm = section("dcgm", DcgmConfig, example)
    prometheus = section("prometheus", PrometheusConfig, example)
    assert dcgm.targets[1] == "gpu-node-02:9400" and dcgm.interval_s == 15
    assert prometheus.bearer_token is None and prometheus.selector == 'job="dcgm-exporter"'
    monkeypatch.setenv("PROMETHEUS_TOKEN", "from-the-environment")
    assert section("prometheus", PrometheusConfig, example).bearer_token == "from-the-environment"


PULL = PrometheusConfig(url="http://prometheus:9090", settle_s=30, pull_first_window_s=3600, pull_max_window_s=600)


@pytest.mark.parametrize(("last_end", "now", "window"), [
    # the first pull reaches pull_first_window_s back from the settled end, cut to pull_max_window_s
    (None, dt.datetime(2026, 11, 2, 10, 0, 30, 999_000), (dt.datetime(2026, 11, 2, 9), dt.datetime(2026, 11, 2, 9, 10))),
    # the next starts where the last ended and stops settle_s before now, in whole seconds
    (dt.datetime(2026, 11, 2, 9, 58), dt.datetime(2026, 11, 2, 10, 3, 30, 500_000),
     (dt.datetime(2026, 11, 2, 9, 58), dt.datetime(2026, 11, 2, 10, 3))),
    # a sensor stopped for long catches up pull_max_window_s at a time
    (dt.datetime(2026, 11, 1, 23, 55), dt.datetime(2026, 11, 2, 10), (dt.datetime(2026, 11, 1, 23, 55),
                                                                      dt.datetime(2026, 11, 2, 0, 5))),
    # nothing settled since the last pull: nothing to ask for
    (dt.datetime(2026, 11, 2, 10, 3), dt.datetime(2026, 11, 2, 10, 3, 30), None),
    (dt.datetime(2026, 11, 2, 10, 3), dt.datetime(2026, 11, 2, 10, 3, 10), None),
])
def test_each_pull_lands_what_settled_since_the_last_one(last_end, now, window):
    assert pull_window(last_end, now, PULL) == window


def test_pull_windows_chain_without_gap_or_overlap():
    last, covered = None, []
    for minute in range(0, 40, 3):
        got = pull_window(last, dt.datetime(2026, 11, 2, 10, minute, 17), PULL)
        if got is not None:
            covered.append(got)
            last = got[1]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert covered[0][0] == dt.datetime(2026, 11, 2, 8, 59, 47)  # an hour before the first settled end
    assert covered[-1][1] == dt.datetime(2026, 11, 2, 10, 38, 47)  # caught up: settle_s before the last pull
