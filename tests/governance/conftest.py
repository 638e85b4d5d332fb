"""Catalogs, findings and a real allocator API on a loopback port, for the governance tests.

The catalog is the real `PolicyCatalog` built in code (two policies: idle-allocation, remind then
reclaim after 15 min; oversized, a recommendation), so that exemptions and modes go through the
catalog's own rules. Findings are FINDING_SCHEMA frames built from keyword overrides.
"""
from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
import requests
import uvicorn

from allocator.auth import parse_tokens
from allocator.model import Action, ActionResult, Outcome
from allocator.pool import parse_pool
from allocator.service import create_app
from allocator.store import Store
from pipelines.contracts import FINDING_SCHEMA, Mode, PolicyKind, StepAction
from pipelines.policies.catalog import Policy, PolicyCatalog
from pipelines.policies.model import Exemption, RateLimits, Step, finding_key
from tests.allocator.helpers import ADMIN, BOT, INFERENCE, POOL_DOC, TOKENS, TRAINING, VISION

T0 = dt.datetime(2026, 11, 2, 9, 0, 0)
GRACE_S = 900
__all__ = ["ADMIN", "BOT", "INFERENCE", "TRAINING", "VISION"]


def catalog(mode: Mode = Mode.ENFORCE, rate_limits: RateLimits | None = None,
            exemptions: tuple[Exemption, ...] = ()) -> PolicyCatalog:
    idle = Policy(
        name="idle-allocation", version="1", kind=PolicyKind.IDLE_ALLOCATION, mode=mode, description={},
        params={"activity_threshold": 0.05, "window_minutes": 30},
        steps=(Step(StepAction.REMIND, 0), Step(StepAction.RECLAIM, GRACE_S)),
    )
    oversized = Policy(
        name="oversized", version="2", kind=PolicyKind.OVERSIZED, mode=mode, description={}, params={},
        steps=(Step(StepAction.RECOMMEND, 0),),
    )
    return PolicyCatalog(version="test", rate_limits=rate_limits or RateLimits(), exemptions=exemptions,
                         policies={"idle-allocation": idle, "oversized": oversized})


def finding(job_id: str = "j-1", **fields: object) -> dict:
    """An idle-allocation finding detected at T0 (8 of 8 GPUs idle at 0.8% for 42 minutes)."""
    start = fields.pop("window_start_at", T0 - dt.timedelta(minutes=42))
    policy, version = fields.get("policy", "idle-allocation"), fields.get("policy_version", "1")
    attempt = fields.get("attempt", 1)
    row = {
        "finding_id": finding_key(policy, version, job_id, attempt, start.isoformat()),
        "policy": policy,
        "policy_version": version,
        "kind": "idle_allocation",
        "scope": "default",
        "source": "allocator",
        "job_id": job_id,
        "attempt": attempt,
        "tenant": "vision",
        "queue": "vision-train",
        "template": "training",
        "user_name": "vic",
        "gpu_model": "H100",
        "window_start_at": start,
        "window_end_at": T0,
        "detected_at": T0,
        "gpus_flagged": 8,
        "gpus_held": 8,
        "gpu_hours": 5.6,
        "metric": "activity",
        "observed": 0.008,
        "threshold": 0.05,
        "is_ongoing": True,
        "recommendation": None,
        "evidence": json.dumps({"idle_minutes": 42, "spikes_ignored": 1}),
    }
    row.update(fields)
    return row


def findings(*rows: dict) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=FINDING_SCHEMA)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@dataclass
class Allocator:
    url: str
    store: Store


@pytest.fixture
def allocator(tmp_path: Path) -> Iterator[Allocator]:
    """The allocator's real API (uvicorn, loopback, a free port) over a Store in tmp_path."""
    store = Store(tmp_path / "allocator.db", parse_pool(json.loads(json.dumps(POOL_DOC)), "test pool: "))
    app = create_app(store, parse_tokens(json.dumps(TOKENS), "test tokens"), clock=lambda: T0,
                     tick_interval_s=None)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the allocator API did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Allocator(f"http://127.0.0.1:{port}", store)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        store.close()


def submit(url: str, body: dict) -> dict:
    """Submit a job as the admin to the allocator at `url` (the `allocator` fixture's)."""
    r = requests.post(f"{url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


class Recorder:
    """An enforcer that answers `applied` and counts what it was sent (optionally slowly)."""

    engine = "allocator"

    def __init__(self, delay_s: float = 0.0):
        self.sent: list[str] = []
        self.delay_s = delay_s
        self.lock = threading.Lock()

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        with self.lock:
            self.sent.append(action.idempotency_key)
        time.sleep(self.delay_s)
        return ActionResult(action.idempotency_key, action.kind, action.target, Outcome.APPLIED, "ok")
