"""The allocator's HTTP API under test: a small pool, tokens per role, job bodies, a hand-driven
clock and request helpers, shared by the allocator, governance and security tests."""
from __future__ import annotations

import datetime as dt
import json
import warnings
from pathlib import Path

import pyarrow.parquet as pq

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its test client; httpx works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from allocator.pool import parse_pool

POOL_DOC = {
    "prices_per_gpu_hour": {"H100": 4.0, "A100": 2.5},
    "preemption_grace_s": 0,
    "tenants": ["vision", "nlp", "platform"],
    "nodes": [
        {"hosts": "h100-01..h100-02", "node_pool": "h100", "gpu_model": "H100", "gpus": 4},
        {
            "hosts": "a100-01",
            "node_pool": "a100-mig",
            "gpu_model": "A100",
            "gpus": 2,
            "share_mode": "mig",
            "mig_layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        },
    ],
    "queues": [
        {
            "name": "vision-train",
            "tenant": "vision",
            "gpu_models": ["H100", "A100"],
            "quota": {"H100": 3},
            "max_runtime_s": 86400,
            "templates": ["training", "interactive"],
        },
        {
            "name": "nlp-train",
            "tenant": "nlp",
            "gpu_models": ["H100"],
            "quota": {"H100": 3},
            "templates": ["training"],
        },
        {
            "name": "platform-serve",
            "tenant": "platform",
            "shared_with": ["*"],
            "gpu_models": ["H100", "A100"],
            "quota": {"H100": 2, "A100": 1},
            "priority": 90,
            "preemptible": False,
            "can_borrow": False,
            "templates": ["inference"],
        },
    ],
}

ADMIN, BOT, VISION, NLP = (
    "admin-token-0123456789",
    "bot-token-0123456789ab",
    "vision-token-012345678",
    "nlp-token-0123456789ab",
)
TOKENS = {
    ADMIN: {"role": "admin", "name": "alice"},
    BOT: {"role": "governance_bot", "name": "gov-bot"},
    VISION: {"role": "tenant_member", "tenant": "vision", "name": "vic"},
    NLP: {"role": "tenant_member", "tenant": "nlp", "name": "nina"},
}
T0 = dt.datetime(2026, 11, 2, 8, 0, 0)
TRAINING = {
    "queue": "vision-train",
    "template": "training",
    "gpu_model": "H100",
    "gpus": 1,
    "expected_runtime_s": 7200,
    "checkpoint_policy": "hourly",
}
INFERENCE = {
    "queue": "platform-serve",
    "template": "inference",
    "gpu_model": "H100",
    "gpus": 1,
    "min_replicas": 1,
    "rollback": "previous-revision",
}


def small_pool():
    return parse_pool(json.loads(json.dumps(POOL_DOC)), "test pool: ")


class Clock:
    """The service's clock: moves only when a test says so."""

    def __init__(self, start: dt.datetime = T0):
        self.now = start

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def submit(client: TestClient, token: str, body: dict, **extra) -> dict:
    r = client.post("/v1/jobs", json={**body, **extra}, headers=auth(token))
    assert r.status_code == 201, r.text
    return r.json()


def all_pages(client: TestClient, path: str, token: str, limit: int = 1000) -> list[dict]:
    records, cursor = [], 0
    while True:
        page = client.get(path, params={"cursor": cursor, "limit": limit}, headers=auth(token)).json()
        records += page["records"]
        if page["next_cursor"] == cursor:
            return records
        cursor = page["next_cursor"]


# one running job per share mode (whole, MIG, time-sliced) on the built-in pool (allocator/pools/default.yaml)
SHARE_MODE_JOBS = [
    {
        "queue": "vision-train",
        "template": "training",
        "gpu_model": "H100",
        "gpus": 2,
        "expected_runtime_s": 7200,
        "checkpoint_policy": "hourly",
        "job_name": "whole",
    },
    {
        "queue": "vision-train",
        "template": "training",
        "gpu_model": "A100",
        "gpus": 1,
        "share_mode": "mig",
        "mig_profile": "1g.10gb",
        "expected_runtime_s": 7200,
        "checkpoint_policy": "hourly",
        "job_name": "mig",
    },
    {
        "queue": "speech-train",
        "template": "training",
        "gpu_model": "L40S",
        "gpus": 1,
        "share_mode": "timeslice",
        "expected_runtime_s": 7200,
        "checkpoint_policy": "hourly",
        "job_name": "shared",
    },
]


def column_encodings(path: Path) -> dict[str, set[str]]:
    """The Parquet encodings of each column of a file, over all its row groups."""
    meta = pq.ParquetFile(path).metadata
    found: dict[str, set[str]] = {}
    for group in range(meta.num_row_groups):
        for i in range(meta.num_columns):
            column = meta.row_group(group).column(i)
            found.setdefault(column.path_in_schema, set()).update(column.encodings)
    return found
