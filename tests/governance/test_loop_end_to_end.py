"""The enforcement loop against a live allocator, minute by virtual minute.

A real allocator API (uvicorn on loopback) over one node with 2 H100s and a clock the test moves;
job A (2 GPUs, vision) works for 10 minutes and then sits idle, holding both GPUs; job B (2 GPUs)
waits for them. Every virtual minute the test advances the clock, runs the engine's timers,
scrapes the node's dcgm-exporter endpoint with the real scrape connector into the landing zone,
and runs `governance_tick` with the real policy catalog:

- enforce: reminder at the first tick after the 30th idle minute is over (the sensor sees a minute
  once it is over), reclaim 15 minutes later, job B starts on the freed GPUs; the allocator's audit has
  remind and reclaim applied once each; the landing zone ingested and the models built show each
  step in marts.fct_governance_actions and recovered and reused GPU-hours in fct_reclaim_ledger;
- shadow: the allocator is untouched (no enforcement audit, A running, B pending) and the decision
  log holds the shadow decisions;
- allocator down: the reclaim stays queued while the allocator cannot be reached and goes out once
  it is back, with one effect.
"""
from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
import uvicorn

from allocator.auth import parse_tokens
from allocator.pool import parse_pool
from allocator.service import create_app
from allocator.store import Store
from allocator.telemetry import ActivityProfile
from pipelines.build import build
from pipelines.connectors.allocator import AllocatorClient
from pipelines.connectors.http import RetryPolicy
from pipelines.connectors.scrape import DcgmConfig, Scraper, write_round
from pipelines.contracts import Mode
from pipelines.enforcement.allocator import AllocatorEnforcer
from pipelines.governance.outbox import Outbox
from pipelines.governance.tick import TickReport, governance_tick
from pipelines.ingest import ingest_partition, record_scrape_gaps
from pipelines.policies.catalog import PolicyCatalog, load_catalog
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow  # the live allocator, ingests and builds

T0 = dt.datetime(2026, 11, 2, 9, 0, 0)
DAY = T0.date()
ADMIN, BOT, VISION = "admin-token-0123456789", "bot-token-0123456789ab", "vision-token-012345678"
TOKENS = {
    ADMIN: {"role": "admin", "name": "alice"},
    BOT: {"role": "governance_bot", "name": "gov-bot"},
    VISION: {"role": "tenant_member", "tenant": "vision", "name": "vic"},
}
POOL = {
    "prices_per_gpu_hour": {"H100": 4.0},
    "preemption_grace_s": 0,
    "tenants": ["vision"],
    "nodes": [{"hosts": "h100-01", "node_pool": "h100", "gpu_model": "H100", "gpus": 2}],
    "queues": [{"name": "vision-train", "tenant": "vision", "gpu_models": ["H100"], "quota": {"H100": 2},
                "max_runtime_s": 86400, "templates": ["training"]}],
}
TRAINING = {"queue": "vision-train", "template": "training", "gpu_model": "H100", "gpus": 2,
            "expected_runtime_s": 4 * 3600, "checkpoint_policy": "hourly"}
BUSY_S = 600  # job A works 10 minutes, then idles
IDLE_FROM = 10
WINDOW, GRACE = 30, 15  # idle-allocation in models/policies/policies.yml: window 30 min, reclaim 900 s after
CLOSED = "http://127.0.0.1:9"  # nothing listens there: the allocator as seen while it is down
SOURCES = ("allocator_pool", "allocator_events", "allocator_audit", "dcgm_parquet", "governance_actions")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


@dataclass
class Loop:
    """A live allocator and the pipeline's side of the loop."""

    url: str
    store: Store
    clock: Clock
    warehouse: Warehouse
    catalog: PolicyCatalog
    outbox: Outbox
    scraper: Scraper
    profiles: dict[str, ActivityProfile]
    reports: dict[int, TickReport] = field(default_factory=dict)

    def client(self, url: str | None = None) -> AllocatorClient:
        return AllocatorClient(url or self.url, BOT, timeout_s=5, retry=RetryPolicy(retries=0))

    def enforcer(self, url: str | None = None) -> AllocatorEnforcer:
        return AllocatorEnforcer(url or self.url, BOT, timeout_s=5)

    def submit(self, body: dict, profile: ActivityProfile | None = None) -> str:
        r = requests.post(f"{self.url}/v1/jobs", json=body, headers=_auth(VISION), timeout=10)
        assert r.status_code == 201, r.text
        job_id = r.json()["job_id"]
        if profile is not None:
            self.profiles[job_id] = profile
        return job_id

    def job(self, job_id: str) -> dict:
        return requests.get(f"{self.url}/v1/jobs/{job_id}", headers=_auth(ADMIN), timeout=10).json()

    def minute(self, m: int, *, tick: bool = True, allocator_url: str | None = None,
               enforcer_url: str | None = None) -> TickReport | None:
        """Virtual minute m: the clock, the engine's timers, one scrape round, one governance tick."""
        self.clock.now = T0 + dt.timedelta(minutes=m)
        self.store.tick(self.clock.now)
        scrape = self.scraper.scrape_round(self.clock.now)
        write_round(self.warehouse.landing, scrape)
        record_scrape_gaps(self.warehouse, scrape.gaps)
        if not tick:
            return None
        report = governance_tick(
            self.clock.now, landing=self.warehouse.landing, catalog=self.catalog, outbox=self.outbox,
            client=self.client(allocator_url), enforcers={"allocator": self.enforcer(enforcer_url)})
        self.reports[m] = report
        return report

    def audit(self) -> list[dict]:
        return self.store.audit(0, 100000)[0]

    def enforcement(self) -> list[tuple[str, str]]:
        return [(a["action"], a["decision"]) for a in self.audit() if a["action"].startswith("enforcement.")]

    def decisions(self) -> list[dict]:
        files = sorted((self.warehouse.landing / "governance_actions").glob("*/*.jsonl"))
        return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _loop(tmp_path: Path, mode: Mode) -> Iterator[Loop]:
    clock, profiles = Clock(), {}
    store = Store(tmp_path / "allocator.db", parse_pool(json.loads(json.dumps(POOL)), "test pool: "))
    app = create_app(store, parse_tokens(json.dumps(TOKENS), "test tokens"), clock=clock, tick_interval_s=None,
                     profiles=profiles)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the allocator API did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    warehouse = Warehouse(tmp_path / "gpupool")
    # the bot's token: the allocator names the jobs on its GPUs (hpc_job) only to an admin or the bot
    scraper = Scraper(DcgmConfig(targets=[f"{url}/nodes/h100-01/metrics"], interval_s=5, connect_timeout_s=1,
                                 read_timeout_s=2, retries=0, bearer_token=BOT))
    outbox = Outbox(tmp_path / "outbox.db", warehouse.landing, writer="sensor")
    loop = Loop(url, store, clock, warehouse, load_catalog().with_mode(mode), outbox, scraper, profiles)
    try:
        yield loop
    finally:
        scraper.close()
        outbox.close()
        server.should_exit = True
        thread.join(timeout=10)
        store.close()


@pytest.fixture
def enforce(tmp_path: Path) -> Iterator[Loop]:
    yield from _loop(tmp_path, Mode.ENFORCE)


@pytest.fixture
def shadow(tmp_path: Path) -> Iterator[Loop]:
    yield from _loop(tmp_path, Mode.SHADOW)


def _start_jobs(loop: Loop) -> tuple[str, str]:
    a = loop.submit(TRAINING, ActivityProfile(level=0.7, busy_for_s=BUSY_S, idle_level=0.0))
    b = loop.submit({**TRAINING, "expected_runtime_s": 2 * 3600})
    assert loop.job(a)["state"] == "RUNNING" and loop.job(b)["state"] == "PENDING"
    return a, b


def _first(loop: Loop, action: str, status: str) -> int:
    """The minute of the first tick that recorded `<action> <status>`."""
    return min(m for m, r in loop.reports.items() if r.decisions.get(f"{action} {status}"))


def test_enforce_reminds_reclaims_and_the_waiting_job_runs(enforce: Loop):
    loop = enforce
    a, b = _start_jobs(loop)
    held_by_a = {(g["host"], g["gpu"]) for g in loop.job(a)["gpus"]}
    for m in range(62):
        report = loop.minute(m)
        assert report.ok, report.summary()

    remind_at, reclaim_at = _first(loop, "remind", "queued"), _first(loop, "reclaim", "queued")
    # the tick at minute 40 sees minutes 10..39 (a minute once it is over): 30 idle minutes
    assert remind_at == IDLE_FROM + WINDOW
    assert reclaim_at == remind_at + GRACE
    assert loop.reports[remind_at].delivery.answered == {"applied": 1}
    assert loop.reports[reclaim_at].delivery.answered == {"applied": 1}
    assert sum(sum(r.decisions.values()) for r in loop.reports.values()) == 2  # nothing else decided

    job_a, job_b = loop.job(a), loop.job(b)
    assert job_a["state"] == "CANCELLED" and job_a["ended_at"] == f"{T0 + dt.timedelta(minutes=reclaim_at):%Y-%m-%dT%H:%M:%S}Z"
    assert job_b["state"] == "RUNNING"
    assert {(g["host"], g["gpu"]) for g in job_b["gpus"]} == held_by_a == {("h100-01", 0), ("h100-01", 1)}
    assert loop.enforcement() == [("enforcement.remind", "applied"), ("enforcement.reclaim", "applied")]

    # the answers came back through the pulled audit log, and the decision log holds every step
    pulled = (loop.warehouse.landing / "allocator_audit" / DAY.isoformat() / "api.jsonl").read_text()
    assert pulled.count('"enforcement.reclaim"') == 1 and pulled.count('"enforcement.remind"') == 1
    lines = [(d["record"], d["action"], d["status"], d.get("outcome")) for d in loop.decisions()]
    assert lines == [("decision", "remind", "queued", None), ("answer", "remind", "answered", "applied"),
                     ("decision", "reclaim", "queued", None), ("answer", "reclaim", "answered", "applied")]

    # into the warehouse: the ledger shows each step, the GPU-hours freed and job B's use of them
    pool = requests.get(f"{loop.url}/v1/pool", headers=_auth(ADMIN), timeout=10).json()
    (loop.warehouse.landing / "allocator_pool" / DAY.isoformat()).mkdir(parents=True)
    (loop.warehouse.landing / "allocator_pool" / DAY.isoformat() / "pool.json").write_text(json.dumps(pool))
    for source in SOURCES:
        report = ingest_partition(loop.warehouse, source, DAY)
        assert report.records_loaded > 0 and report.records_quarantined == 0, report.summary()
    build(loop.warehouse)
    with loop.warehouse.connect() as con:
        actions = con.sql("""
            select action, final_status, engine_outcome, outcome_source, is_ended_by_action, decided_at
            from marts.fct_governance_actions where job_id = ? order by step_index""", params=[a]).fetchall()
        ledger = con.sql("""
            select action_kind, record_source, policy, gpus_freed, recovered_gpu_hours, reused_gpu_hours,
                   would_end_basis, is_false_positive
            from marts.fct_reclaim_ledger where job_id = ? order by acted_at""", params=[a]).fetchall()
    assert [r[:5] for r in actions] == [
        ("remind", "answered", "applied", "audit", False),
        ("reclaim", "answered", "applied", "audit", True),
    ]
    assert [r[5] for r in actions] == [T0 + dt.timedelta(minutes=m) for m in (remind_at, reclaim_at)]
    remind, reclaim = ledger
    assert remind[:3] == ("remind", "audit", "idle-allocation")
    assert reclaim[:4] == ("reclaim", "audit", "idle-allocation", 2.0)
    # would have run to its declared 4 h: 2 GPUs x (4 h - the reclaim's minute)
    assert reclaim[4] == pytest.approx(2 * (4 - reclaim_at / 60))
    assert reclaim[5] > 0 and reclaim[6] == "declared expected run time" and reclaim[7] is False


def test_shadow_leaves_the_allocator_alone(shadow: Loop):
    loop = shadow
    a, b = _start_jobs(loop)
    for m in range(60):
        report = loop.minute(m, tick=m >= IDLE_FROM + WINDOW - 1)
        assert report is None or report.ok, report.summary()
    assert _first(loop, "remind", "shadow") == IDLE_FROM + WINDOW
    assert _first(loop, "reclaim", "shadow") == IDLE_FROM + WINDOW + GRACE
    assert loop.enforcement() == []
    assert loop.job(a)["state"] == "RUNNING" and loop.job(b)["state"] == "PENDING"
    logged = [(d["record"], d["action"], d["mode"], d["status"]) for d in loop.decisions()]
    assert logged == [("decision", "remind", "shadow", "shadow"), ("decision", "reclaim", "shadow", "shadow")]
    assert all(r.delivery.sent == 0 for r in loop.reports.values())


def test_actions_wait_while_the_allocator_is_down_and_go_once_it_is_back(enforce: Loop):
    loop = enforce
    a, b = _start_jobs(loop)
    reclaim_due = IDLE_FROM + WINDOW + GRACE
    outage = {reclaim_due: "enforcer", reclaim_due + 1: "enforcer", reclaim_due + 2: "all", reclaim_due + 3: "all"}
    for m in range(reclaim_due + 6):
        down = outage.get(m)
        report = loop.minute(m, tick=m >= IDLE_FROM + WINDOW - 1,
                             allocator_url=CLOSED if down == "all" else None,
                             enforcer_url=CLOSED if down else None)
        if down == "all":
            assert report.running_jobs is None and "nothing planned" in report.summary()
            assert report.delivery.sent == 1 and len(report.delivery.retried) == 1
        elif down == "enforcer":
            assert len(report.delivery.retried) == 1 and loop.job(a)["state"] == "RUNNING"
        if m == reclaim_due + 4:  # back
            assert report.ok and report.delivery.answered == {"applied": 1}
        if m == reclaim_due + 5:  # the next tick pulls the allocator's audit record of it
            assert report.pulled["audit"] == 1
    [reclaim] = [r for r in loop.outbox.rows() if r["action"] == "reclaim"]
    assert (reclaim["status"], reclaim["outcome"], reclaim["attempts"]) == ("answered", "applied", 5)
    assert loop.enforcement() == [("enforcement.remind", "applied"), ("enforcement.reclaim", "applied")]
    assert loop.job(a)["state"] == "CANCELLED" and loop.job(b)["state"] == "RUNNING"
    answers = [d for d in loop.decisions() if d["record"] == "answer" and d["action"] == "reclaim"]
    assert [(d["outcome"], d["delivery_attempts"]) for d in answers] == [("applied", 5)]
