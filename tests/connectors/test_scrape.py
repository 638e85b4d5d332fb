"""dcgm-exporter scraping against loopback servers: each failure kind leaves a gap with its error,
and every healthy target's samples are kept, exactly as the parser reads them."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import socket
import threading
import time
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import requests

from allocator.pool import default_pool
from allocator.telemetry import render_node_metrics
from pipelines.assets.ingest_cursor import INGEST_TAG, NEW_FILES, TRIGGER_TAG, ingest_result
from pipelines.assets.scrape import ScrapeCursor, advance, build_scrape_sensor
from pipelines.config import ConfigError
from pipelines.connectors.http import RetryPolicy, with_retries
from pipelines.connectors.scrape import (
    DcgmConfig,
    Scraper,
    Target,
    assemble_round,
    load_file_sd,
    round_path,
    targets_of,
    write_round,
)
from pipelines.contracts import GAPS_SCHEMA
from pipelines.ingest import record_scrape_gaps
from pipelines.resources.telemetry import DcgmScrapeResource, ExpositionFolderResource
from pipelines.resources.warehouse import WarehouseResource
from pipelines.sources.dcgm_text import parse_dcgm_text
from tests.connectors.conftest import send

ROUND_AT = dt.datetime(2026, 3, 2, 10, 30, 15)
POOL = default_pool()
HOSTS = [n.host for n in POOL.nodes[:3]]
FAST = {"connect_timeout_s": 0.5, "read_timeout_s": 0.6, "interval_s": 5.0, "retries": 1, "backoff_s": 0.01}


def body_of(host: str) -> bytes:
    return render_node_metrics(POOL, {}, host, ROUND_AT).encode()


def reply_late(request, body: bytes) -> None:
    with contextlib.suppress(OSError):  # the client has given up by now
        send(request, 200, body)


def dead_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def release() -> threading.Event:
    """Set at teardown so that slow handlers stop waiting."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def fleet(loopback, release):
    """Three healthy exporters and one per failure kind, each on its own loopback server."""

    def healthy(host: str):
        return lambda r: send(r, 200, body_of(host))

    def slow(r):
        if not release.wait(2.0):  # longer than the read timeout
            reply_late(r, body_of(HOSTS[0]))

    def truncated_length(r):
        r.send_response(200)
        r.send_header("Content-Length", str(len(body_of(HOSTS[1]))))
        r.end_headers()
        r.wfile.write(body_of(HOSTS[1])[:500])
        r.close_connection = True

    def truncated_chunked(r):
        r.send_response(200)
        r.send_header("Transfer-Encoding", "chunked")
        r.end_headers()
        part = body_of(HOSTS[2])[:700]
        r.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")  # no terminating 0-chunk
        r.wfile.flush()
        r.close_connection = True

    servers = {f"ok-{h}": loopback(healthy(h)) for h in HOSTS}
    servers |= {
        "slow": loopback(slow),
        "http_500": loopback(lambda r: send(r, 500, b"exporter crashed: DCGM not initialised\n")),
        "truncated_length": loopback(truncated_length),
        "truncated_chunked": loopback(truncated_chunked),
        "garbage_html": loopback(
            lambda r: send(r, 200, b"<html><body>502 Bad Gateway</body></html>\n", "text/html")
        ),
        "garbage_binary": loopback(lambda r: send(r, 200, b"\x00\x01\x02\xff" * 64, "text/plain")),
        "garbage_json": loopback(lambda r: send(r, 200, b'{"error": "no"}', "application/json")),
    }
    urls = {name: f"{s.url}/metrics" for name, s in servers.items()}
    urls["down"] = f"http://127.0.0.1:{dead_port()}/metrics"
    return urls, servers


EXPECTED_KINDS = {
    "down": "down",
    "slow": "timeout",
    "http_500": "http_status",
    "truncated_length": "truncated",
    "truncated_chunked": "truncated",
    "garbage_html": "garbage",
    "garbage_binary": "garbage",
    "garbage_json": "garbage",
}


def expected_samples(hosts: list[str], round_at: dt.datetime) -> pl.DataFrame:
    frames = [parse_dcgm_text(body_of(h), "x", round_at).tables["dcgm_samples"] for h in hosts]
    return pl.concat(frames)


def by_series(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop("source_file").sort("host", "gpu", "metric", "sampled_at")


def test_every_failure_kind_is_a_gap_and_healthy_targets_lose_nothing(fleet):
    urls, servers = fleet
    config = DcgmConfig(targets=list(urls.values()), **FAST)
    scraper = Scraper(config)
    try:
        started = time.monotonic()
        scrape = scraper.scrape_round(ROUND_AT)
        elapsed = time.monotonic() - started
    finally:
        scraper.close()

    gaps = {row["target"]: row for row in scrape.gaps.iter_rows(named=True)}
    assert {urls[name]: kind for name, kind in EXPECTED_KINDS.items()} == {
        target: row["error_kind"] for target, row in gaps.items()
    }
    assert "Connection refused" in gaps[urls["down"]]["error"]
    assert gaps[urls["down"]]["attempts"] == 2  # connection errors are retried
    assert gaps[urls["slow"]]["attempts"] == 1  # read timeouts are not
    assert "Read timed out" in gaps[urls["slow"]]["error"]
    assert gaps[urls["http_500"]]["error"].endswith(
        "HTTP 500 Internal Server Error: exporter crashed: DCGM not initialised"
    )
    assert gaps[urls["http_500"]]["attempts"] == 2  # 5xx is retried
    assert len(servers["http_500"].hits) == 2
    assert "IncompleteRead" in gaps[urls["truncated_length"]]["error"]
    assert "ended prematurely" in gaps[urls["truncated_chunked"]]["error"]
    assert gaps[urls["garbage_html"]]["error"] == (
        "all sample lines quarantined (1); first: line 1: invalid metric name '<html><body>502'"
    )
    assert gaps[urls["garbage_binary"]]["error"] == "body is not text (NUL bytes)"
    assert gaps[urls["garbage_json"]]["error"] == "content type 'application/json' is not a text exposition"
    assert all(row["round_at"] == ROUND_AT for row in gaps.values())
    assert elapsed < 2.0  # the slow target costs one read timeout, not a round

    # The healthy targets' samples, all of them, as the parser reads each body alone.
    assert scrape.targets == len(urls) and scrape.targets_ok == len(HOSTS)
    assert by_series(scrape.samples).equals(by_series(expected_samples(HOSTS, ROUND_AT)))
    assert scrape.samples.get_column("sampled_at").unique().to_list() == [ROUND_AT]
    assert (
        scrape.records_read == sum(parse_dcgm_text(body_of(h), "x", ROUND_AT).records_read for h in HOSTS) + 1
    )


def test_partial_and_empty_bodies(loopback):
    good = body_of(HOSTS[0])
    broken = good + b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h100-01" 31\nDCGM_FI_DEV_GPU_TEMP{gpu="1"} 30\n'
    servers = [
        loopback(lambda r: send(r, 200, broken)),
        loopback(lambda r: send(r, 200, b"# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n")),
        loopback(lambda r: send(r, 200, body_of(HOSTS[1]))),
    ]
    scrape = Scraper(DcgmConfig(targets=[f"{s.url}/metrics" for s in servers], **FAST)).scrape_round(ROUND_AT)
    kinds = dict(scrape.gaps.select("target", "error_kind").iter_rows())
    assert kinds == {f"{servers[0].url}/metrics": "partial", f"{servers[1].url}/metrics": "empty"}
    records = parse_dcgm_text(good, "x", ROUND_AT).records_read + 2
    partial = scrape.gaps.filter(pl.col("error_kind") == "partial").item(0, "error")
    first_bad = good.count(b"\n") + 1
    assert (
        partial == f"2 of {records} sample lines quarantined; first: line {first_bad}: label block not closed"
    )
    # the partial target's good lines are kept, with the healthy one's
    assert by_series(scrape.samples).equals(by_series(expected_samples(HOSTS[:2], ROUND_AT)))
    assert scrape.records_quarantined == 2


def test_retry_recovers_a_flaky_exporter_and_4xx_is_not_retried(loopback):
    calls = {"n": 0}

    def flaky(r):
        calls["n"] += 1
        send(r, 503, b"busy") if calls["n"] == 1 else send(r, 200, body_of(HOSTS[0]))

    flaky_server = loopback(flaky)
    missing = loopback(lambda r: send(r, 404, b"404 page not found\n"))
    config = DcgmConfig(targets=[f"{flaky_server.url}/metrics", f"{missing.url}/metrics"], **FAST)
    scrape = Scraper(config).scrape_round(ROUND_AT)
    assert calls["n"] == 2
    assert scrape.gaps.select("error_kind", "attempts").rows() == [("http_status", 1)]
    assert len(missing.hits) == 1
    assert scrape.samples.height == parse_dcgm_text(body_of(HOSTS[0]), "x", ROUND_AT).records_loaded


def test_backoff_doubles_and_stops_at_the_deadline():
    waits: list[float] = []
    failures = iter([ConnectionRefusedError] * 10)

    def attempt():
        raise requests.ConnectionError(next(failures)())

    with pytest.raises(requests.ConnectionError):
        with_retries(attempt, RetryPolicy(retries=4, backoff_s=0.1, max_backoff_s=0.3), sleep=waits.append)
    assert waits == [0.1, 0.2, 0.3, 0.3]
    waits.clear()
    with pytest.raises(requests.ConnectionError):
        with_retries(
            attempt,
            RetryPolicy(retries=4, backoff_s=0.1),
            deadline=time.monotonic() + 0.15,
            sleep=waits.append,
        )
    assert waits == [0.1]


def test_a_body_that_trickles_past_the_read_timeout_and_a_body_too_large(loopback, release):
    def trickle(r):
        r.send_response(200)
        r.send_header("Transfer-Encoding", "chunked")
        r.end_headers()
        line = body_of(HOSTS[0]).split(b"\n")[2] + b"\n"
        for _ in range(40):  # every chunk well within the socket timeout, the whole far beyond it
            if release.wait(0.05):
                return
            r.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            r.wfile.flush()
        r.wfile.write(b"0\r\n\r\n")

    slow = loopback(trickle)
    big = loopback(lambda r: send(r, 200, body_of(HOSTS[1]) * 4))
    config = DcgmConfig(targets=[f"{slow.url}/m", f"{big.url}/m"], max_body_mib=0.02, **FAST)
    scrape = Scraper(config).scrape_round(ROUND_AT)
    gaps = dict(scrape.gaps.select("target", "error").iter_rows())
    assert gaps[f"{slow.url}/m"].startswith("body not complete within 0.6 s")
    assert gaps[f"{big.url}/m"] == "body larger than 0.02 MiB"
    assert scrape.samples.height == 0


def test_targets_beyond_the_round_deadline_are_gaps_not_waits(loopback, release):
    slow = [loopback(lambda r: release.wait(2.0) or reply_late(r, b"")) for _ in range(4)]
    config = DcgmConfig(
        targets=[f"{s.url}/metrics" for s in slow],
        interval_s=1.0,
        connect_timeout_s=0.2,
        read_timeout_s=0.4,
        concurrency=1,
        retries=0,
    )
    started = time.monotonic()
    scrape = Scraper(config).scrape_round(ROUND_AT)
    assert time.monotonic() - started < 1.0
    kinds = scrape.gaps.get_column("error_kind").to_list()
    assert kinds[0] == "timeout" and set(kinds[1:]) == {"deadline"}


def test_config_rejects_timeouts_that_do_not_fit_the_interval():
    with pytest.raises(ValueError, match=r"must be below interval_s \(5.0\)"):
        DcgmConfig(interval_s=5, connect_timeout_s=2, read_timeout_s=3)


def test_file_sd_targets_json_and_yaml(tmp_path: Path):
    (tmp_path / "a.json").write_text(
        json.dumps(
            [
                {"targets": ["gpu-1:9400", "gpu-2:9400"], "labels": {"cluster": "east"}},
                {
                    "targets": ["gpu-3:9400"],
                    "labels": {"__metrics_path__": "/nodes/gpu-3/metrics", "__scheme__": "https"},
                },
            ]
        )
    )
    (tmp_path / "b.yml").write_text("- targets: ['gpu-2:9400', 'gpu-4:9400']\n")
    config = DcgmConfig(
        targets=["http://gpu-0:9400/metrics", "gpu-1:9400"],
        file_sd=[str(tmp_path / "a.json"), str(tmp_path / "b.yml")],
    )
    assert targets_of(config) == [
        Target("http://gpu-0:9400/metrics"),
        Target("http://gpu-1:9400/metrics"),
        Target("http://gpu-2:9400/metrics", (("cluster", "east"),)),
        Target("https://gpu-3:9400/nodes/gpu-3/metrics"),
        Target("http://gpu-4:9400/metrics"),
    ]
    (tmp_path / "bad.json").write_text('[{"targets": "gpu-1:9400"}]')
    with pytest.raises(ConfigError, match=r"bad.json: group 0: expected an object with a 'targets' list"):
        load_file_sd(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match=r"missing.json: file_sd file not readable"):
        load_file_sd(tmp_path / "missing.json")


def test_a_round_lands_as_parquet_the_ingest_reads_and_gaps_in_the_warehouse(fleet, warehouse):
    from pipelines.ingest import ingest_partition

    urls, _ = fleet
    scraper = Scraper(DcgmConfig(targets=list(urls.values()), **FAST))
    rounds = [scraper.scrape_round(ROUND_AT + dt.timedelta(seconds=15 * i)) for i in range(2)]
    paths = []
    for r in rounds:
        paths.append(write_round(warehouse.landing, r))
        record_scrape_gaps(warehouse, r.gaps)
    scraper.close()
    assert paths == [round_path(warehouse.landing, r) for r in rounds]
    assert paths[0].parent == warehouse.landing / "dcgm_parquet" / "2026-03-02"
    assert paths[0].name == f"scrape-103015-{rounds[0].round_id}.parquet"
    assert not list(paths[0].parent.glob(".*"))  # no temp files left

    report = ingest_partition(warehouse, "dcgm_parquet", ROUND_AT.date())
    expected = sum(r.samples.height for r in rounds)
    assert (report.files_read, report.records_loaded, report.records_quarantined) == (2, expected, 0)
    with warehouse.connect() as con:
        loaded = con.execute("select count(*), count(distinct sampled_at) from raw.dcgm_samples").fetchall()[
            0
        ]
        gaps = con.sql(
            "select error_kind, count(*) from ops.scrape_gaps group by error_kind order by error_kind"
        ).fetchall()
    assert loaded == (expected, 2)
    assert dict(gaps) == {
        kind: 2 * list(EXPECTED_KINDS.values()).count(kind) for kind in set(EXPECTED_KINDS.values())
    }


def test_gaps_append_and_a_round_without_samples_writes_no_file(warehouse):
    empty = assemble_round([], ROUND_AT)
    assert write_round(warehouse.landing, empty) is None
    gap = pl.DataFrame(
        [
            {
                "target": "http://x/metrics",
                "round_at": ROUND_AT,
                "round_id": "r1",
                "error_kind": "down",
                "error": "refused",
                "duration_s": 0.1,
                "attempts": 3,
            }
        ],
        schema=GAPS_SCHEMA,
    )
    record_scrape_gaps(warehouse, gap)
    record_scrape_gaps(warehouse, gap.with_columns(round_id=pl.lit("r2")))
    with warehouse.connect() as con:
        assert con.sql("select round_id from ops.scrape_gaps order by round_id").fetchall() == [
            ("r1",),
            ("r2",),
        ]


# -- the sensor --------------------------------------------------------------------------------
def _round(day: dt.date, samples: int):
    scrape = assemble_round([], dt.datetime.combine(day, dt.time(12)))
    return dataclasses.replace(scrape, samples=expected_samples(HOSTS[:1], ROUND_AT).head(samples))


def test_cursor_requests_the_days_ingest_every_n_rounds_and_closes_the_day():
    day, next_day = dt.date(2026, 3, 2), dt.date(2026, 3, 3)
    cursor, asks = ScrapeCursor(), []
    for _ in range(5):
        cursor, ingests = advance(cursor, _round(day, 10), every=2)
        asks.append(ingests)
    assert asks == [
        [],
        [("2026-03-02", "dcgm_parquet:2026-03-02:2")],
        [],
        [("2026-03-02", "dcgm_parquet:2026-03-02:4")],
        [],
    ]
    cursor, ingests = advance(cursor, _round(day, 0), every=2)  # a round with no samples counts no progress
    assert ingests == [] and cursor.since_ingest == 1
    cursor, ingests = advance(cursor, _round(next_day, 10), every=2)
    assert ingests == [("2026-03-02", "dcgm_parquet:2026-03-02:final")]
    assert (cursor.day, cursor.rounds, cursor.since_ingest, cursor.samples) == ("2026-03-03", 7, 1, 60)
    assert ScrapeCursor.parse(cursor.to_json()) == cursor
    assert ScrapeCursor.parse("not json") == ScrapeCursor()
    runs = ingest_result([*ingests, ("2026-03-03", "dcgm_parquet:2026-03-03:9")], "dcgm_scrape", cursor, "",
                         new_files=True).run_requests
    assert [r.tags.get(INGEST_TAG) for r in runs] == [None, NEW_FILES]  # the day's last run reads it whole


def test_sensor_scrapes_live_targets_from_the_config_file(fleet, tmp_path, warehouse):
    urls, _ = fleet
    config_file = tmp_path / "gpupool.yml"
    healthy = [u for name, u in urls.items() if name.startswith("ok-")]
    config_file.write_text(
        "dcgm:\n  targets:\n"
        + "".join(f"    - {u}\n" for u in [*healthy, urls["down"], urls["http_500"]])
        + "  connect_timeout_s: 0.5\n  read_timeout_s: 0.6\n  retries: 0\n"
    )
    sensor = build_scrape_sensor(interval_s=15, ingest_every_rounds=2)
    resources = {
        "telemetry": DcgmScrapeResource(config_file=str(config_file)),
        "warehouse": WarehouseResource(home=str(warehouse.home)),
    }
    cursor, results = None, []
    for _ in range(2):
        result = sensor(dg.build_sensor_context(cursor=cursor, resources=resources))
        results.append(result)
        cursor = result.cursor
    assert "3/5 targets ok" in results[0].skip_reason.skip_message
    assert "gaps: down 1, http_status 1" in results[0].skip_reason.skip_message
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert [(r.partition_key, r.run_key) for r in results[1].run_requests] == [
        (today, f"dcgm_parquet:{today}:2")
    ]  # an intraday run: it adds the rounds landed since the day's last (pipelines/ingest.py ingest_new_files)
    assert results[1].run_requests[0].tags == {TRIGGER_TAG: "dcgm_scrape", INGEST_TAG: NEW_FILES}
    state = json.loads(cursor)
    assert (state["rounds"], state["gaps"], state["since_ingest"]) == (2, 4, 0)
    assert state["samples"] == 2 * expected_samples(HOSTS, ROUND_AT).height
    assert len(list((warehouse.landing / "dcgm_parquet" / today).glob("scrape-*.parquet"))) == 2


def test_sensor_offline_folder_and_no_targets(tmp_path, warehouse):
    folder = tmp_path / "captured"
    folder.mkdir()
    for host in HOSTS[:2]:
        (folder / f"{host}.prom").write_bytes(body_of(host))
    sensor = build_scrape_sensor(interval_s=15, ingest_every_rounds=100)
    wh = WarehouseResource(home=str(warehouse.home))
    result = sensor(
        dg.build_sensor_context(
            resources={"telemetry": ExpositionFolderResource(folder=str(folder)), "warehouse": wh}
        )
    )
    assert "2/2 targets ok" in result.skip_reason.skip_message
    none = sensor(
        dg.build_sensor_context(
            resources={
                "telemetry": DcgmScrapeResource(config_file=str(tmp_path / "absent.yml")),
                "warehouse": wh,
            }
        )
    )
    assert none.skip_reason.skip_message == "no targets to scrape (no dcgm section in the connector config)"


def test_the_code_location_loads_with_the_scrape_sensor():
    from pipelines.definitions import defs as project

    dg.Definitions.validate_loadable(project)
    sensor = project.resolve_sensor_def("dcgm_scrape")
    assert sensor.minimum_interval_seconds == 15
    assert sensor.asset_selection.resolve(project.resolve_asset_graph()) == {dg.AssetKey("raw_dcgm_parquet")}


def test_a_configured_bearer_token_is_sent_and_never_shown(loopback):
    """The allocator's /nodes/<host>/metrics names jobs only to a token (docs/allocator.md)."""
    seen: list[str | None] = []

    def handler(r):
        seen.append(r.headers.get("Authorization"))
        send(r, 200, body_of(HOSTS[0]))

    server = loopback(handler)
    with_token = DcgmConfig(targets=[f"{server.url}/metrics"], bearer_token="s3cr3t-token-0123456789", **FAST)
    assert Scraper(with_token).scrape_round(ROUND_AT).targets_ok == 1
    # `${GPUPOOL_ALLOCATOR_TOKEN:-}` of an unset variable: no header at all
    assert Scraper(DcgmConfig(targets=[f"{server.url}/metrics"], bearer_token="", **FAST)).scrape_round(ROUND_AT)
    assert seen == ["Bearer s3cr3t-token-0123456789", None]
    assert "s3cr3t" not in repr(with_token)
