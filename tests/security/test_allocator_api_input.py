"""The allocator's HTTP API cannot be broken by what its users send (issue 11, section 1).

Every refused request leaves the command log as it was, every answer is valid JSON, and a store
written before these checks (a lone surrogate or a NaN already logged) is still served.
"""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from allocator.auth import parse_tokens
from allocator.inputs import MAX_BODY_BYTES, dumps_safe
from allocator.service import create_app
from allocator.store import CommandResult, Store, apply_command
from tests.allocator.helpers import ADMIN, BOT, NLP, TOKENS, TRAINING, VISION, Clock, auth, small_pool

JSON = {"Content-Type": "application/json"}
STARTED = 1  # the command log holds one command once the app started: the grants of the tokens


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "allocator.db", small_pool())
    yield s
    s.close()


def make_client(store: Store, clock: Clock) -> TestClient:
    app = create_app(store, parse_tokens(json.dumps(TOKENS), "test tokens"), clock=clock, tick_interval_s=None)
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def client(store: Store, clock: Clock) -> TestClient:
    return make_client(store, clock)


def raw(client: TestClient, method: str, path: str, body: bytes | str, token: str = ADMIN, **headers):
    content = body.encode() if isinstance(body, str) else body
    return client.request(method, path, content=content, headers={**JSON, **auth(token), **headers})


def body_with(field: str, json_value: str, base: dict = TRAINING) -> str:
    """`base` as JSON with `field` set to the JSON text `json_value` (which json.dumps could not write)."""
    text = json.dumps({k: v for k, v in base.items() if k != field})
    return text[:-1] + f', "{field}": {json_value}}}'


def reads_are_fine(client: TestClient) -> None:
    for token in (ADMIN, BOT, VISION):
        for path in ("/v1/jobs", "/v1/events", "/v1/audit", "/v1/queues", "/v1/pool"):
            r = client.get(path, headers=auth(token))
            assert r.status_code == 200, (path, r.status_code, r.text)
            r.json()


# -- lone surrogates --------------------------------------------------------------------------------


def test_a_lone_surrogate_in_a_job_name_is_refused_and_nothing_is_committed(client: TestClient, store: Store):
    before = store.command_count()
    r = raw(client, "POST", "/v1/jobs", body_with("job_name", '"x\\ud800y"'))
    assert r.status_code == 422, r.text
    assert "surrogate" in r.text
    assert store.command_count() == before and not store.engine.jobs
    reads_are_fine(client)
    # the retry (no idempotency key) after the refusal does not make a second job: there was no first one
    r = raw(client, "POST", "/v1/jobs", body_with("job_name", '"x\\ud800y"'))
    assert r.status_code == 422 and not store.engine.jobs


@pytest.mark.parametrize("encoded", [b"\xed\xa0\x80", b"\xff", b"\xc3"])
def test_bytes_that_are_not_utf8_are_refused(client: TestClient, store: Store, encoded: bytes):
    body = body_with("job_name", '"NAME"').encode().replace(b"NAME", encoded)
    r = raw(client, "POST", "/v1/jobs", body)
    assert r.status_code == 422, r.text
    assert store.command_count() == STARTED


def test_a_lone_surrogate_in_a_cancel_reason_is_refused(client: TestClient, store: Store):
    job = client.post("/v1/jobs", json=TRAINING, headers=auth(VISION)).json()
    before = store.command_count()
    r = raw(client, "POST", f"/v1/jobs/{job['job_id']}/cancel", '{"reason": "\\udfff"}', token=VISION)
    assert r.status_code == 422
    assert store.command_count() == before and store.engine.jobs[job["job_id"]].state.value == "RUNNING"
    reads_are_fine(client)


def test_a_surrogate_in_a_key_or_deep_in_evidence_is_refused(client: TestClient, store: Store):
    job = client.post("/v1/jobs", json=TRAINING, headers=auth(VISION)).json()
    before = store.command_count()
    action = {"kind": "remind", "idempotency_key": "k1", "target": job["job_id"]}
    for evidence in ('{"\\ud800": 1}', '{"a": [{"b": "\\udc00"}]}', '{"a": NaN}', '{"a": -Infinity}'):
        r = raw(client, "POST", "/v1/actions", body_with("evidence", evidence, action), token=BOT)
        assert r.status_code == 422, (evidence, r.text)
    assert store.command_count() == before


# -- numbers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", '"3"', "true", "3.0", "0", "-1", "100000"])
def test_gpus_must_be_a_plain_bounded_integer(client: TestClient, store: Store, value: str):
    r = raw(client, "POST", "/v1/jobs", body_with("gpus", value))
    assert r.status_code == 422, (value, r.text)
    assert store.command_count() == STARTED


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("priority", "1000000000000000000000000000000"),
        ("priority", "-5"),
        ("priority", '"60"'),
        ("priority", "true"),
        ("quota", '{"H100": NaN}'),
        ("quota", '{"H100": Infinity}'),
        ("quota", '{"H100": 1e30}'),
        ("quota", '{"H100": "3"}'),
        ("max_runtime_s", "1e400"),
        ("max_runtime_s", "99999999999999"),
        ("preemptible", "1"),
        ("preemptible", '"yes"'),
        ("retry_budget", "1e3"),
    ],
)
def test_queue_changes_are_strict_and_bounded(client: TestClient, store: Store, field: str, value: str):
    before = store.command_count()
    r = raw(client, "PATCH", "/v1/queues/vision-train", f'{{"{field}": {value}}}')
    assert r.status_code == 422, (field, value, r.text)
    assert store.command_count() == before
    assert client.patch("/v1/queues/vision-train", json={"priority": 60}, headers=auth(ADMIN)).status_code == 200


@pytest.mark.parametrize("cursor", [str(2**63), str(10**30), "-1", "1e3", "nan"])
def test_a_cursor_out_of_range_is_422(client: TestClient, cursor: str):
    for path in ("/v1/events", "/v1/audit"):
        r = client.get(path, params={"cursor": cursor}, headers=auth(ADMIN))
        assert r.status_code == 422, (path, cursor, r.text)
    assert client.get("/v1/events", params={"cursor": str(2**63 - 1)}, headers=auth(ADMIN)).status_code == 200


# -- sizes ----------------------------------------------------------------------------------------------


def test_a_body_over_one_mib_is_413(client: TestClient, store: Store):
    r = client.post("/v1/jobs", json={**TRAINING, "job_name": "x" * (20 * 1024 * 1024)}, headers=auth(ADMIN))
    assert r.status_code == 413
    r = client.post("/v1/jobs", json={**TRAINING, "job_name": "x" * MAX_BODY_BYTES}, headers=auth(ADMIN))
    assert r.status_code == 413
    assert store.command_count() == STARTED and not store.engine.jobs


def test_every_string_field_has_a_limit(client: TestClient, store: Store):
    long = "x" * 5000
    job = client.post("/v1/jobs", json=TRAINING, headers=auth(VISION)).json()
    before = store.command_count()
    refused = [
        ("POST", "/v1/jobs", {**TRAINING, "job_name": long}),
        ("POST", "/v1/jobs", {**TRAINING, "queue": long}),
        ("POST", "/v1/jobs", {**TRAINING, "checkpoint_policy": long}),
        ("POST", f"/v1/jobs/{job['job_id']}/cancel", {"reason": long}),
        ("POST", f"/v1/jobs/{job['job_id']}/finish", {"reason": long}),
        ("POST", "/v1/actions", {"kind": "remind", "idempotency_key": "k", "target": long}),
        ("POST", "/v1/actions", {"kind": "remind", "idempotency_key": "k", "target": job["job_id"], "reason": long}),
        ("POST", "/v1/actions", {"kind": "remind", "idempotency_key": "k", "target": job["job_id"],
                                 "evidence": {"windows": ["x" * 1000] * 300}}),
        ("POST", "/v1/actions", {"kind": "remind", "idempotency_key": "k", "target": job["job_id"],
                                 "evidence": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}}),
        ("PATCH", "/v1/queues/vision-train", {"gpu_models": ["H100"] * 1000}),
        ("PATCH", "/v1/queues/vision-train", {"shared_with": [long]}),
        ("PATCH", "/v1/queues/vision-train", {"quota": {long: 1}}),
    ]
    for method, path, body in refused:
        token = BOT if path.endswith("/finish") or path == "/v1/actions" else ADMIN
        r = client.request(method, path, json=body, headers=auth(token))
        assert r.status_code == 422, (path, str(body)[:80], r.status_code, r.text[:200])
    assert store.command_count() == before
    assert client.get("/v1/jobs", params={"queue": long}, headers=auth(ADMIN)).status_code == 422
    assert client.get(f"/v1/jobs/{long}", headers=auth(ADMIN)).status_code == 422
    assert client.patch(f"/v1/queues/{long}", json={"priority": 1}, headers=auth(ADMIN)).status_code == 422


def test_deeply_nested_json_is_refused(client: TestClient, store: Store):
    for depth in (50, 100_000):
        body = '{"kind": "remind", "idempotency_key": "k", "target": "j", "evidence": {"a": ' + "[" * depth
        body += "]" * depth + "}}"
        r = raw(client, "POST", "/v1/actions", body, token=BOT)
        assert r.status_code == 422, (depth, r.text[:200])
    assert store.command_count() == STARTED


# -- a committed write always answers ----------------------------------------------------------------


def test_the_answer_to_a_committed_command_cannot_fail(client: TestClient, store: Store, monkeypatch):
    """Should a committed command's answer hold what JSON cannot carry, it is escaped, not a 500."""
    execute = store.execute

    def poisoned(*args, **kwargs) -> CommandResult:
        result = execute(*args, **kwargs)
        return CommandResult(result.seq, result.status, {**result.body, "note": "\ud800", "ratio": float("nan")})

    monkeypatch.setattr(store, "execute", poisoned)
    r = client.post("/v1/jobs", json=TRAINING, headers=auth(ADMIN))
    assert r.status_code == 201
    assert r.json()["note"] == "\\ud800" and r.json()["ratio"] is None
    assert store.command_count() == 2  # the principals' grant and the submit
    assert dumps_safe({"a": ["\udfff", float("inf")]}) == b'{"a":["\\\\udfff",null]}'


# -- a store written by an earlier version ------------------------------------------------------------


def legacy_store(path: Path, snapshot: bool) -> str:
    """A store as the earlier API left it: a job named with a lone surrogate, a cancel reason with one
    and an action whose evidence holds a NaN, logged the way that code logged them (applied, then
    `_commit` with json.dumps), plus an event record given a NaN straight in SQLite."""
    store = Store(path, small_pool())
    now = Clock()()
    spec = {**TRAINING, "tenant": "vision", "user": "vic", "job_name": "bad \ud800 name", "share_mode": "whole"}
    commands = [("submit", {"spec": spec}, "vic")]
    body = apply_command(store.engine, *commands[0][:2], "vic", now)
    job_id = body["job_id"]
    events, audits = store._sink.drain()
    store._commit("submit", {"spec": spec}, "vic", now, 200, body, None, events, audits)
    action = {"kind": "remind", "idempotency_key": "old-1", "target": job_id, "actor": "gov-bot", "reason": "r",
              "policy": None, "policy_version": None, "evidence": {"idle": float("nan"), "note": "\udc80"},
              "runtime_s": None, "quota": None, "dry_run": False}
    for kind, payload, actor in [
        ("action", {"action": action, "actor_role": "governance_bot"}, "gov-bot"),
        ("cancel", {"job_id": job_id, "reason": "oops \udbff"}, "vic"),
    ]:
        body = apply_command(store.engine, kind, payload, actor, now)
        events, audits = store._sink.drain()
        store._commit(kind, payload, actor, now, 200, body, None, events, audits)
    store.close(snapshot=snapshot)
    with sqlite3.connect(path) as db:
        seq, record = db.execute("select seq, record from events order by seq limit 1").fetchone()
        record = {**json.loads(record), "value": float("nan"), "text": "\ud800"}
        db.execute("update events set record = ? where seq = ?", (json.dumps(record), seq))
    return job_id


def strings(value) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*map(strings, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(strings, value)) if value else set()
    return set()


@pytest.mark.parametrize("snapshot", [False, True], ids=["replayed", "from-snapshot"])
def test_a_legacy_store_with_bad_records_is_served_after_a_restart(tmp_path: Path, snapshot: bool):
    path = tmp_path / "allocator.db"
    job_id = legacy_store(path, snapshot)
    store = Store(path, small_pool())
    try:
        assert store.replay_divergences == 0
        client = make_client(store, Clock())
        reads_are_fine(client)
        job = client.get(f"/v1/jobs/{job_id}", headers=auth(ADMIN)).json()
        assert job["spec"]["job_name"] == "bad \\ud800 name" and job["state"] == "CANCELLED"
        events = client.get("/v1/events", headers=auth(ADMIN)).json()["records"]
        assert events[0]["value"] is None and events[0]["text"] == "\\ud800"
        records = events + client.get("/v1/audit", headers=auth(BOT)).json()["records"]
        assert "cancelled by vic: oops \\udbff" in strings(records)  # the cancel's reason, escaped
        # the service keeps working on it: new jobs, and the old job's tenant reads its jobs
        assert client.post("/v1/jobs", json=TRAINING, headers=auth(VISION)).status_code == 201
        assert client.get("/v1/jobs", headers=auth(VISION)).status_code == 200
        assert client.get("/healthz").json()["status"] == "ok"
    finally:
        store.close()


# -- /metrics names no other tenant's job ----------------------------------------------------------------


def test_node_metrics_name_jobs_only_to_those_who_may_see_them(client: TestClient):
    vision = client.post("/v1/jobs", json={**TRAINING, "gpus": 2}, headers=auth(VISION)).json()
    nlp = client.post("/v1/jobs", json={**TRAINING, "queue": "nlp-train", "gpus": 2}, headers=auth(NLP)).json()
    hosts = {g["host"] for g in vision["gpus"] + nlp["gpus"]}
    for host in hosts:
        anonymous = client.get(f"/nodes/{host}/metrics")
        assert anonymous.status_code == 200
        assert "hpc_job" not in anonymous.text
        assert vision["job_id"] not in anonymous.text and nlp["job_id"] not in anonymous.text
        for token in (ADMIN, BOT):
            text = client.get(f"/nodes/{host}/metrics", headers=auth(token)).text
            for job in (vision, nlp):
                assert (f'hpc_job="{job["job_id"]}"' in text) == (host in {g["host"] for g in job["gpus"]})
        text = client.get(f"/nodes/{host}/metrics", headers=auth(VISION)).text
        assert nlp["job_id"] not in text
        assert (vision["job_id"] in text) == (host in {g["host"] for g in vision["gpus"]})
        # the values are the same for everyone: only the label differs
        assert anonymous.text.count("DCGM_FI_DEV_FB_USED{") == text.count("DCGM_FI_DEV_FB_USED{")
    r = client.get(f"/nodes/{min(hosts)}/metrics", headers=auth("not-a-token-0123456789"))
    assert r.status_code == 401


def test_an_operator_finds_and_repairs_a_legacy_store(tmp_path: Path):
    from click.testing import CliRunner

    from allocator.cli import allocator

    path = tmp_path / "allocator.db"
    job_id = legacy_store(path, snapshot=True)
    runner = CliRunner()
    found = runner.invoke(allocator, ["check-store", "--db", str(path)])
    assert found.exit_code == 1, found.output
    assert "commands.payload 1: $.spec.job_name: a lone UTF-16 surrogate" in found.output
    assert "events.record" in found.output and "snapshots.state" in found.output
    repaired = runner.invoke(allocator, ["check-store", "--db", str(path), "--repair"])
    assert repaired.exit_code == 0 and "repaired" in repaired.output, repaired.output
    again = runner.invoke(allocator, ["check-store", "--db", str(path)])
    assert again.exit_code == 0 and "clean" in again.output, again.output
    store = Store(path, small_pool())  # rebuilt from the repaired log: the same records, stored escaped
    try:
        assert store.replay_divergences == 0 and store.replayed_commands == 3
        assert store.engine.jobs[job_id].spec.job_name == "bad \\ud800 name"
        reads_are_fine(make_client(store, Clock()))
    finally:
        store.close()
