"""The allocator's HTTP API in process (FastAPI's TestClient) over a small pool and a hand-driven clock."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its test client; httpx works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from allocator.auth import TOKENS_ENV, Role, TokenError, load_tokens, parse_tokens
from allocator.service import create_app
from allocator.store import Store
from pipelines.sources.allocator_log import parse_audit_log, parse_event_log, parse_pool_snapshot
from tests.allocator.helpers import (
    ADMIN,
    BOT,
    INFERENCE,
    NLP,
    TOKENS,
    TRAINING,
    VISION,
    Clock,
    all_pages,
    auth,
    small_pool,
    submit,
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "allocator.db", small_pool())
    yield s
    s.close()


@pytest.fixture
def client(store: Store, clock: Clock) -> TestClient:
    app = create_app(
        store, parse_tokens(json.dumps(TOKENS), "test tokens"), clock=clock, tick_interval_s=None
    )
    return TestClient(app)


# -- tokens ----------------------------------------------------------------------------------------


def test_tokens_parse_and_authenticate():
    table = parse_tokens(json.dumps(TOKENS), "t")
    assert len(table) == 4
    vic = table.authenticate(VISION)
    assert (vic.name, vic.role, vic.tenant) == ("vic", Role.TENANT_MEMBER, "vision")
    assert table.authenticate("not-a-configured-token") is None
    assert table.authenticate("") is None
    assert [p.name for p in table.principals()] == ["alice", "gov-bot", "nina", "vic"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"short": {"role": "admin", "name": "a"}}', "entry 1: token shorter than 16"),
        ('{"0123456789abcdef": {"role": "root", "name": "a"}}', "role 'root' is not one of"),
        ('{"0123456789abcdef": {"role": "tenant_member", "name": "a"}}', "needs a tenant"),
        ('{"0123456789abcdef": {"role": "admin", "name": "a", "tenant": "x"}}', "only a tenant_member"),
        ('{"0123456789abcdef": {"role": "admin"}}', "name missing"),
        ('{"0123456789abcdef": {"role": "admin", "name": "a", "scope": 1}}', "unknown field(s) ['scope']"),
    ],
)
def test_tokens_reject_bad_configuration(text: str, message: str):
    with pytest.raises(TokenError, match="^t: ") as info:
        parse_tokens(text, "t")
    assert message in str(info.value)


def test_tokens_from_environment_or_file(tmp_path: Path):
    assert len(load_tokens(environ={TOKENS_ENV: json.dumps(TOKENS)})) == 4
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({ADMIN: TOKENS[ADMIN]}))
    assert len(load_tokens(path, environ={TOKENS_ENV: json.dumps(TOKENS)})) == 1  # the file wins
    with pytest.raises(TokenError, match=TOKENS_ENV):
        load_tokens(environ={})
    with pytest.raises(TokenError, match="tokens file .*missing.json"):
        load_tokens(tmp_path / "missing.json")


# -- authentication and roles --------------------------------------------------------------------


def test_no_or_unknown_token_is_401_but_health_and_metrics_are_open(client: TestClient):
    r = client.get("/v1/jobs")
    assert r.status_code == 401 and r.json() == {"detail": "missing bearer token"}
    assert r.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/jobs", headers=auth("wrong-token-0123456789")).status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": f"Basic {ADMIN}"}).status_code == 401
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/nodes/h100-01/metrics").status_code == 200


def test_roles_are_enforced_with_403(client: TestClient):
    job = submit(client, VISION, TRAINING)
    assert client.post("/v1/jobs", json=TRAINING, headers=auth(BOT)).status_code == 403
    r = client.post(f"/v1/jobs/{job['job_id']}/finish", json={"state": "COMPLETED"}, headers=auth(VISION))
    assert r.status_code == 403 and "tenant_member may not" in r.json()["detail"]
    action = {"kind": "remind", "idempotency_key": "k1", "target": job["job_id"]}
    assert client.post("/v1/actions", json=action, headers=auth(VISION)).status_code == 403
    assert (
        client.patch("/v1/queues/vision-train", json={"priority": 60}, headers=auth(BOT)).status_code == 403
    )
    assert client.post("/v1/jobs/" + job["job_id"] + "/cancel", headers=auth(BOT)).status_code == 403


def test_tenant_member_submits_as_itself_in_its_tenant(client: TestClient):
    job = submit(client, VISION, TRAINING)
    assert (job["tenant"], job["user"], job["state"]) == ("vision", "vic", "RUNNING")
    assert job["gpus"][0]["host"].startswith("h100-")
    r = client.post("/v1/jobs", json={**TRAINING, "tenant": "nlp"}, headers=auth(VISION))
    assert r.status_code == 403
    r = client.post("/v1/jobs", json={**TRAINING, "user": "somebody-else"}, headers=auth(VISION))
    assert r.status_code == 403
    # a queue shared with every tenant takes the member's tenant
    shared = submit(client, VISION, INFERENCE)
    assert (shared["tenant"], shared["queue"]) == ("vision", "platform-serve")
    # an admin submits for anyone; the tenant defaults to the queue's
    other = submit(client, ADMIN, {**TRAINING, "queue": "nlp-train", "user": "nate"})
    assert (other["tenant"], other["user"]) == ("nlp", "nate")


def test_tenant_isolation(client: TestClient):
    mine = submit(client, VISION, TRAINING)
    theirs = submit(client, NLP, {**TRAINING, "queue": "nlp-train"})
    # another tenant's job does not exist for the member: 404, not 403, so that ids do not leak
    for method, path in [
        ("get", f"/v1/jobs/{theirs['job_id']}"),
        ("post", f"/v1/jobs/{theirs['job_id']}/cancel"),
    ]:
        r = client.request(method, path, headers=auth(VISION))
        assert r.status_code == 404 and r.json() == {"detail": f"job {theirs['job_id']} not found"}
    unknown = client.get("/v1/jobs/j-999999", headers=auth(VISION))
    assert unknown.status_code == 404 and unknown.json() == {"detail": "job j-999999 not found"}
    assert client.get(f"/v1/jobs/{theirs['job_id']}", headers=auth(NLP)).json()["state"] == "RUNNING"

    listed = client.get("/v1/jobs", headers=auth(VISION)).json()
    assert [j["job_id"] for j in listed["jobs"]] == [mine["job_id"]]
    assert client.get("/v1/jobs", params={"tenant": "nlp"}, headers=auth(VISION)).json()["count"] == 0
    assert {j["job_id"] for j in client.get("/v1/jobs", headers=auth(BOT)).json()["jobs"]} == {
        mine["job_id"],
        theirs["job_id"],
    }

    events = all_pages(client, "/v1/events", VISION)
    assert events and {e["job_id"] for e in events} == {mine["job_id"]}
    assert {e["job_id"] for e in all_pages(client, "/v1/events", ADMIN)} == {mine["job_id"], theirs["job_id"]}
    queues = {q["name"] for q in client.get("/v1/queues", headers=auth(VISION)).json()["queues"]}
    assert queues == {"vision-train", "platform-serve"}  # its own and the shared one

    # the member cancels its own job; the other one keeps running
    r = client.post(f"/v1/jobs/{mine['job_id']}/cancel", json={"reason": "wrong data"}, headers=auth(VISION))
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED"
    assert client.get(f"/v1/jobs/{theirs['job_id']}", headers=auth(ADMIN)).json()["state"] == "RUNNING"
    finish = [e for e in all_pages(client, "/v1/events", VISION) if e["type"] == "finish"]
    assert finish[0]["reason"] == "cancelled by vic: wrong data"


def test_tenant_member_sees_only_its_tenants_audit(client: TestClient):
    mine = submit(client, VISION, TRAINING)
    theirs = submit(client, NLP, {**TRAINING, "queue": "nlp-train"})
    for target in (mine, theirs):
        action = {"kind": "remind", "idempotency_key": f"r-{target['job_id']}", "target": target["job_id"]}
        assert client.post("/v1/actions", json=action, headers=auth(BOT)).status_code == 200
    seen = all_pages(client, "/v1/audit", VISION)
    assert [a["object_name"] for a in seen if a["action"] == "enforcement.remind"] == [mine["job_id"]]
    assert {a.get("object_namespace") for a in seen} == {"vision"}
    assert len([a for a in all_pages(client, "/v1/audit", ADMIN) if a["action"] == "enforcement.remind"]) == 2


# -- bad input -----------------------------------------------------------------------------------


def test_validation_errors_name_the_field(client: TestClient):
    r = client.post("/v1/jobs", json={**TRAINING, "gpus": 0}, headers=auth(VISION))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "gpus"]
    r = client.post(
        "/v1/jobs", json={k: v for k, v in TRAINING.items() if k != "queue"}, headers=auth(VISION)
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "queue"]
    r = client.post("/v1/jobs", json={**TRAINING, "template": "batch"}, headers=auth(VISION))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "template"]
    r = client.post("/v1/jobs", json={**TRAINING, "gpu": 2}, headers=auth(VISION))
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "extra_forbidden"
    r = client.post(
        "/v1/actions",
        json={"kind": "cap_runtime", "idempotency_key": "k", "target": "j-1"},
        headers=auth(BOT),
    )
    assert r.status_code == 422 and "cap_runtime needs runtime_s" in r.json()["detail"][0]["msg"]
    r = client.get("/v1/events", params={"cursor": -1}, headers=auth(ADMIN))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "cursor"]
    r = client.patch("/v1/queues/vision-train", json={}, headers=auth(ADMIN))
    assert r.status_code == 422 and "no field to change" in r.json()["detail"][0]["msg"]
    job = submit(client, VISION, TRAINING)
    r = client.post(f"/v1/jobs/{job['job_id']}/finish", json={"state": "RUNNING"}, headers=auth(BOT))
    assert r.status_code == 422 and "final state" in r.json()["detail"][0]["msg"]


def test_admission_errors_are_422_with_the_rule(client: TestClient, store: Store):
    before = store.command_count()
    r = client.post("/v1/jobs", json={**TRAINING, "checkpoint_policy": None}, headers=auth(VISION))
    assert r.status_code == 422
    assert (
        r.json()["rule"] == "template.training.checkpoint_policy"
        and "checkpoint policy" in r.json()["message"]
    )
    r = client.post("/v1/jobs", json={**TRAINING, "queue": "nlp-train"}, headers=auth(VISION))
    assert r.status_code == 422 and r.json()["rule"] == "queue.tenant"
    r = client.post("/v1/jobs", json={**TRAINING, "queue": "no-such-queue"}, headers=auth(ADMIN))
    assert r.status_code == 422 and r.json()["rule"] == "queue.unknown"
    assert store.command_count() == before + 2  # refused commands are logged (and replayed) too
    assert client.get("/v1/jobs", headers=auth(ADMIN)).json()["count"] == 0


def test_unknown_targets_and_conflicts(client: TestClient):
    assert client.post("/v1/jobs/j-404/cancel", headers=auth(ADMIN)).status_code == 404
    assert client.post("/v1/jobs/j-404/finish", json={}, headers=auth(BOT)).status_code == 404
    assert client.post("/v1/proposals/qp-404/approve", headers=auth(ADMIN)).status_code == 404
    assert client.patch("/v1/queues/nope", json={"priority": 1}, headers=auth(ADMIN)).status_code == 404
    job = submit(client, VISION, TRAINING)
    assert client.post(f"/v1/jobs/{job['job_id']}/cancel", headers=auth(VISION)).status_code == 200
    r = client.post(f"/v1/jobs/{job['job_id']}/cancel", headers=auth(VISION))
    assert r.status_code == 409 and "already ended" in r.json()["detail"]


# -- node agent, scheduler, timers ---------------------------------------------------------------


def test_finish_frees_capacity_for_the_next_job(client: TestClient, clock: Clock):
    big = {**TRAINING, "gpus": 4}
    first = submit(client, VISION, big)
    second = submit(client, VISION, big)  # borrows the second node
    third = submit(client, VISION, big)
    assert [first["state"], second["state"], third["state"]] == ["RUNNING", "RUNNING", "PENDING"]
    pending = client.get("/v1/jobs", params={"state": ["PENDING", "COMPLETED"]}, headers=auth(VISION)).json()
    assert [j["job_id"] for j in pending["jobs"]] == [third["job_id"]]
    clock.advance(600)
    r = client.post(
        f"/v1/jobs/{first['job_id']}/finish", json={"state": "COMPLETED", "exit_code": 0}, headers=auth(BOT)
    )
    assert r.status_code == 200 and r.json()["state"] == "COMPLETED"
    # the scheduler ran with the mutation: the waiting job started on the freed GPUs
    now_third = client.get(f"/v1/jobs/{third['job_id']}", headers=auth(VISION)).json()
    assert now_third["state"] == "RUNNING" and now_third["started_at"] == "2026-11-02T08:10:00Z"


def test_timer_ends_a_job_at_its_cap(client: TestClient, store: Store, clock: Clock):
    job = submit(client, VISION, TRAINING, time_limit_s=60)
    assert store.tick(clock()) is None  # nothing due: no command logged
    clock.advance(61)
    result = store.tick(clock())
    assert result.status == 200 and result.body["changed"] == [job["job_id"]]
    assert client.get(f"/v1/jobs/{job['job_id']}", headers=auth(VISION)).json()["state"] == "TIMEOUT"


def test_background_timer_runs_in_the_app(store: Store, clock: Clock):
    app = create_app(store, parse_tokens(json.dumps(TOKENS), "t"), clock=clock, tick_interval_s=0.05)
    with TestClient(app) as client:  # the lifespan starts the timer
        job = submit(client, VISION, TRAINING, time_limit_s=30)
        clock.advance(31)
        for _ in range(100):
            state = client.get(f"/v1/jobs/{job['job_id']}", headers=auth(VISION)).json()["state"]
            if state == "TIMEOUT":
                break
            import time

            time.sleep(0.02)
        assert state == "TIMEOUT"


# -- enforcement actions -------------------------------------------------------------------------


def test_actions_are_idempotent_over_http(client: TestClient):
    job = submit(client, VISION, TRAINING)
    action = {
        "kind": "reclaim",
        "idempotency_key": "idle-j1-2026-11-02",
        "target": job["job_id"],
        "reason": "idle 45 min",
        "policy": "idle_allocation",
        "policy_version": "1",
        "evidence": {"idle_minutes": 45},
    }
    first = client.post("/v1/actions", json=action, headers=auth(BOT))
    second = client.post("/v1/actions", json=action, headers=auth(BOT))
    assert first.status_code == second.status_code == 200
    assert first.json()["outcome"] == "applied" and second.json()["outcome"] == "already_done"
    assert second.json()["effects"] == first.json()["effects"]
    finishes = [e for e in all_pages(client, "/v1/events", ADMIN) if e["type"] == "finish"]
    assert len(finishes) == 1 and finishes[0]["state"] == "CANCELLED"
    audits = [a for a in all_pages(client, "/v1/audit", ADMIN) if a["action"] == "enforcement.reclaim"]
    assert [a["decision"] for a in audits] == ["applied", "already_done"]
    assert audits[0]["actor"] == "gov-bot" and audits[0]["actor_role"] == "governance_bot"
    assert audits[0]["idempotency_key"] == "idle-j1-2026-11-02"


def test_inference_is_never_reclaimed(client: TestClient):
    service = submit(client, VISION, INFERENCE)
    r = client.post(
        "/v1/actions",
        json={"kind": "reclaim", "idempotency_key": "k-inf", "target": service["job_id"]},
        headers=auth(BOT),
    )
    assert r.status_code == 200 and r.json()["outcome"] == "refused"
    assert "inference" in r.json()["reason"]
    assert client.get(f"/v1/jobs/{service['job_id']}", headers=auth(ADMIN)).json()["state"] == "RUNNING"


def test_dry_run_changes_nothing(client: TestClient):
    job = submit(client, VISION, TRAINING)
    events_before = all_pages(client, "/v1/events", ADMIN)
    r = client.post(
        "/v1/actions",
        json={"kind": "preempt", "idempotency_key": "dry-1", "target": job["job_id"], "dry_run": True},
        headers=auth(BOT),
    )
    assert r.status_code == 200 and r.json()["outcome"] == "dry_run"
    after = client.get(f"/v1/jobs/{job['job_id']}", headers=auth(ADMIN)).json()
    assert (after["state"], after["attempt"], after["gpus"]) == ("RUNNING", 1, job["gpus"])
    assert all_pages(client, "/v1/events", ADMIN) == events_before
    # the key was not used up by the dry run
    r = client.post(
        "/v1/actions",
        json={"kind": "preempt", "idempotency_key": "dry-1", "target": job["job_id"]},
        headers=auth(BOT),
    )
    assert r.json()["outcome"] == "applied"


def test_quota_change_is_proposed_then_approved_by_an_admin_only(client: TestClient):
    proposal = {
        "kind": "quota_change",
        "idempotency_key": "cap-2026-11",
        "target": "vision-train",
        "quota": {"H100": 2},
        "reason": "used 40% of quota for 30 days",
    }
    r = client.post("/v1/actions", json=proposal, headers=auth(BOT))
    assert r.status_code == 200 and r.json()["outcome"] == "proposed"
    pid = r.json()["proposal_id"]
    listed = client.get("/v1/proposals", headers=auth(BOT)).json()["proposals"]
    assert [(p["proposal_id"], p["queue"], p["state"]) for p in listed] == [(pid, "vision-train", "proposed")]
    assert client.get("/v1/proposals", headers=auth(VISION)).status_code == 403
    assert client.post(f"/v1/proposals/{pid}/approve", headers=auth(BOT)).status_code == 403
    assert client.post(f"/v1/proposals/{pid}/approve", headers=auth(VISION)).status_code == 403
    quota = {q["name"]: q["quota"] for q in client.get("/v1/queues", headers=auth(ADMIN)).json()["queues"]}
    assert quota["vision-train"] == {"H100": 3.0}  # not before approval
    r = client.post(f"/v1/proposals/{pid}/approve", headers=auth(ADMIN))
    assert r.status_code == 200 and r.json()["outcome"] == "applied"
    quota = {q["name"]: q["quota"] for q in client.get("/v1/queues", headers=auth(ADMIN)).json()["queues"]}
    assert quota["vision-train"] == {"H100": 2.0}
    assert (
        client.post(f"/v1/proposals/{pid}/approve", headers=auth(ADMIN)).json()["outcome"] == "already_done"
    )
    actions = [
        (a["action"], a["decision"])
        for a in all_pages(client, "/v1/audit", ADMIN)
        if not a["action"].startswith("permission.")
    ]
    assert actions == [
        ("enforcement.quota_proposal", "proposed"),
        ("approval.grant", "approved"),
        ("quota.update", "applied"),
        ("approval.grant", "already_done"),
    ]
    pool = client.get("/v1/pool", headers=auth(VISION)).json()
    assert {q["queue"]: q["quota"] for q in pool["queues"]}["vision-train"] == {"A100": 0, "H100": 2}


def test_admin_changes_a_queue_and_it_is_audited(client: TestClient):
    r = client.patch(
        "/v1/queues/nlp-train", json={"priority": 70, "max_gpus_per_request": 4}, headers=auth(ADMIN)
    )
    assert r.status_code == 200 and (r.json()["priority"], r.json()["max_gpus_per_request"]) == (70, 4)
    r = client.patch("/v1/queues/nlp-train", json={"quota": {"H100": 50}}, headers=auth(ADMIN))
    assert r.status_code == 422 and "quota" in r.json()["detail"]
    audits = [a for a in all_pages(client, "/v1/audit", ADMIN) if a["object_kind"] == "queue"]
    assert [(a["action"], a["decision"], a["actor"]) for a in audits] == [
        ("queue.update", "applied", "alice"),
        ("quota.update", "refused", "alice"),
    ]
    assert audits[0]["before"] == {"priority": 50, "max_gpus_per_request": 8}
    r = client.post("/v1/jobs", json={**TRAINING, "queue": "nlp-train", "gpus": 5}, headers=auth(NLP))
    assert r.status_code == 422 and r.json()["rule"] == "queue.max_gpus_per_request"


def test_permission_changes_are_audited_at_start(store: Store, clock: Clock):
    create_app(store, parse_tokens(json.dumps(TOKENS), "t"), clock=clock, tick_interval_s=None)
    create_app(store, parse_tokens(json.dumps(TOKENS), "t"), clock=clock, tick_interval_s=None)  # unchanged
    changed = {k: v for k, v in TOKENS.items() if k != NLP}
    changed[ADMIN] = {"role": "governance_bot", "name": "alice"}
    client = TestClient(
        create_app(store, parse_tokens(json.dumps(changed), "t"), clock=clock, tick_interval_s=None)
    )
    audits = all_pages(client, "/v1/audit", BOT)
    assert [(a["action"], a["object_name"]) for a in audits] == [
        ("permission.grant", "alice"),
        ("permission.grant", "gov-bot"),
        ("permission.grant", "nina"),
        ("permission.grant", "vic"),
        ("permission.revoke", "alice"),
        ("permission.revoke", "nina"),
        ("permission.grant", "alice"),
    ]
    assert audits[-1]["after"] == {"role": "governance_bot"}
    assert all(a["object_kind"] == "principal" for a in audits)


# -- the logs by cursor --------------------------------------------------------------------------


def test_cursor_paging_has_no_gaps_or_duplicates(client: TestClient, clock: Clock):
    for i in range(7):
        job = submit(
            client, VISION if i % 2 else NLP, {**TRAINING, "queue": "vision-train" if i % 2 else "nlp-train"}
        )
        clock.advance(30)
        client.post(f"/v1/jobs/{job['job_id']}/finish", json={"state": "COMPLETED"}, headers=auth(BOT))
    everything = client.get("/v1/events", params={"limit": 10000}, headers=auth(ADMIN)).json()
    assert len(everything["records"]) == 7 * 4  # submit, admit, start, finish
    for limit in (1, 3, 5):
        paged = all_pages(client, "/v1/events", ADMIN, limit=limit)
        assert paged == everything["records"]
    ids = [e["event_id"] for e in everything["records"]]
    assert len(set(ids)) == len(ids)
    # an empty page keeps the cursor; new records appear after it
    last = client.get("/v1/events", params={"cursor": everything["next_cursor"]}, headers=auth(ADMIN)).json()
    assert last == {"records": [], "next_cursor": everything["next_cursor"]}
    submit(client, VISION, TRAINING)
    fresh = client.get("/v1/events", params={"cursor": everything["next_cursor"]}, headers=auth(ADMIN)).json()
    assert [e["type"] for e in fresh["records"]] == ["submit", "admit", "start"]
    # a tenant's pages are its subsequence of the whole log
    vision_paged = all_pages(client, "/v1/events", VISION, limit=2)
    vision_jobs = {j["job_id"] for j in client.get("/v1/jobs", headers=auth(VISION)).json()["jobs"]}
    everything = all_pages(client, "/v1/events", ADMIN)
    assert vision_paged == [e for e in everything if e["job_id"] in vision_jobs]


def test_the_logs_and_pool_parse_with_the_pipelines_parsers(client: TestClient):
    job = submit(client, VISION, TRAINING)
    submit(client, VISION, {**TRAINING, "gpu_model": "A100", "share_mode": "mig", "mig_profile": "1g.10gb"})
    client.post(
        "/v1/actions",
        json={"kind": "preempt", "idempotency_key": "p1", "target": job["job_id"]},
        headers=auth(BOT),
    )
    events = "\n".join(json.dumps(r) for r in all_pages(client, "/v1/events", ADMIN))
    audits = "\n".join(json.dumps(r) for r in all_pages(client, "/v1/audit", ADMIN))
    parsed_events = parse_event_log(events, "http://allocator/v1/events")
    parsed_audit = parse_audit_log(audits, "http://allocator/v1/audit")
    parsed_pool = parse_pool_snapshot(
        json.dumps(client.get("/v1/pool", headers=auth(ADMIN)).json()), "pool.json"
    )
    for parsed in (parsed_events, parsed_audit, parsed_pool):
        assert parsed.quarantine.height == 0, parsed.quarantine
        assert parsed.records_loaded == parsed.records_read > 0
    assert parsed_events.tables["job_gpus"].height >= 3  # two starts, then the preempted job's restart


def test_idempotency_key_header_makes_a_retried_submit_safe(client: TestClient):
    headers = {**auth(VISION), "Idempotency-Key": "submit-42"}
    first = client.post("/v1/jobs", json=TRAINING, headers=headers)
    again = client.post("/v1/jobs", json=TRAINING, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    changed = client.post("/v1/jobs", json={**TRAINING, "gpus": 2}, headers=headers)
    assert changed.status_code == 409 and "another request" in changed.json()["detail"]
    # the key is the caller's: another principal using the same key submits its own job
    other = client.post(
        "/v1/jobs",
        json={**TRAINING, "queue": "nlp-train"},
        headers={**auth(NLP), "Idempotency-Key": "submit-42"},
    )
    assert other.json()["job_id"] != first.json()["job_id"]
    submits = [e for e in all_pages(client, "/v1/events", ADMIN) if e["type"] == "submit"]
    assert len(submits) == 2


def test_node_metrics_endpoint(client: TestClient):
    assert client.get("/nodes/nope-01/metrics").status_code == 404
    r = client.get("/nodes/h100-01/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "DCGM_FI_DEV_GPU_UTIL" in r.text and "hpc_job" not in r.text


def test_cli_serve_reports_configuration_errors(tmp_path: Path):
    from click.testing import CliRunner

    from allocator.cli import allocator

    runner = CliRunner()
    r = runner.invoke(allocator, ["serve", "--db", str(tmp_path / "a.db")], env={TOKENS_ENV: None})
    assert r.exit_code == 1 and f"no tokens: set {TOKENS_ENV}" in r.output
    bad_pool = tmp_path / "pool.yaml"
    bad_pool.write_text("tenants: [a]\nnodes: []\nqueues: []\n")
    r = runner.invoke(
        allocator,
        ["serve", "--db", str(tmp_path / "a.db"), "--pool", str(bad_pool)],
        env={TOKENS_ENV: json.dumps(TOKENS)},
    )
    assert r.exit_code == 1 and "pool.yaml: nodes is missing" in r.output


def test_admin_shares_a_queue_with_another_tenant(client: TestClient):
    r = client.post("/v1/jobs", json={**TRAINING, "queue": "nlp-train"}, headers=auth(VISION))
    assert r.status_code == 422 and r.json()["rule"] == "queue.tenant"
    r = client.patch("/v1/queues/nlp-train", json={"shared_with": ["vision"]}, headers=auth(ADMIN))
    assert r.status_code == 200 and r.json()["shared_with"] == ["vision"]
    assert submit(client, VISION, {**TRAINING, "queue": "nlp-train"})["tenant"] == "vision"
    r = client.patch("/v1/queues/nlp-train", json={"templates": ["batch"]}, headers=auth(ADMIN))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "templates", 0]
