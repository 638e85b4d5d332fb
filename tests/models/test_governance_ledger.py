"""The reclaim ledger and the governance decision log, pinned by hand-computed numbers.

One warehouse holds every case (2026-11-01, times UTC):

- cap-1 (experiment, vision/alice, 2 whole GPUs a100-01:0,1, queue vision-dev capped at 6 h):
  started 08:00, reminded 09:29 by the pipeline, reclaimed 10:00 -> would have ended 14:00 (cap):
  recovered 4 h x 2 = 8 GPU-h. wait-1 (nlp) starts on GPU 0 at 10:02, ends 15:00: reused
  10:02..14:00 = 238 min x 1. alice resubmits cap-1-r1 at 10:30: a false positive (id pattern).
- zomb-1 (training, vision/dave, a100-01:3, declared 2 h, queue vision-train capped at 12 h):
  started 00:00, reclaimed 06:00, past its declared end 02:00 -> would have ended at the cap
  12:00: 6 GPU-h (the old definition said 0). zomb-1-r1 resubmitted 08:00: 2 h later, not a
  false positive.
- zomb-2 (training, nlp/carol, two 3g MIG slices of a100-02:0 = 3/7 each, queue without a cap,
  nothing declared): reclaimed 06:00 -> 24 h horizon: 24 x 6/7 GPU-h. mig-user takes instance 1
  06:10..08:10: reused 2 h x 3/7 (mig-other on instance 3 is another slice, not reuse). carol
  submits x-9 with the same job name at 06:30: a false positive (job name).
- sess-1 (interactive, vision/bob, a100-01:2): reminded 12:00, next step (reclaim) dropped at
  12:30 in the log, bob cancels at 12:20: released after the reminder.
- sess-2 (a100-01:4): reminded 12:00 by an operator (no next step): due 13:00, ends 13:30: not released.
- sess-3 (interactive, a100-01:5, queue vision-interactive capped at 4 h): started 13:00, reminded
  14:00, reclaimed 14:30 by an operator: ended by the reclaim, not released; recovered 2.5 GPU-h.
- s-1 (Slurm, time limit 3 h, started 09:00): reclaimed 10:00 through the Slurm connector, known
  only from the decision log's answer: recovered 2 GPU-h.
- decision log only: a shadow reclaim, an exempt one, a rate-limited one, and dis-1 whose log
  answer (applied) disagrees with the audit record (refused).
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.models.builders import at, audit, build, event, gpu, load, one, placement, quota, rows, submit

MIG = 3 / 7


def decision(key: str, finding: str, step: int, action: str, status: str, ts: dt.datetime, job_id: str,
             tenant: str = "vision", record: str = "decision", **fields: Any) -> dict:
    row = {
        "record": record, "occurred_at": ts, "idempotency_key": key, "finding_id": finding,
        "policy": "idle-allocation", "policy_version": "3", "policy_kind": "idle_allocation",
        "mode": "enforce", "step_index": step, "action": action, "engine": "allocator", "job_id": job_id,
        "attempt": 1, "tenant": tenant, "queue": "vision-dev", "status": status,
        "api_version": "gpupool.governance/v1", "source_file": "governance.jsonl",
        "gpus_flagged": 2, "gpus_held": 2, "gpu_hours": 1.0,
        "window_start_at": ts - dt.timedelta(minutes=30), "window_end_at": ts,
    }
    return row | fields


def answer(key: str, finding: str, step: int, action: str, outcome: str, ts: dt.datetime, job_id: str,
           **fields: Any) -> dict:
    return decision(key, finding, step, action, "answered", ts, job_id, record="answer", outcome=outcome,
                    delivery_attempts=1, **fields)


def started(job_id: str, start: dt.datetime, end: dt.datetime | None, slots: list[dict], state: str = "CANCELLED",
            reason: str | None = None, **submit_fields: Any) -> tuple[list[dict], list[dict]]:
    events = [submit(job_id, start, **submit_fields), event(job_id, "admit", start), event(job_id, "start", start)]
    if end is not None:
        events.append(event(job_id, "finish", end, state=state, reason=reason))
    return events, [placement(job_id, 1, s.pop("host"), s.pop("gpu"), start, **s) for s in slots]


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    from pipelines.warehouse import Warehouse

    jobs = [
        started("cap-1", at("08:00"), at("10:00"), [{"host": "a100-01", "gpu": 0}, {"host": "a100-01", "gpu": 1}],
                reason="reclaimed: idle", queue="vision-dev", template="experiment", user_name="alice",
                job_name="resnet", gpus=2),
        started("wait-1", at("10:02"), at("15:00"), [{"host": "a100-01", "gpu": 0}], state="COMPLETED",
                tenant="nlp", queue="nlp-train", user_name="erin", job_name="bert"),
        started("zomb-1", at("00:00"), at("06:00"), [{"host": "a100-01", "gpu": 3}], reason="reclaimed: zombie",
                queue="vision-train", template="training", user_name="dave", job_name="vit",
                spec={"expected_runtime_s": 2 * 3600}),
        started("zomb-2", at("00:00"), at("06:00"),
                [{"host": "a100-02", "gpu": 0, "gpu_instance_id": 1, "gpu_instance_profile": "3g.40gb", "fraction": MIG},
                 {"host": "a100-02", "gpu": 0, "gpu_instance_id": 2, "gpu_instance_profile": "3g.40gb", "fraction": MIG}],
                reason="reclaimed: zombie", tenant="nlp", queue="nlp-train", template="training", user_name="carol",
                job_name="llm-ft", gpus=2, share_mode="mig"),
        started("mig-user", at("06:10"), at("08:10"),
                [{"host": "a100-02", "gpu": 0, "gpu_instance_id": 1, "gpu_instance_profile": "3g.40gb", "fraction": MIG}],
                state="COMPLETED", tenant="cv", queue="cv-dev", user_name="frank", job_name="seg"),
        started("mig-other", at("06:10"), at("08:10"),
                [{"host": "a100-02", "gpu": 0, "gpu_instance_id": 3, "gpu_instance_profile": "1g.10gb", "fraction": 1 / 7}],
                state="COMPLETED", tenant="cv", queue="cv-dev", user_name="frank", job_name="tiny"),
        started("sess-1", at("08:00"), at("12:20"), [{"host": "a100-01", "gpu": 2}], reason="cancelled by bob",
                queue="vision-interactive", template="interactive", user_name="bob", job_name="nb"),
        started("sess-2", at("08:00"), at("13:30"), [{"host": "a100-01", "gpu": 4}], reason="cancelled by bob",
                queue="vision-interactive", template="interactive", user_name="bob", job_name="nb2"),
        started("sess-3", at("13:00"), at("14:30"), [{"host": "a100-01", "gpu": 5}], reason="reclaimed: idle session",
                queue="vision-interactive", template="interactive", user_name="bob", job_name="nb3"),
    ]
    slurm = {"source": "slurm"}
    s1 = [
        submit("s-1", at("09:00"), tenant="hpc", queue="batch", user_name="gina", job_name="sim",
               spec={"time_limit_s": 3 * 3600}, **slurm),
        event("s-1", "start", at("09:00"), **slurm),
        event("s-1", "finish", at("10:00"), state="CANCELLED", **slurm),
    ]
    resubmits = [
        submit("cap-1-r1", at("10:30"), queue="vision-dev", template="experiment", user_name="alice", job_name="resnet-v2"),
        submit("zomb-1-r1", at("08:00"), queue="vision-train", user_name="dave", job_name="vit"),
        submit("x-9", at("06:30"), tenant="nlp", queue="nlp-train", user_name="carol", job_name="llm-ft"),
    ]
    bot = {"actor": "gpupool-governance", "actor_role": "governance_bot", "object_kind": "job"}
    audits = [
        audit("au-1", "enforcement.remind", at("09:29"), decision="applied", object_name="cap-1", idempotency_key="k-rem-a",
              reason="idle (policy idle-allocation 3)", **bot),
        audit("au-2", "enforcement.reclaim", at("10:00"), decision="applied", object_name="cap-1",
              idempotency_key="k-cap", reason="idle (policy idle-allocation 3)", **bot),
        audit("au-3", "enforcement.reclaim", at("06:00"), decision="applied", object_name="zomb-1",
              idempotency_key="k-z1", reason="zombie (policy zombie 1)", **bot),
        audit("au-4", "enforcement.reclaim", at("06:00"), decision="applied", object_name="zomb-2",
              idempotency_key="k-z2", reason="zombie (policy zombie 1)", **bot),
        audit("au-5", "enforcement.remind", at("12:00"), decision="applied", object_name="sess-1",
              idempotency_key="k-rem-b", reason="idle session (policy idle-interactive 2)", **bot),
        audit("au-6", "enforcement.remind", at("12:00"), decision="applied", object_kind="job", object_name="sess-2",
              actor="ops-alice", actor_role="admin", reason="please release"),
        audit("au-7", "enforcement.remind", at("14:00"), decision="applied", object_kind="job", object_name="sess-3",
              actor="ops-alice", actor_role="admin", reason="please release"),
        audit("au-8", "enforcement.reclaim", at("14:30"), decision="applied", object_kind="job", object_name="sess-3",
              actor="ops-alice", actor_role="admin", reason="idle session"),
        audit("au-9", "enforcement.reclaim", at("11:00"), decision="refused", object_name="dis-1",
              idempotency_key="k-dis", reason="job dis-1 is COMPLETED, not running", **bot),
    ]
    z1 = {"policy": "zombie", "policy_version": "1", "policy_kind": "zombie", "queue": "vision-train"}
    z2 = z1 | {"queue": "nlp-train"}
    sess = {"policy": "idle-interactive", "policy_version": "2", "policy_kind": "idle_interactive",
            "queue": "vision-interactive"}
    shadow = {"mode": "shadow", "status_reason": "policy in shadow mode"}
    log = [
        decision("k-rem-a", "f-cap", 0, "remind", "queued", at("09:29"), "cap-1"),
        answer("k-rem-a", "f-cap", 0, "remind", "applied", at("09:29"), "cap-1"),
        decision("k-cap", "f-cap", 1, "reclaim", "queued", at("09:59"), "cap-1"),
        answer("k-cap", "f-cap", 1, "reclaim", "applied", at("10:00"), "cap-1"),
        # written twice (at-least-once): one step
        decision("k-cap", "f-cap", 1, "reclaim", "queued", at("09:59"), "cap-1", line_number=9),
        decision("k-z1", "f-z1", 0, "reclaim", "queued", at("06:00"), "zomb-1", **z1),
        answer("k-z1", "f-z1", 0, "reclaim", "applied", at("06:00"), "zomb-1", **z1),
        decision("k-z2", "f-z2", 0, "reclaim", "queued", at("06:00"), "zomb-2", tenant="nlp", **z2),
        answer("k-z2", "f-z2", 0, "reclaim", "applied", at("06:00"), "zomb-2", tenant="nlp", **z2),
        decision("k-rem-b", "f-s1", 0, "remind", "queued", at("12:00"), "sess-1", **sess),
        answer("k-rem-b", "f-s1", 0, "remind", "applied", at("12:00"), "sess-1", **sess),
        decision("k-s1-reclaim", "f-s1", 1, "reclaim", "dropped", at("12:30"), "sess-1",
                 status_reason="job sess-1 attempt 1 ended before the step was due", **sess),
        decision("k-shadow", "f-sh", 0, "reclaim", "shadow", at("11:00"), "sh-1", **shadow),
        decision("k-exempt", "f-ex", 0, "reclaim", "exempt", at("11:00"), "ex-1", status_reason="allow-list"),
        decision("k-rl", "f-rl", 0, "reclaim", "rate_limited", at("11:00"), "rl-1", status_reason="5 per hour"),
        decision("k-s1", "f-slurm", 0, "reclaim", "queued", at("09:59"), "s-1", engine="slurm", tenant="hpc"),
        answer("k-s1", "f-slurm", 0, "reclaim", "applied", at("10:00"), "s-1", engine="slurm", tenant="hpc"),
        decision("k-dis", "f-dis", 0, "reclaim", "queued", at("11:00"), "dis-1"),
        answer("k-dis", "f-dis", 0, "reclaim", "applied", at("11:00"), "dis-1"),
    ]
    inventory = [gpu("a100-01", i) for i in range(6)] + [
        gpu("a100-02", 0, share_mode="mig", gpu_instance_id=i, gpu_instance_profile=p, fraction=f)
        for i, p, f in ((1, "3g.40gb", MIG), (2, "3g.40gb", MIG), (3, "1g.10gb", 1 / 7))
    ]
    quotas = [
        quota("vision-dev", "vision", "A100", 2, max_runtime_s=6 * 3600),
        quota("vision-train", "vision", "A100", 2, max_runtime_s=12 * 3600),
        quota("vision-interactive", "vision", "A100", 2, max_runtime_s=4 * 3600),
    ]
    wh = Warehouse(tmp_path_factory.mktemp("ledger") / "gpupool")
    load(
        wh,
        gpu_inventory=inventory,
        queue_quotas=quotas,
        job_events=[e for j in jobs for e in j[0]] + s1 + resubmits,
        job_gpus=[p for j in jobs for p in j[1]] + [placement("s-1", 1, "sl-01", 0, at("09:00"), **slurm)],
        audit_events=audits,
        governance_actions=log,
    )
    return build(wh)


def ledger(con, job_id: str, kind: str) -> dict:
    return one(con, "select * from metrics.reclaim_ledger where job_id = ? and action_kind = ?", [job_id, kind])


def test_reclaim_under_a_runtime_cap_recovers_until_the_cap_and_counts_reuse_two_minutes_later(con):
    r = ledger(con, "cap-1", "reclaim")
    assert r["would_end_at"] == at("14:00")
    assert r["would_end_basis"] == "queue max run time"
    assert r["allocations_freed"] == 2 and r["gpus_freed"] == pytest.approx(2.0)
    assert r["recovered_gpu_hours"] == pytest.approx(8.0)
    assert r["reused_gpu_hours"] == pytest.approx(238 / 60)
    assert r["reuse_share_pct"] == pytest.approx(100 * (238 / 60) / 8)
    assert (r["policy"], r["policy_version"], r["is_from_decision_log"]) == ("idle-allocation", "3", True)
    assert r["is_false_positive"] is True and r["resubmitted_job_id"] == "cap-1-r1"


def test_zombie_past_its_declared_run_time_recovers_until_its_limit(con):
    r = ledger(con, "zomb-1", "reclaim")
    assert r["expected_end_at"] is None  # 02:00 was already past at 06:00
    assert r["would_end_at"] == at("12:00")
    assert r["recovered_gpu_hours"] == pytest.approx(6.0)
    assert r["reused_gpu_hours"] == pytest.approx(0.0)
    assert r["is_false_positive"] is False  # resubmitted 2 h later
    # the enforcement views read the same number
    assert one(con, "select recovered_gpu_hours from metrics.enforcement_actions where audit_id = 'au-3'")[
        "recovered_gpu_hours"] == pytest.approx(6.0)


def test_mig_slices_without_any_limit_recover_the_24_hour_horizon_x_fraction(con):
    r = ledger(con, "zomb-2", "reclaim")
    assert r["would_end_basis"] == "no limit: 24 h horizon" and r["no_limit_horizon_h"] == 24.0
    assert r["would_end_at"] == at("06:00", day=2)
    assert r["gpus_freed"] == pytest.approx(6 / 7)
    assert r["recovered_gpu_hours"] == pytest.approx(24 * 6 / 7)
    assert r["reused_gpu_hours"] == pytest.approx(2 * MIG)  # instance 1 only; instance 3 is another slice
    assert r["is_reuse_window_observed"] is False
    assert r["is_false_positive"] is True and r["resubmitted_job_id"] == "x-9"


def test_reminders_count_a_release_only_within_the_grace_and_not_by_a_reclaim(con):
    assert ledger(con, "sess-1", "remind")["reminder_due_at"] == at("12:30")  # the dropped next step
    assert ledger(con, "sess-1", "remind")["is_released_after_reminder"] is True
    late = ledger(con, "sess-2", "remind")
    assert (late["reminder_due_at"], late["reminder_due_basis"]) == (at("13:00"), "default 1 h")
    assert late["is_released_after_reminder"] is False
    assert ledger(con, "sess-3", "remind")["is_released_after_reminder"] is False  # the operator reclaimed it
    assert ledger(con, "cap-1", "remind")["is_released_after_reminder"] is False


def test_operator_reclaim_is_in_the_ledger_without_a_policy(con):
    r = ledger(con, "sess-3", "reclaim")
    assert (r["actor"], r["is_from_decision_log"], r["policy"]) == ("ops-alice", False, None)
    assert r["would_end_at"] == at("17:00") and r["recovered_gpu_hours"] == pytest.approx(2.5)


def test_an_engine_without_the_allocator_audit_log_is_in_the_ledger_from_the_decision_log(con):
    r = ledger(con, "s-1", "reclaim")
    assert (r["record_source"], r["engine"], r["ledger_id"]) == ("decision_log", "slurm", "log:k-s1")
    assert r["would_end_basis"] == "job time limit" and r["would_end_at"] == at("12:00")
    assert r["recovered_gpu_hours"] == pytest.approx(2.0)


def test_governance_actions_by_outcome_audit_wins_and_disagreement_is_flagged(con):
    actions = {r["idempotency_key"]: r for r in rows(con, "select * from marts.fct_governance_actions")}
    assert len(actions) == 11  # the line written twice is one step
    dis = actions["k-dis"]
    assert (dis["engine_outcome"], dis["outcome_source"], dis["has_outcome_disagreement"]) == ("refused", "audit", True)
    assert actions["k-cap"]["has_outcome_disagreement"] is False
    assert actions["k-cap"]["is_ended_by_action"] is True
    assert actions["k-cap"]["recovered_gpu_hours"] == pytest.approx(8.0)
    assert actions["k-shadow"]["outcome"] == "shadow" and actions["k-shadow"]["engine_outcome"] is None
    assert actions["k-s1-reclaim"]["final_status"] == "dropped"

    daily = rows(con, "select * from metrics.governance_actions")
    by = {(r["policy"], r["tenant"], r["mode"], r["outcome"]): r for r in daily}
    assert by[("idle-allocation", "vision", "shadow", "shadow")]["shadow"] == 1
    assert by[("idle-allocation", "vision", "enforce", "exempt")]["exempt"] == 1
    assert by[("idle-allocation", "vision", "enforce", "rate_limited")]["rate_limited"] == 1
    assert by[("idle-allocation", "vision", "enforce", "refused")]["refused"] == 1
    applied = by[("idle-allocation", "vision", "enforce", "applied")]  # cap-1's reminder and reclaim: one finding
    assert (applied["applied"], applied["findings"], applied["reminders_applied"], applied["false_positives"]) == (2, 1, 1, 1)
    assert by[("idle-allocation", "hpc", "enforce", "applied")]["recovered_gpu_hours"] == pytest.approx(2.0)
    assert by[("idle-interactive", "vision", "enforce", "applied")]["released_after_reminder"] == 1
    assert sum(r["actions"] for r in daily) == 11
    assert sum(r["recovered_gpu_hours"] for r in daily) == pytest.approx(8 + 6 + 24 * 6 / 7 + 2)


def test_period_view_and_enforcement_views_read_the_ledger(con):
    pool = one(con, "select * from metrics.governance_period where tenant = 'all'")
    recovered = 8 + 6 + 24 * 6 / 7 + 2.5 + 2
    reused = 238 / 60 + 2 * MIG
    assert pool["reclaims"] == 5 and pool["pipeline_reclaims"] == 4
    assert pool["recovered_gpu_hours"] == pytest.approx(recovered)
    assert pool["reused_gpu_hours"] == pytest.approx(reused)
    assert pool["reuse_share_pct"] == pytest.approx(100 * reused / recovered)
    assert pool["false_positive_rate_pct"] == pytest.approx(40.0)
    assert pool["self_release_rate_pct"] == pytest.approx(25.0)
    assert (pool["decided_actions"], pool["shadow"], pool["exempt"], pool["rate_limited"]) == (11, 1, 1, 1)
    # the audit-log views carry the audit-logged reclaims (not s-1, which only the decision log has)
    daily = {(r["action_kind"], r["decision"]): r for r in rows(con, "select * from metrics.enforcement_daily")}
    assert daily[("reclaim", "applied")]["recovered_gpu_hours"] == pytest.approx(recovered - 2)
    assert daily[("reclaim", "refused")]["recovered_gpu_hours"] == pytest.approx(0.0)
