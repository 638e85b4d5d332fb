"""Governance metrics: quota and borrowing, cost attribution, audit and enforcement."""
from __future__ import annotations

import shutil

import pytest

from pipelines.paths import MODELS_DIR
from tests.models.builders import at, audit, build, event, gpu, load, one, quota, rows, simple_job

pytestmark = pytest.mark.slow  # dbt builds of constructed warehouses


def test_cost_shares_add_up_to_the_pool_total(warehouse, tmp_path):
    # Prices for the test (a copy of models/ with its own seed): H100 $2/h, A100 $1/h.
    # Pool: 2 H100 + 1 A100 for one whole day (the last job ends at midnight).
    #   pool cost      = 2 x 24 x 2 + 1 x 24 x 1            = $120
    #   vision: H100 10 h -> allocated $20;  nlp: A100 10 h -> allocated $10;  allocated $30
    #   unallocated    = 120 - 30                            = $90, shared 20:10
    #   vision total   = 20 + 90 x 20/30 = $80;  nlp total = 10 + 90 x 10/30 = $40;  80 + 40 = 120
    models = tmp_path / "models"
    shutil.copytree(MODELS_DIR, models)
    (models / "seeds" / "gpu_models.csv").write_text(
        "gpu_model,model_name_pattern,compute_slices,memory_mib,price_per_gpu_hour\n"
        "H100,H100\\b,7,81559,2.0\n"
        "A100,A100\\b,7,81920,1.0\n"
    )
    vision = simple_job("v-1", "h100-01", 0, at("08:00"), at("18:00"), tenant="vision", gpu_model="H100")
    nlp = simple_job("n-1", "a100-01", 0, at("14:00"), at("00:00", day=2), tenant="nlp")
    load(
        warehouse,
        gpu_inventory=[gpu("h100-01", 0, "H100"), gpu("h100-01", 1, "H100"), gpu("a100-01", 0, "A100")],
        job_events=vision[0] + nlp[0],
        job_gpus=vision[1] + nlp[1],
    )
    con = build(warehouse, models)

    costs = {r["tenant"]: r for r in rows(con, "select * from metrics.cost_attribution")}
    assert set(costs) == {"vision", "nlp"}
    assert costs["vision"]["allocated_cost_usd"] == pytest.approx(20.0)
    assert costs["vision"]["shared_unallocated_cost_usd"] == pytest.approx(60.0)
    assert costs["vision"]["total_cost_usd"] == pytest.approx(80.0)
    assert costs["nlp"]["total_cost_usd"] == pytest.approx(40.0)
    assert costs["nlp"]["cost_share_pct"] == pytest.approx(100 / 3)
    assert costs["nlp"]["pool_total_cost_usd"] == pytest.approx(120.0)
    assert sum(c["total_cost_usd"] for c in costs.values()) == pytest.approx(120.0)


def test_usage_against_quota_and_borrowing_above_it(warehouse):
    # vision's quota on A100 is 1 GPU. It holds 1 GPU 00:00-12:00 and a second one 09:00-12:00:
    # 15 GPU-hours held, of which 3 above quota (borrowed), although 15 < the day's 24 quota GPU-hours.
    a = simple_job("a", "a100-01", 0, at("00:00"), at("12:00"))
    b = simple_job("b", "a100-01", 1, at("09:00"), at("12:00"))
    load(warehouse, gpu_inventory=[gpu("a100-01", 0), gpu("a100-01", 1)], queue_quotas=[quota("vision-train", "vision", "A100", 1)],
         job_events=a[0] + b[0], job_gpus=a[1] + b[1])
    con = build(warehouse)

    q = one(con, "select * from metrics.tenant_quota where tenant = 'vision'")
    assert q["quota_gpu_hours"] == pytest.approx(12.0)  # the data window ends at 12:00
    assert q["allocated_gpu_hours"] == pytest.approx(15.0)
    assert q["quota_usage_pct"] == pytest.approx(125.0)
    assert q["borrowed_gpu_hours"] == pytest.approx(3.0)
    assert q["peak_allocated_gpus"] == pytest.approx(2.0)


def test_audit_classifies_permission_quota_and_dedupes_kubernetes_stages(warehouse):
    records = [
        audit("a-1", "permission.grant", at("09:00"), decision="allow", object_kind="tenant", object_name="vision"),
        audit("a-2", "quota.update", at("09:05"), decision="allow", object_kind="queue", object_name="vision-train"),
        audit("a-3", "approval.grant", at("09:10"), decision="approved", object_kind="job", object_name="j-1"),
        # one Kubernetes request, logged at two stages: counts once
        audit("k-1", "create", at("10:00"), source="k8s", stage="RequestReceived", object_kind="clusterrolebindings",
              object_name="admin-binding", actor="system:admin"),
        audit("k-1", "create", at("10:00"), source="k8s", stage="ResponseComplete", object_kind="clusterrolebindings",
              object_name="admin-binding", actor="system:admin", response_code=201),
        audit("k-2", "get", at("10:01"), source="k8s", stage="ResponseComplete", object_kind="pods", object_name="p",
              response_code=403, decision="deny"),
    ]
    load(warehouse, audit_events=records)
    con = build(warehouse)

    allocator = one(con, "select * from metrics.audit_daily where source = 'allocator'")
    assert (allocator["audit_records"], allocator["permission_changes"], allocator["quota_changes"],
            allocator["approvals"]) == (3, 1, 1, 1)
    k8s = one(con, "select * from metrics.audit_daily where source = 'k8s'")
    assert (k8s["audit_records"], k8s["permission_changes"], k8s["denied_requests"]) == (2, 1, 1)
    assert one(con, "select stage from metrics.audit_events where audit_id = 'k-1'")["stage"] == "ResponseComplete"


def test_reclaim_recovers_the_gpu_hours_the_job_would_still_have_held(warehouse):
    # A 2-GPU job declared 4 h of run time, started 10:00 and was reclaimed idle at 11:00:
    # it would have held both GPUs until 14:00 -> recovered 3 h x 2 GPUs = 6 GPU-hours.
    # A second reclaim refused by the allocator recovers nothing; a reminder is just counted.
    events = [
        *simple_job("j-z", "a100-01", 0, at("10:00"), None, spec={"expected_runtime_s": 4 * 3600})[0],
        event("j-z", "finish", at("11:00"), state="CANCELLED", reason="reclaimed: idle"),
    ]
    placements = [
        *simple_job("j-z", "a100-01", 0, at("10:00"), None)[1],
        *simple_job("j-z", "a100-01", 1, at("10:00"), None)[1],
    ]
    actions = [
        audit("e-1", "enforcement.remind", at("10:45"), decision="applied", object_kind="job", object_name="j-z",
              actor="governance-bot"),
        audit("e-2", "enforcement.reclaim", at("11:00"), decision="applied", object_kind="job", object_name="j-z",
              actor="governance-bot"),
        audit("e-3", "enforcement.reclaim", at("11:00"), decision="refused", object_kind="job", object_name="j-y",
              actor="governance-bot"),
    ]
    load(warehouse, gpu_inventory=[gpu("a100-01", 0), gpu("a100-01", 1)], job_events=events, job_gpus=placements,
         audit_events=actions)
    con = build(warehouse)

    reclaim = one(con, "select * from metrics.enforcement_actions where audit_id = 'e-2'")
    assert reclaim["would_end_at"] == at("14:00")
    assert reclaim["gpus_released"] == pytest.approx(2.0)
    assert reclaim["recovered_gpu_hours"] == pytest.approx(6.0)
    daily = {(r["action_kind"], r["decision"]): r for r in rows(con, "select * from metrics.enforcement_daily")}
    assert daily[("reclaim", "applied")]["recovered_gpu_hours"] == pytest.approx(6.0)
    assert daily[("reclaim", "refused")]["recovered_gpu_hours"] == pytest.approx(0.0)
    assert daily[("remind", "applied")]["actions"] == 1
    assert one(con, "select enforcement_actions from metrics.audit_daily")["enforcement_actions"] == 3


def test_capacity_recommendations_view_exists_empty_until_the_capacity_component_fills_it(warehouse):
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)])
    con = build(warehouse)
    assert rows(con, "select * from metrics.capacity_recommendations") == []
    columns = [r["column_name"] for r in rows(con, "select column_name from information_schema.columns "
                                                   "where table_schema = 'metrics' and table_name = 'capacity_recommendations'")]
    assert "recommendation" in columns and "evidence_json" in columns
