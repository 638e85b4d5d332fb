"""AllocatorEnforcer and AllocatorClient against the real allocator API on a loopback port."""
from __future__ import annotations

import json

import pytest

from allocator.model import Action, ActionKind, Outcome
from pipelines.connectors.allocator import AllocatorAuthError, AllocatorClient, AllocatorConfig
from pipelines.enforcement.allocator import AllocatorEnforcer, DeliveryError
from pipelines.sources.allocator_log import parse_audit_log, parse_event_log
from tests.governance.conftest import BOT, INFERENCE, T0, TRAINING, VISION, submit


def action(kind: ActionKind, key: str, target: str, **fields) -> Action:
    return Action(kind, key, target, "gpupool-governance", reason="idle 42 min", policy="idle-allocation",
                  policy_version="1", evidence={"observed": 0.008}, **fields)


def test_actions_map_to_the_api_and_answers_back(allocator):
    job = submit(allocator.url, TRAINING)
    enforcer = AllocatorEnforcer(allocator.url, BOT)
    remind = enforcer.apply(action(ActionKind.REMIND, "k-remind", job["job_id"]), T0)
    assert (remind.outcome, remind.kind, remind.target) == (Outcome.APPLIED, ActionKind.REMIND, job["job_id"])
    reclaim = enforcer.apply(action(ActionKind.RECLAIM, "k-reclaim", job["job_id"]), T0)
    assert reclaim.outcome == Outcome.APPLIED and reclaim.effects["state"] == "CANCELLED"
    again = enforcer.apply(action(ActionKind.RECLAIM, "k-reclaim", job["job_id"]), T0)
    assert again.outcome == Outcome.ALREADY_DONE and again.effects["state"] == "CANCELLED"
    audit, _ = allocator.store.audit(0, 1000)
    mine = [a for a in audit if a.get("idempotency_key") == "k-reclaim"]
    assert [a["decision"] for a in mine] == ["applied", "already_done"]
    assert "idle 42 min (policy idle-allocation 1)" in mine[0]["reason"]


def test_refusals_are_answers(allocator):
    serving = submit(allocator.url, INFERENCE)
    enforcer = AllocatorEnforcer(allocator.url, BOT)
    refused = enforcer.apply(action(ActionKind.RECLAIM, "k-serve", serving["job_id"]), T0)
    assert refused.outcome == Outcome.REFUSED and "production inference" in refused.reason
    unknown = enforcer.apply(action(ActionKind.PREEMPT, "k-none", "j-nope"), T0)
    assert unknown.outcome == Outcome.REFUSED
    invalid = enforcer.apply(action(ActionKind.CAP_RUNTIME, "k-cap", serving["job_id"]), T0)  # no runtime_s
    assert invalid.outcome == Outcome.REFUSED and "HTTP 422" in invalid.reason and "runtime_s" in invalid.reason


def test_a_wrong_token_or_role_is_a_configuration_error(allocator):
    job = submit(allocator.url, TRAINING)
    with pytest.raises(AllocatorAuthError, match="HTTP 401.*allocator.token"):
        AllocatorEnforcer(allocator.url, "wrong").apply(action(ActionKind.REMIND, "k1", job["job_id"]), T0)
    with pytest.raises(AllocatorAuthError, match="HTTP 403"):
        AllocatorEnforcer(allocator.url, VISION).apply(action(ActionKind.REMIND, "k1", job["job_id"]), T0)


def test_nobody_listening_is_a_delivery_error():
    with pytest.raises(DeliveryError, match="refused"):
        AllocatorEnforcer("http://127.0.0.1:9", BOT, timeout_s=1).apply(action(ActionKind.REMIND, "k", "j-1"), T0)


def test_running_jobs_with_their_placement(allocator):
    running = submit(allocator.url, TRAINING)
    client = AllocatorClient.from_config(AllocatorConfig(url=allocator.url, token=BOT))
    [job] = client.running_jobs()
    assert job["job_id"] == running["job_id"] and job["state"] == "RUNNING" and job["attempt"] == 1
    assert job["gpus"][0]["host"].startswith("h100-") and job["gpus"][0]["fraction"] == 1.0


def test_pull_is_incremental_and_never_duplicates(allocator, tmp_path):
    landing = tmp_path / "landing"
    client = AllocatorClient(allocator.url, BOT, page_size=2)
    for _ in range(3):
        submit(allocator.url, TRAINING)
    first = client.pull(landing, "events")
    # submit, admit, start per job; pages of 2, the last short
    assert (first.records, first.pages, first.cursor, first.days) == (9, 5, 9, ("2026-11-02",))
    assert client.pull(landing, "events").records == 0
    submit(allocator.url, TRAINING)
    assert client.pull(landing, "events").records > 0
    events_file = landing / "allocator_events/2026-11-02/api.jsonl"
    ids = [json.loads(line)["event_id"] for line in events_file.read_text().splitlines()]
    expected, _ = allocator.store.events(0, 10000)
    assert ids == [e["event_id"] for e in expected]
    parsed = parse_event_log(events_file.read_bytes(), str(events_file))
    assert parsed.records_loaded == len(ids) and parsed.quarantine.is_empty()

    audit = client.pull(landing, "audit")
    audit_file = landing / "allocator_audit/2026-11-02/api.jsonl"
    assert audit.records > 0 and parse_audit_log(audit_file.read_bytes(), str(audit_file)).quarantine.is_empty()


def test_a_pull_cut_off_mid_page_is_repaired(allocator, tmp_path):
    landing = tmp_path / "landing"
    client = AllocatorClient(allocator.url, BOT, page_size=2)
    submit(allocator.url, TRAINING)
    client.pull(landing, "events", max_pages=1)
    events_file = landing / "allocator_events/2026-11-02/api.jsonl"
    state_file = landing / ".cursors/allocator_events.json"
    # the next page was being appended when the process died: sizes recorded, a line half written
    state = json.loads(state_file.read_text())
    state["sizes"] = {"allocator_events/2026-11-02/api.jsonl": events_file.stat().st_size}
    state_file.write_text(json.dumps(state))
    with open(events_file, "a") as out:
        out.write('{"schema":"gpupool.event/v1","event_id":"ev-')
    report = client.pull(landing, "events")
    assert report.repaired == 1
    ids = [json.loads(line)["event_id"] for line in events_file.read_text().splitlines()]
    assert ids == [e["event_id"] for e in allocator.store.events(0, 10000)[0]]
    assert "sizes" not in json.loads(state_file.read_text())


def test_the_example_config_section_validates(monkeypatch):
    from pipelines.config import section
    from pipelines.paths import REPO_ROOT

    monkeypatch.setenv("GPUPOOL_ALLOCATOR_TOKEN", "from-the-environment")
    config = section("allocator", AllocatorConfig, REPO_ROOT / "gpupool.example.yml")
    assert config.token == "from-the-environment" and config.page_size == 1000
    monkeypatch.delenv("GPUPOOL_ALLOCATOR_TOKEN")
    from pipelines.config import ConfigError

    with pytest.raises(ConfigError, match="token: Value error, empty"):
        section("allocator", AllocatorConfig, REPO_ROOT / "gpupool.example.yml")
