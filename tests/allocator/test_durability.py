"""Kill -9 the real server while writes are in flight: every acknowledged change survives the restart.

The server runs as `python -m allocator serve` on a free loopback port, with its state in a temporary
SQLite file. Writer threads submit jobs (each with an Idempotency-Key), send enforcement actions
and finish reports; the server is killed with SIGKILL mid-stream, restarted on the same file, and
every answer the writers got (HTTP 2xx) must be there, with no event logged twice.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.allocator.helpers import ADMIN, BOT, auth
from tests.allocator.server import running_server, start_server

TRAINING = {
    "queue": "vision-train",
    "template": "training",
    "gpu_model": "A100",
    "gpus": 1,
    "expected_runtime_s": 7200,
    "checkpoint_policy": "hourly",
}


@dataclass
class Acks:
    jobs: dict[str, dict] = field(default_factory=dict)  # idempotency key → acknowledged job
    actions: dict[str, dict] = field(default_factory=dict)  # idempotency key → acknowledged ActionResult
    finished: dict[str, dict] = field(default_factory=dict)  # job id → acknowledged job after finish
    in_flight: set[str] = field(default_factory=set)  # submit keys sent without an answer
    lock: threading.Lock = field(default_factory=threading.Lock)


def writer(url: str, name: str, acks: Acks, stop: threading.Event) -> None:
    """Submit, remind, finish, in a loop, until the server goes away or `stop` is set."""
    session = requests.Session()
    i = 0
    while not stop.is_set():
        i += 1
        key = f"{name}-{i}"
        with acks.lock:
            acks.in_flight.add(key)
        try:
            r = session.post(
                f"{url}/v1/jobs",
                json={**TRAINING, "job_name": key},
                headers={**auth(ADMIN), "Idempotency-Key": key},
                timeout=5,
            )
        except requests.RequestException:
            return
        if r.status_code != 201:
            return
        job = r.json()
        with acks.lock:
            acks.in_flight.discard(key)
            acks.jobs[key] = job
        try:
            if i % 3 == 0:
                action = {"kind": "remind", "idempotency_key": f"remind-{key}", "target": job["job_id"]}
                r = session.post(f"{url}/v1/actions", json=action, headers=auth(BOT), timeout=5)
                if r.ok:
                    with acks.lock:
                        acks.actions[action["idempotency_key"]] = r.json()
            elif i % 3 == 1 and job["state"] == "RUNNING":
                r = session.post(
                    f"{url}/v1/jobs/{job['job_id']}/finish",
                    json={"state": "COMPLETED"},
                    headers=auth(BOT),
                    timeout=5,
                )
                if r.ok:
                    with acks.lock:
                        acks.finished[job["job_id"]] = r.json()
        except requests.RequestException:
            return


def all_records(url: str, path: str, limit: int = 500) -> list[dict]:
    records, cursor = [], 0
    while True:
        page = requests.get(
            f"{url}{path}", params={"cursor": cursor, "limit": limit}, headers=auth(ADMIN), timeout=10
        ).json()
        records += page["records"]
        if page["next_cursor"] == cursor:
            return records
        cursor = page["next_cursor"]


@pytest.mark.slow
def test_kill_9_mid_stream_loses_no_acknowledged_change(tmp_path: Path):
    db = tmp_path / "allocator.db"
    acks = Acks()
    for round_ in range(
        3
    ):  # three crashes; snapshots every 25 commands, so restarts load one and replay the rest
        server = start_server(db, tmp_path, snapshot_every=25)
        stop = threading.Event()
        threads = [
            threading.Thread(target=writer, args=(server.url, f"r{round_}w{n}", acks, stop)) for n in range(3)
        ]
        for t in threads:
            t.start()
        target, deadline = len(acks.jobs) + 40, time.monotonic() + 30
        while len(acks.jobs) < target and time.monotonic() < deadline:
            time.sleep(0.005)
        server.kill()  # SIGKILL while the writers are mid-request
        for t in threads:
            t.join(timeout=10)
        assert len(acks.jobs) >= target, server.log.read_text()

    with running_server(db, tmp_path) as again:
        health = requests.get(f"{again.url}/healthz", timeout=5).json()
        assert health["replay_divergences"] == 0 and health["replayed_at_start"] <= 25
        for key, job in acks.jobs.items():
            r = requests.get(f"{again.url}/v1/jobs/{job['job_id']}", headers=auth(ADMIN), timeout=5)
            assert r.status_code == 200, f"acknowledged job {job['job_id']} ({key}) lost"
            assert r.json()["spec"]["job_name"] == key
            assert r.json()["submitted_at"] == job["submitted_at"]
        for job_id, finished in acks.finished.items():
            assert (
                requests.get(f"{again.url}/v1/jobs/{job_id}", headers=auth(ADMIN), timeout=5).json()["state"]
                == finished["state"]
                == "COMPLETED"
            )
        audits = all_records(again.url, "/v1/audit")
        audited = {a["idempotency_key"] for a in audits if a["action"] == "enforcement.remind"}
        assert set(acks.actions) <= audited
        # a request whose answer was lost is retried safely with its Idempotency-Key
        for key in sorted(acks.in_flight):
            r = requests.post(
                f"{again.url}/v1/jobs",
                json={**TRAINING, "job_name": key},
                headers={**auth(ADMIN), "Idempotency-Key": key},
                timeout=5,
            )
            assert r.status_code == 201
        events = all_records(again.url, "/v1/events")
        ids = [e["event_id"] for e in events]
        assert len(ids) == len(set(ids)), "an event was logged twice"
        submits = [e["job_name"] for e in events if e["type"] == "submit"]
        assert len(submits) == len(set(submits)), "a retried submission made a second job"
        assert set(acks.jobs) | acks.in_flight == set(submits)


@pytest.mark.slow
def test_a_clean_stop_snapshots_so_the_next_start_replays_nothing(tmp_path: Path):
    db = tmp_path / "allocator.db"
    server = start_server(db, tmp_path)
    ids = [
        requests.post(f"{server.url}/v1/jobs", json=TRAINING, headers=auth(ADMIN), timeout=5).json()["job_id"]
        for _ in range(5)
    ]
    server.process.terminate()  # SIGTERM, as a service manager stops it
    server.process.wait(timeout=10)
    with running_server(db, tmp_path) as again:
        health = requests.get(f"{again.url}/healthz", timeout=5).json()
        assert (health["replayed_at_start"], health["jobs"]) == (0, 5)
        listed = requests.get(f"{again.url}/v1/jobs", headers=auth(ADMIN), timeout=5).json()
        assert [j["job_id"] for j in listed["jobs"]] == ids
