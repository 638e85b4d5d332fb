"""SlurmEnforcer's drain and undrain against the real cluster: what they do shows in `scontrol show node`
and `sinfo`, running work keeps running, new work waits, and every answer is in the audit file.

The test cluster has one node (`localhost`): the node is resumed at the end whatever happens, so the
other Slurm tests find it as they expect.
"""
from __future__ import annotations

import pytest

from allocator.model import Action, ActionKind, Outcome
from pipelines.clock import utc_naive
from pipelines.sources.allocator_log import parse_audit_log
from tests.slurm.conftest import NODE, node_state, slurm

pytestmark = pytest.mark.slow

def _audit(tmp_path) -> list[dict]:
    day_file = tmp_path / "landing" / "allocator_audit" / utc_naive().date().isoformat() / "slurm.jsonl"
    parsed = parse_audit_log(day_file.read_bytes(), str(day_file))
    assert parsed.quarantine.height == 0
    return parsed.tables["audit_events"].to_dicts()


def drain(target: str, key: str, **fields) -> Action:
    return Action(ActionKind.DRAIN, key, target, "governance-bot", reason="xid 79 three times in 24 h",
                  policy="gpu-health", policy_version="1", **fields)


def undrain(target: str, key: str) -> Action:
    return Action(ActionKind.UNDRAIN, key, target, "governance-bot", reason="health checks pass")


def test_drain_shadow_then_enforce_then_undrain(cluster, enforcer, recorder, tmp_path):
    running = cluster.submit(name="drain-running")
    cluster.wait_running(running)

    dry = enforcer.apply(drain(f"{NODE}/3", "drain:localhost:v1", dry_run=True), utc_naive())
    assert dry.outcome == Outcome.DRY_RUN and "would run scontrol update NodeName=localhost State=DRAIN" in dry.reason
    assert "DRAIN" not in node_state()[0] and recorder.count("scontrol", "update") == 0

    applied = enforcer.apply(drain(f"{NODE}/3", "drain:localhost:v1"), utc_naive())
    assert applied.outcome == Outcome.APPLIED, applied.reason
    assert "Slurm drains whole nodes: GPU 3's node localhost" in applied.reason
    state, reason = node_state()
    assert "DRAIN" in state.split("+") and reason == "gpupool: xid 79 three times in 24 h (policy gpu-health 1)"
    assert slurm("sinfo", "-h", "-n", NODE, "-o", "%T").strip() in ("draining", "drained", "mixed-drain")
    assert cluster.state(running) == "RUNNING"  # DRAIN lets running work finish
    waiting = cluster.submit(name="drain-waiting")
    cluster.wait_for("the new job to be held back", lambda: cluster.state(waiting) == "PENDING", 10)

    again = enforcer.apply(drain(f"{NODE}/3", "drain:localhost:v1"), utc_naive())
    assert again.outcome == Outcome.ALREADY_DONE and recorder.count("scontrol", "update") == 1
    other = enforcer.apply(drain(NODE, "drain:localhost:v2"), utc_naive())
    assert other.outcome == Outcome.REFUSED and "not drained by this key" in other.reason

    resumed = enforcer.apply(undrain(f"{NODE}/3", "undrain:localhost:v1"), utc_naive())
    assert resumed.outcome == Outcome.APPLIED, resumed.reason
    assert "DRAIN" not in node_state()[0]
    cluster.wait_running(waiting)
    assert enforcer.apply(undrain(f"{NODE}/3", "undrain:localhost:v1"), utc_naive()).outcome == Outcome.ALREADY_DONE
    not_drained = enforcer.apply(undrain(NODE, "undrain:localhost:v2"), utc_naive())
    assert not_drained.outcome == Outcome.REFUSED and not_drained.reason.startswith("node localhost is not drained")
    assert recorder.count("scontrol", "update") == 2

    records = _audit(tmp_path)
    assert [(r["action"], r["object_kind"], r["object_name"], r["decision"]) for r in records] == [
        ("enforcement.drain", "gpu", "localhost/3", "dry_run"),
        ("enforcement.drain", "gpu", "localhost/3", "applied"),
        ("enforcement.drain", "gpu", "localhost/3", "already_done"),
        ("enforcement.drain", "node", "localhost", "refused"),
        ("enforcement.undrain", "gpu", "localhost/3", "applied"),
        ("enforcement.undrain", "gpu", "localhost/3", "already_done"),
        ("enforcement.undrain", "node", "localhost", "refused"),
    ]
    assert all(r["idempotency_key"] for r in records)


def test_a_drain_by_someone_else_is_neither_ours_nor_lifted(cluster, enforcer, recorder, tmp_path):
    slurm("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=disk replacement")
    refused = enforcer.apply(drain(NODE, "drain:localhost:v3"), utc_naive())
    assert refused.outcome == Outcome.REFUSED and "Reason=disk replacement" in refused.reason
    kept = enforcer.apply(undrain(NODE, "undrain:localhost:v3"), utc_naive())
    assert kept.outcome == Outcome.REFUSED and "drained by someone else (Reason=disk replacement" in kept.reason
    state, reason = node_state()
    assert "DRAIN" in state and reason == "disk replacement"
    assert recorder.count("scontrol", "update") == 0
    # a refusal is not remembered: once the admin resumes the node, the same key drains it
    slurm("scontrol", "update", f"NodeName={NODE}", "State=RESUME")
    assert enforcer.apply(drain(NODE, "drain:localhost:v3"), utc_naive()).outcome == Outcome.APPLIED
    assert [r["decision"] for r in _audit(tmp_path)] == ["refused", "refused", "applied"]


def test_unknown_nodes_and_targets_are_refused(cluster, enforcer, tmp_path):
    unknown = enforcer.apply(drain("gpu-node-99", "drain:gpu-node-99:v1"), utc_naive())
    assert (unknown.outcome, unknown.reason) == (Outcome.REFUSED, "no node gpu-node-99 in Slurm")
    malformed = enforcer.apply(drain(f"{NODE}/x", "drain:bad:v1"), utc_naive())
    assert malformed.outcome == Outcome.REFUSED and "is not a node (node-07) or a GPU" in malformed.reason
    assert [r["decision"] for r in _audit(tmp_path)] == ["refused", "refused"]


def test_a_reason_with_newlines_and_quotes_stays_one_line_and_ours(cluster, enforcer):
    hostile = Action(ActionKind.DRAIN, "drain:localhost:hostile", NODE, "governance-bot",
                     reason='xid 79\nReason=other; "quoted" $(id)', policy="gpu-health", policy_version="1")
    assert enforcer.apply(hostile, utc_naive()).outcome == Outcome.APPLIED
    reason = node_state()[1]
    assert "\n" not in reason and reason.startswith("gpupool: xid 79 Reason=other;")
    # scontrol still answers one line for the node, so gpupool can lift its own drain
    assert enforcer.apply(undrain(NODE, "undrain:localhost:hostile"), utc_naive()).outcome == Outcome.APPLIED
