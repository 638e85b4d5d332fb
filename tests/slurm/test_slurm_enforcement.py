"""SlurmEnforcer against the real cluster: what it does shows in squeue, sacct and the audit file."""
from __future__ import annotations

import dataclasses

import pytest

from allocator.model import Action, ActionKind, Outcome
from pipelines.clock import utc_naive
from pipelines.enforcement.base import ActionLedger
from pipelines.enforcement.slurm import SlurmEnforcer
from pipelines.sources.allocator_log import parse_audit_log
from tests.concurrency import race
from tests.slurm.conftest import SlurmCluster, slurm

pytestmark = pytest.mark.slow

ROLES = ("reclaim", "concurrent", "preempt", "no_requeue", "cap", "protected", "remind")


@pytest.fixture(scope="module")
def jobs(slurm_cluster: SlurmCluster) -> dict[str, str]:
    """One running 1-GPU job per test role, and a held (pending) one."""
    c = slurm_cluster
    c.cancel_all()
    comments = {"protected": "gpupool:inference", "remind": "gpupool:training"}
    out = {role: c.submit(name=f"enforce-{role}", requeue=role != "no_requeue", comment=comments.get(role))
           for role in ROLES}
    c.wait_running(*out.values())
    out["held"] = c.submit(name="enforce-held", hold=True)
    return out


def _audit(tmp_path) -> list[dict]:
    day_file = tmp_path / "landing" / "allocator_audit" / utc_naive().date().isoformat() / "slurm.jsonl"
    parsed = parse_audit_log(day_file.read_bytes(), str(day_file))
    assert parsed.quarantine.height == 0
    return parsed.tables["audit_events"].to_dicts()


def test_reclaim_dry_run_then_apply_then_already_done(jobs, slurm_cluster, enforcer, recorder, tmp_path):
    job = jobs["reclaim"]
    action = Action(ActionKind.RECLAIM, f"reclaim:{job}:idle:v1", job, "governance-bot", reason="idle 45 min")

    dry = enforcer.apply(dataclasses.replace(action, dry_run=True), utc_naive())
    assert dry.outcome == Outcome.DRY_RUN
    assert f"would run scancel {job}" in dry.reason
    assert slurm_cluster.state(job) == "RUNNING" and recorder.count("scancel") == 0

    applied = enforcer.apply(action, utc_naive())
    assert applied.outcome == Outcome.APPLIED, applied.reason
    assert applied.effects["command"] == f"scancel {job}" and applied.effects["gpus_released"] == 1
    rows = slurm_cluster.wait_accounted(job, lambda r: r and r[-1]["state"].startswith("CANCELLED"), "cancelled")
    assert rows[-1]["state"] == "CANCELLED by 0"

    again = enforcer.apply(action, utc_naive())
    assert again.outcome == Outcome.ALREADY_DONE
    assert recorder.count("scancel") == 1

    records = _audit(tmp_path)
    assert [(r["action"], r["decision"], r["object_name"]) for r in records] == [
        ("enforcement.reclaim", "dry_run", job), ("enforcement.reclaim", "applied", job),
        ("enforcement.reclaim", "already_done", job)]
    assert all(r["source"] == "slurm" and r["idempotency_key"] == action.idempotency_key for r in records)


def test_concurrent_applies_of_one_key_cancel_once(jobs, slurm_cluster, tmp_path, recorder):
    """Six appliers, each with its own ledger connection (as separate processes would have)."""
    job = jobs["concurrent"]
    action = Action(ActionKind.RECLAIM, f"reclaim:{job}:race", job, "governance-bot")

    def setup():
        enforcer = SlurmEnforcer(ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "slurm"), run=recorder)
        return lambda: enforcer.apply(action, utc_naive()).outcome

    outcomes = race(setup, 6)
    assert sorted(outcomes) == sorted([Outcome.APPLIED] + [Outcome.ALREADY_DONE] * 5)
    assert recorder.count("scancel") == 1
    slurm_cluster.wait_accounted(job, lambda r: r and r[-1]["state"].startswith("CANCELLED"), "cancelled")


def test_preempt_requeues_a_requeueable_job_and_refuses_one_that_is_not(jobs, slurm_cluster, enforcer, recorder):
    job = jobs["preempt"]
    result = enforcer.apply(Action(ActionKind.PREEMPT, f"preempt:{job}", job, "governance-bot"), utc_naive())
    assert result.outcome == Outcome.APPLIED, result.reason
    assert result.effects["command"] == f"scontrol requeue {job}" and result.effects["attempt"] == 2
    slurm_cluster.wait_for(f"job {job} requeued",
                           lambda: slurm_cluster.state(job) == "PENDING" and slurm_cluster.job(job)["restart_cnt"] == 1)
    slurm_cluster.wait_accounted(job, lambda r: len(r) == 2 and r[0]["state"] == "REQUEUED", "requeued")

    fixed = jobs["no_requeue"]
    refused = enforcer.apply(Action(ActionKind.PREEMPT, f"preempt:{fixed}", fixed, "governance-bot"), utc_naive())
    assert refused.outcome == Outcome.REFUSED and "not requeueable" in refused.reason
    assert slurm_cluster.state(fixed) == "RUNNING"
    assert recorder.count("scontrol", "requeue") == 1


def test_cap_runtime_shortens_the_time_limit_and_never_lengthens_it(jobs, slurm_cluster, enforcer):
    job = jobs["cap"]
    capped = enforcer.apply(Action(ActionKind.CAP_RUNTIME, f"cap:{job}:v1", job, "governance-bot", runtime_s=570),
                            utc_naive())
    assert capped.outcome == Outcome.APPLIED, capped.reason
    assert capped.effects["runtime_cap_s"] == 600  # whole minutes, rounded up
    assert slurm_cluster.job(job)["time_limit"] == 10
    longer = enforcer.apply(Action(ActionKind.CAP_RUNTIME, f"cap:{job}:v2", job, "governance-bot", runtime_s=1200),
                            utc_naive())
    assert longer.outcome == Outcome.REFUSED and "already 10 min" in longer.reason
    assert slurm_cluster.job(job)["time_limit"] == 10


def test_protected_pending_and_unknown_jobs_are_refused(jobs, slurm_cluster, enforcer, recorder, tmp_path):
    protected, held = jobs["protected"], jobs["held"]
    results = [
        enforcer.apply(Action(ActionKind.RECLAIM, f"reclaim:{protected}", protected, "governance-bot"), utc_naive()),
        enforcer.apply(Action(ActionKind.CAP_RUNTIME, f"cap:{protected}", protected, "governance-bot", runtime_s=60),
                       utc_naive()),
        enforcer.apply(Action(ActionKind.RECLAIM, f"reclaim:{held}", held, "governance-bot"), utc_naive()),
        enforcer.apply(Action(ActionKind.RECLAIM, "reclaim:99999999", "99999999", "governance-bot"), utc_naive()),
    ]
    assert [r.outcome for r in results] == [Outcome.REFUSED] * 4
    assert "protected workload (comment gpupool:inference)" in results[0].reason
    assert "exempt from automatic run-time caps" in results[1].reason
    assert results[2].reason == f"job {held} is PENDING, not running"
    assert results[3].reason.startswith("no job 99999999 in Slurm")
    assert slurm_cluster.state(protected) == "RUNNING" and slurm_cluster.state(held) == "PENDING"
    assert recorder.count("scancel") == 0 and recorder.count("scontrol") == 0
    assert [r["decision"] for r in _audit(tmp_path)] == ["refused"] * 4


def test_remind_marks_the_admin_comment_squeue_shows_and_leaves_the_comment(jobs, slurm_cluster, enforcer,
                                                                          recorder):
    job = jobs["remind"]
    action = Action(ActionKind.REMIND, f"remind:{job}", job, "governance-bot", policy="idle-allocation",
                    policy_version="1", reason="GPU activity 0.0% over the last 35 min; preempt in 15 min unless it is used")
    remind = enforcer.apply(action, utc_naive())
    assert remind.outcome == Outcome.APPLIED, remind.reason
    mark = remind.effects["admin_comment"]
    assert remind.effects["reminded"] == "root" and mark.startswith("gpupool: reminded ")
    assert mark.endswith("UTC: GPU activity 0.0% over the last 35 min; preempt in 15 min unless it is used "
                         "(policy idle-allocation 1)")
    # Slurm 22.05 takes it from root, and shows it to users and admins; the user's Comment is as it was
    seen = slurm_cluster.job(job)
    assert (seen["admin_comment"], seen["comment"]) == (mark, "gpupool:training")
    assert f"AdminComment={mark}" in slurm("scontrol", "show", "job", job)
    assert enforcer.apply(action, utc_naive()).outcome == Outcome.ALREADY_DONE
    assert slurm_cluster.state(job) == "RUNNING" and recorder.count("scontrol", "update") == 1


def test_quota_change_changes_nothing_in_slurm(slurm_cluster, enforcer, recorder):
    def grp_tres() -> str:
        return slurm("sacctmgr", "-n", "-P", "show", "assoc", "where", "account=vision", "user=",
                     "format=GrpTRES").strip()

    before = grp_tres()
    proposal = enforcer.apply(Action(ActionKind.QUOTA_CHANGE, "quota:vision:v1", "vision", "governance-bot",
                                     quota={"H100": 4}), utc_naive())
    assert proposal.outcome == Outcome.PROPOSED and proposal.proposal_id.startswith("slurm-qp-")
    assert proposal.effects["admin_command"] == "sacctmgr -i modify account where name=vision set GrpTRES=gres/gpu=4"
    assert grp_tres() == before
    unknown = enforcer.apply(Action(ActionKind.QUOTA_CHANGE, "quota:nobody", "nobody", "governance-bot",
                                    quota={"H100": 1}), utc_naive())
    assert unknown.outcome == Outcome.REFUSED and unknown.reason == "no Slurm account nobody"
    ran = {call[0] for call in recorder.calls}
    assert ran == {"sacctmgr"}
