"""Drain and undrain in the built-in allocator: the engine's rules, then the same over the HTTP service.

A drained node or GPU takes no new placements (plain placement, preemption plans, reservations);
what runs there keeps running; undrain gives it back. Idempotent by key, every answer audited,
the drained state survives a restart of the service (SQLite store, snapshot or replay).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from allocator.auth import parse_tokens
from allocator.engine import Engine
from allocator.model import Action, ActionKind, JobState, Outcome, drain_target
from allocator.records import MemorySink
from allocator.service import create_app
from allocator.store import Store
from pipelines.enforcement.allocator import AllocatorEnforcer
from tests.allocator.conftest import at, experiment, make_engine, small_pool, training
from tests.allocator.helpers import ADMIN, BOT, TOKENS, TRAINING, VISION, Clock, all_pages, auth, submit
from tests.allocator.helpers import small_pool as service_pool
from tests.governance.conftest import allocator  # noqa: F401 - the API on a loopback port

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its test client; httpx works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def drain(target: str, key: str, reason: str = "xid 79 three times in 24 h", **fields) -> Action:
    return Action(ActionKind.DRAIN, key, target, "governance-bot", reason=reason, **fields)


def undrain(target: str, key: str, **fields) -> Action:
    return Action(ActionKind.UNDRAIN, key, target, "governance-bot", reason="health checks pass", **fields)


def hosts(job) -> set[str]:
    return {s.host for s in job.slots}


# -- the engine ----------------------------------------------------------------------------------


def test_a_drained_node_gets_no_new_work_running_work_stays_and_undrain_gives_it_back():
    engine, sink = make_engine()
    running = engine.submit(training("vision", gpus=4), at(0), "v")
    engine.schedule(at(0))
    assert hosts(running) == {"h-01"}
    for key, node in (("d-1", "h-01"), ("d-2", "h-02"), ("d-3", "h-03")):
        assert engine.apply_action(drain(node, key), at(1)).outcome == Outcome.APPLIED
    assert running.state == JobState.RUNNING and hosts(running) == {"h-01"}  # untouched
    waiting = engine.submit(training("nlp", gpus=4), at(2), "n")
    assert engine.schedule(at(2)) == [] and waiting.state == JobState.PENDING
    result = engine.apply_action(undrain("h-03", "u-3"), at(3))
    assert result.outcome == Outcome.APPLIED and result.effects["drained"] is False
    assert engine.schedule(at(3)) == [waiting] and hosts(waiting) == {"h-03"}
    engine.finish(running.job_id, at(4))
    again = engine.submit(training("vision", gpus=4), at(5), "v")
    assert engine.schedule(at(5)) == [] and again.state == JobState.PENDING  # h-01 is free but drained
    assert set(engine.drained()) == {"h-01", "h-02"}
    audits = [(a["action"], a["object_kind"], a["object_name"], a["decision"]) for a in sink.audits]
    assert audits == [("enforcement.drain", "node", "h-01", "applied"), ("enforcement.drain", "node", "h-02", "applied"),
                      ("enforcement.drain", "node", "h-03", "applied"),
                      ("enforcement.undrain", "node", "h-03", "applied")]
    assert sink.audits[0]["before"]["running_jobs"] == [running.job_id]
    assert sink.audits[0]["idempotency_key"] == "d-1" and sink.audits[0]["after"]["drained"] is True


def test_a_drained_gpu_is_skipped_and_its_node_still_takes_work():
    engine, _ = make_engine()
    engine.apply_action(drain("h-01/0", "d-gpu"), at(0))
    one = engine.submit(training("vision", gpus=1), at(0), "v")
    engine.schedule(at(0))
    assert [s.slot_id for s in one.slots] == ["h-01/1"]  # best fit on h-01, GPU 0 skipped
    whole = engine.submit(training("nlp", gpus=4), at(0), "n")
    engine.schedule(at(0))
    assert hosts(whole) == {"h-02"}  # h-01 has only 2 placeable GPUs left
    # node and GPU drains are separate targets
    engine.apply_action(drain("h-01", "d-node"), at(1))
    engine.apply_action(undrain("h-01", "u-node"), at(2))
    assert set(engine.drained()) == {"h-01/0"}
    refused = engine.apply_action(undrain("h-01/1", "u-gpu1"), at(2))
    assert refused.outcome == Outcome.REFUSED and refused.reason == "gpu h-01/1 is not drained"


def test_no_preemption_takes_slots_of_a_drained_node():
    engine, _ = make_engine()
    backfill = [engine.submit(experiment(gpus=4), at(0), "r") for _ in range(3)]
    engine.schedule(at(0))
    assert [hosts(j) for j in backfill] == [{"h-01"}, {"h-02"}, {"h-03"}]
    engine.apply_action(drain("h-01", "d-1"), at(1))
    owner = engine.submit(training("vision", gpus=4), at(2), "v")
    engine.schedule(at(2))
    assert owner.state == JobState.RUNNING and hosts(owner) != {"h-01"}
    assert backfill[0].state == JobState.RUNNING  # the job on the drained node was no victim


def test_reservation_work_waits_while_its_gpus_are_drained():
    paper = {"name": "paper", "tenant": "vision", "hosts": ["h-03"], "start": "2026-11-02T08:00:00Z",
             "end": "2026-11-02T14:00:00Z"}
    engine, _ = make_engine(reservations=[paper])
    engine.tick(at(0))
    engine.apply_action(drain("h-03/2", "d-r"), at(0))
    job = engine.submit(experiment("vision", gpus=4, reservation="paper"), at(0), "v")
    assert engine.schedule(at(0)) == []
    engine.apply_action(undrain("h-03/2", "u-r"), at(1))
    assert engine.schedule(at(1)) == [job] and hosts(job) == {"h-03"}


def test_refusals_idempotency_and_dry_run():
    engine, sink = make_engine()
    first = engine.apply_action(drain("h-02", "d-1"), at(0))
    again = engine.apply_action(drain("h-02", "d-1"), at(1))
    assert again.outcome == Outcome.ALREADY_DONE and again.effects == first.effects
    assert again.reason.startswith("already applied at 2026-11-02T08:00:00Z")
    other_key = engine.apply_action(drain("h-02", "d-2"), at(1))
    assert other_key.outcome == Outcome.REFUSED
    assert other_key.reason.startswith("node h-02 is already drained (key d-1 at 2026-11-02T08:00:00Z")
    reused = engine.apply_action(drain("h-03", "d-1"), at(1))
    assert reused.outcome == Outcome.REFUSED and "was used for drain on h-02" in reused.reason
    assert engine.apply_action(drain("x-99", "d-3"), at(1)).reason == "no node x-99 in the pool"
    assert engine.apply_action(drain("h-01/7", "d-4"), at(1)).reason == "node h-01 has no GPU 7 (its GPUs: [0, 1, 2, 3])"
    assert "is not a node (node-07) or a GPU" in engine.apply_action(drain("h-01/a", "d-5"), at(1)).reason
    assert engine.apply_action(undrain("h-01", "u-1"), at(1)).reason == "node h-01 is not drained"
    hint = engine.apply_action(undrain("h-02/1", "u-2"), at(1)).reason
    assert hint == "gpu h-02/1 is not drained; its node h-02 is drained: undrain h-02"
    dry = engine.apply_action(undrain("h-02", "u-3", dry_run=True), at(2))
    assert dry.outcome == Outcome.DRY_RUN and set(engine.drained()) == {"h-02"}
    assert engine.apply_action(undrain("h-02", "u-3"), at(2)).outcome == Outcome.APPLIED  # the key was not used up
    decisions = [a["decision"] for a in sink.audits]
    assert decisions == ["applied", "already_done", "refused", "refused", "refused", "refused", "refused", "refused",
                         "refused", "dry_run", "applied"]


def test_the_drained_state_is_saved_and_restored():
    engine, _ = make_engine()
    engine.apply_action(drain("h-01", "d-1"), at(0))
    engine.apply_action(drain("h-02/3", "d-2"), at(0))
    state = json.loads(json.dumps(engine.state_dict()))
    restored = Engine.from_state(small_pool(), state, MemorySink())
    assert restored.drained() == engine.drained()
    assert restored.drained_slots() == {"h-01/0", "h-01/1", "h-01/2", "h-01/3", "h-02/3"}
    job = restored.submit(training("vision", gpus=3), at(1), "v")
    restored.schedule(at(1))
    assert [s.slot_id for s in job.slots] == ["h-02/0", "h-02/1", "h-02/2"]
    old = {k: v for k, v in state.items() if k != "drained"}  # saved before drains existed
    assert Engine.from_state(small_pool(), old, MemorySink()).drained() == {}
    with pytest.raises(ValueError, match="drained 'x-01'"):
        Engine.from_state(small_pool(), {**state, "drained": {"x-01": {}}}, MemorySink())


# -- the HTTP service ----------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path):
    store = Store(tmp_path / "allocator.db", service_pool())
    yield TestClient(create_app(store, parse_tokens(json.dumps(TOKENS), "test tokens"), clock=Clock(),
                                tick_interval_s=None))
    store.close()


def body(kind: str, target: str, key: str, **fields) -> dict:
    return {"kind": kind, "idempotency_key": key, "target": target, "reason": "xid 79", **fields}


def node_view(client: TestClient, host: str) -> dict:
    r = client.get("/v1/nodes", headers=auth(VISION))
    assert r.status_code == 200
    return next(n for n in r.json()["nodes"] if n["host"] == host)


def test_service_drains_and_undrains_with_the_enforcer_roles_only(client: TestClient):
    running = submit(client, VISION, TRAINING)
    host = running["gpus"][0]["host"]
    assert client.post("/v1/actions", json=body("drain", host, "d-1"), headers=auth(VISION)).status_code == 403
    first = client.post("/v1/actions", json=body("drain", host, "d-1"), headers=auth(BOT))
    second = client.post("/v1/actions", json=body("drain", host, "d-1"), headers=auth(BOT))
    assert first.status_code == second.status_code == 200
    assert (first.json()["outcome"], second.json()["outcome"]) == ("applied", "already_done")
    assert first.json()["effects"]["running_jobs"] == [running["job_id"]]
    view = node_view(client, host)
    assert view["drained"] and view["drain"]["idempotency_key"] == "d-1" and view["drain"]["actor"] == "gov-bot"
    assert all(g["drained"] and g["drain"] is None for g in view["gpus"])
    assert client.get(f"/v1/jobs/{running['job_id']}", headers=auth(ADMIN)).json()["state"] == "RUNNING"
    # a job that fits only on the drained node waits; the undrain places it there
    other = "h100-02" if host == "h100-01" else "h100-01"
    assert client.post("/v1/actions", json=body("drain", other, "d-2"), headers=auth(ADMIN)).json()["outcome"] == \
        "applied"
    waiting = submit(client, VISION, TRAINING)
    assert waiting["state"] == "PENDING"
    r = client.post("/v1/actions", json=body("undrain", host, "u-1"), headers=auth(BOT))
    assert r.status_code == 200 and r.json()["outcome"] == "applied"
    placed = client.get(f"/v1/jobs/{waiting['job_id']}", headers=auth(ADMIN)).json()
    assert placed["state"] == "RUNNING" and placed["gpus"][0]["host"] == host
    assert not node_view(client, host)["drained"]
    audits = [(a["action"], a["object_kind"], a["object_name"], a["decision"], a["actor_role"])
              for a in all_pages(client, "/v1/audit", ADMIN) if a["action"].endswith("drain")]
    assert audits == [("enforcement.drain", "node", host, "applied", "governance_bot"),
                      ("enforcement.drain", "node", host, "already_done", "governance_bot"),
                      ("enforcement.drain", "node", other, "applied", "admin"),
                      ("enforcement.undrain", "node", host, "applied", "governance_bot")]


def test_service_refusals_are_answers_never_server_errors(client: TestClient):
    for kind, target in (("drain", "nowhere-01"), ("drain", "h100-01/9"), ("undrain", "h100-01")):
        r = client.post("/v1/actions", json=body(kind, target, f"k-{kind}-{target}"), headers=auth(BOT))
        assert r.status_code == 200 and r.json()["outcome"] == "refused", r.text
    assert "no node nowhere-01" in client.post("/v1/actions", json=body("drain", "nowhere-01", "k-x"),
                                               headers=auth(BOT)).json()["reason"]
    for bad in (body("drain", "h100-01/gpu0", "k-1"), body("drain", "/3", "k-2"),
                body("undrain", "h100-01", "k-3", runtime_s=60), body("drain", "h100-01", "k-4", quota={"H100": 1})):
        r = client.post("/v1/actions", json=bad, headers=auth(BOT))
        assert r.status_code == 422, r.text
    refused = [a for a in all_pages(client, "/v1/audit", ADMIN) if a["action"].endswith("drain")]
    assert [a["decision"] for a in refused] == ["refused"] * 4  # the 422s never reached the engine


@pytest.mark.parametrize("snapshot_every", [1, 500])
def test_service_keeps_drains_across_a_restart(tmp_path: Path, snapshot_every: int):
    tokens = parse_tokens(json.dumps(TOKENS), "test tokens")
    clock = Clock()
    first = Store(tmp_path / "a.db", service_pool(), snapshot_every=snapshot_every)
    c = TestClient(create_app(first, tokens, clock=clock, tick_interval_s=None))
    assert c.post("/v1/actions", json=body("drain", "h100-01/2", "d-1"), headers=auth(BOT)).json()["outcome"] == \
        "applied"
    assert c.post("/v1/actions", json=body("drain", "h100-02", "d-2"), headers=auth(BOT)).json()["outcome"] == \
        "applied"
    first.close()
    again = Store(tmp_path / "a.db", service_pool(), snapshot_every=snapshot_every)
    try:
        c = TestClient(create_app(again, tokens, clock=clock, tick_interval_s=None))
        assert again.replay_divergences == 0
        gpus = {g["gpu"]: g["drained"] for g in node_view(c, "h100-01")["gpus"]}
        assert gpus == {0: False, 1: False, 2: True, 3: False} and node_view(c, "h100-02")["drained"]
        job = submit(c, VISION, {**TRAINING, "gpus": 3})
        assert [(g["host"], g["gpu"]) for g in job["gpus"]] == [("h100-01", 0), ("h100-01", 1), ("h100-01", 3)]
        r = c.post("/v1/actions", json=body("drain", "h100-02", "d-2"), headers=auth(BOT))
        assert r.json()["outcome"] == "already_done"  # the key is remembered across the restart too
    finally:
        again.close()


def test_the_http_enforcer_drains_through_the_live_api(allocator):  # noqa: F811
    enforcer = AllocatorEnforcer(allocator.url, BOT)
    applied = enforcer.apply(drain("h100-01/3", "d-http", evidence={"xid": 79}), at(0))
    assert (applied.outcome, applied.kind, applied.target) == (Outcome.APPLIED, ActionKind.DRAIN, "h100-01/3")
    assert applied.effects["slots"] == ["h100-01/3"]
    assert enforcer.apply(drain("h100-01/3", "d-http"), at(0)).outcome == Outcome.ALREADY_DONE
    refused = enforcer.apply(undrain("h100-09", "u-none"), at(0))
    assert refused.outcome == Outcome.REFUSED and refused.reason == "no node h100-09 in the pool"
    malformed = enforcer.apply(drain("h100-01/x", "d-bad"), at(0))
    assert malformed.outcome == Outcome.REFUSED and "HTTP 422" in malformed.reason
    assert enforcer.apply(undrain("h100-01/3", "u-http"), at(0)).outcome == Outcome.APPLIED
    audit, _ = allocator.store.audit(0, 1000)
    assert [(a["action"], a["decision"]) for a in audit if a["action"].endswith("drain")] == [
        ("enforcement.drain", "applied"), ("enforcement.drain", "already_done"),
        ("enforcement.undrain", "refused"), ("enforcement.undrain", "applied")]


@pytest.mark.parametrize("target", ["node-07/03", "node-07/\u0663", "node-07/\u00b3", "node-07/+3", "node-07/ 3",
                                    "node-07/99999"])
def test_a_gpu_has_one_spelling(target):
    # another spelling would store a drain under a key /v1/nodes and undrain never look up
    with pytest.raises(ValueError, match="is not a node"):
        drain_target(target)
    assert drain_target("node-07/3") == ("node-07", 3) and drain_target("node-07/0") == ("node-07", 0)
