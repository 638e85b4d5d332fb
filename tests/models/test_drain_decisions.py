"""metrics.drain_decisions: every drain and undrain of the gpu-health policy, shadow ones included,
with the target split into host and GPU and the faults from the finding's evidence."""
from __future__ import annotations

import datetime as dt
import json
from typing import Any

from tests.models.builders import at, build, load, rows


def _line(key: str, action: str, status: str, ts: dt.datetime, target: str, mode: str = "enforce",
          record: str = "decision", **fields: Any) -> dict:
    evidence = fields.pop("evidence", {"fault_minutes": 2, "last_fault_at": "2026-11-01T03:02:00Z"})
    return {
        "record": record, "occurred_at": ts, "idempotency_key": key, "finding_id": f"f-{target}",
        "policy": "gpu-health", "policy_version": "1", "policy_kind": "gpu_health", "mode": mode,
        "step_index": 0 if action == "drain" else 1, "action": action, "engine": "allocator", "job_id": target,
        "attempt": 0, "tenant": "platform", "queue": "platform", "status": status,
        "evidence_json": json.dumps(evidence), "api_version": "gpupool.governance/v1",
        "source_file": "simulated.jsonl", "gpus_flagged": 1, "gpus_held": 1, "gpu_hours": 0.0,
        "window_start_at": at("02:00"), "window_end_at": at("03:02"), "detected_at": at("03:02"),
    } | fields


def test_drains_and_undrains_shadow_included(warehouse):
    node = {"evidence": {"fault_minutes": 4, "last_fault_at": "2026-11-01T05:00:00Z", "faulty_gpus": [0, 1]}}
    load(warehouse, governance_actions=[
        _line("k-shadow", "drain", "shadow", at("03:02"), "h100-01/3", mode="shadow"),
        _line("k-node", "drain", "queued", at("05:01"), "h100-02", **node),
        _line("k-node", "drain", "answered", at("05:01"), "h100-02", record="answer", outcome="applied",
              delivery_attempts=1, **node),
        _line("k-undrain", "undrain", "queued", at("05:01", day=2), "h100-02", **node),
        _line("k-undrain", "undrain", "answered", at("05:01", day=2), "h100-02", record="answer",
              outcome="applied", delivery_attempts=1, **node),
        {**_line("k-idle", "reclaim", "shadow", at("06:00"), "job-1", mode="shadow"),
         "policy": "idle-allocation", "policy_kind": "idle_allocation", "attempt": 1, "tenant": "vision"},
    ])
    con = build(warehouse)
    got = rows(con, "select target, target_kind, host, gpu, action, mode, outcome, fault_minutes, faulty_gpus, "
                    "last_fault_at, drains_decided, drains_applied from metrics.drain_decisions order by decided_at")
    assert [(r["target"], r["target_kind"], r["host"], r["gpu"], r["action"], r["mode"], r["outcome"])
            for r in got] == [
        ("h100-01/3", "gpu", "h100-01", 3, "drain", "shadow", "shadow"),
        ("h100-02", "node", "h100-02", None, "drain", "enforce", "applied"),
        ("h100-02", "node", "h100-02", None, "undrain", "enforce", "applied"),
    ]
    assert [(r["fault_minutes"], r["faulty_gpus"]) for r in got] == [(2, None), (4, "[0,1]"), (4, "[0,1]")]
    assert got[1]["last_fault_at"] == at("05:00")
    # the catalog's sums: two drains decided (one in shadow), one applied; the undrain counts in neither
    assert (sum(r["drains_decided"] for r in got), sum(r["drains_applied"] for r in got)) == (2, 1)
