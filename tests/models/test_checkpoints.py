"""Checkpoints, work lost, policy breaches and artifact status, each known by construction.

Training jobs on 2026-11-01, one GPU each (j-pre two), tenant vision, policy hourly unless the table
says otherwise; checkpoints reported by the allocator (attempt named) or by MLflow (no attempt).
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.models.builders import Row, at, build, event, gpu, load, one, placement, rows, simple_job, submit

HOURLY = {"expected_runtime_s": 14400, "checkpoint_policy": "hourly"}


def artifact(job_id: str, kind: str, written_at: dt.datetime, attempt: int | None = 1, status: str = "ok",
             source: str = "allocator", **fields: Any) -> Row:
    row = {
        "event_id": f"{source}:{job_id}:{kind}:{written_at.isoformat()}", "occurred_at": written_at,
        "job_id": job_id, "attempt": attempt, "kind": kind, "status": status, "source": source,
        "source_file": "artifacts.jsonl",
    }
    return row | fields


def training(job_id: str, index: int, start: dt.datetime, end: dt.datetime | None, state: str = "COMPLETED",
             policy: str = "hourly", **fields: Any) -> tuple[list[Row], list[Row]]:
    spec = {"expected_runtime_s": 14400, "checkpoint_policy": policy}
    return simple_job(job_id, "n1", index, start, end, state=state, spec=spec, **fields)


def scenario() -> tuple[list[Row], list[Row], list[Row]]:
    events, placements, artifacts = [], [], []

    def add(parts: tuple[list[Row], list[Row]]) -> None:
        events.extend(parts[0])
        placements.extend(parts[1])

    # preempted at 12:00 on 2 GPUs; last ok checkpoint 11:00 (the failed one at 11:40 saves nothing): 2 x 1 h lost
    add(training("j-pre", 0, at("10:00"), None, gpus=2))
    events.append(event("j-pre", "preempt", at("12:00"), state="PREEMPTED", reason="preempted by job j-9"))
    placements.append(placement("j-pre", 1, "n1", 1, at("10:00")))
    artifacts += [artifact("j-pre", "checkpoint", at("11:00")),
                  artifact("j-pre", "checkpoint", at("11:40"), status="failed")]
    # reclaimed at 10:30 without a checkpoint: 0.5 h lost since the start
    add(training("j-reclaim", 2, at("10:00"), at("10:30"), state="CANCELLED"))
    events[-1]["reason"] = "reclaimed: idle for 30 min"
    # hourly, 08:00-12:00, ok at 09:00 and 11:30: a 2.5 h gap > 1.5 h -> breach (gap); an artifact -> logged_only
    add(training("j-breach", 3, at("08:00"), at("12:00")))
    artifacts += [artifact("j-breach", "checkpoint", at("09:00")), artifact("j-breach", "checkpoint", at("11:30")),
                  artifact("j-breach", "artifact", at("12:00"), location="s3://m/breach/model.pt"),
                  artifact("j-breach", "model_version", at("12:01"), status="failed")]
    # hourly, 08:00-10:00, never a checkpoint -> breach (no_checkpoint); a failed artifact -> none
    add(training("j-never", 4, at("08:00"), at("10:00")))
    artifacts.append(artifact("j-never", "artifact", at("10:00"), status="failed"))
    # hourly kept: 09:00, 10:00, 11:00, ended 11:20; a model registered in MLflow after the end -> registered
    add(training("j-kept", 5, at("08:00"), at("11:20")))
    artifacts += [artifact("j-kept", "checkpoint", at(t)) for t in ("09:00", "10:00", "11:00")]
    artifacts.append(artifact("j-kept", "model_version", at("11:45"), attempt=None, source="mlflow",
                              model_name="resnet", model_version="3", run_id="r-kept"))
    # a step policy has no interval: 4 h without a checkpoint is not judged
    add(training("j-steps", 6, at("08:00"), at("12:00"), policy="every 1000 steps"))
    # every 30 min, one checkpoint at 08:30, then 90 min to the end > 45 min -> breach (gap); checkpoints only -> none
    add(training("j-30min", 7, at("08:00"), at("10:00"), policy="every 30 min"))
    artifacts.append(artifact("j-30min", "checkpoint", at("08:30")))
    # two attempts, MLflow checkpoints (no attempt) matched by time: 10:30 -> attempt 1 (preempted at 11:00,
    # 0.5 h lost), 12:00 -> attempt 2 (failed at 13:00, 1 h lost)
    events += [
        submit("j-ml", at("10:00"), spec=HOURLY), event("j-ml", "start", at("10:00")),
        event("j-ml", "preempt", at("11:00"), state="PREEMPTED"),
        event("j-ml", "start", at("11:30"), attempt=2),
        event("j-ml", "finish", at("13:00"), attempt=2, state="FAILED", exit_code=1),
    ]
    placements += [placement("j-ml", 1, "n1", 8, at("10:00")), placement("j-ml", 2, "n1", 8, at("11:30"))]
    artifacts += [artifact("j-ml", "checkpoint", at(t), attempt=None, source="mlflow", run_id="r-ml")
                  for t in ("10:30", "12:00")]
    # not a training job: its model version makes no artifact-status row
    add(simple_job("j-inf", "n1", 9, at("08:00"), at("09:00"), template="inference"))
    artifacts.append(artifact("j-inf", "model_version", at("09:00"), model_name="svc", model_version="1"))
    return events, placements, artifacts


def test_checkpoints_work_lost_breaches_and_artifacts(warehouse):
    events, placements, artifacts = scenario()
    load(warehouse, gpu_inventory=[gpu("n1", i) for i in range(10)], job_events=events, job_gpus=placements,
         artifact_events=artifacts)
    # the same report delivered again by another ingest counts once
    load(warehouse, ingest="again", artifact_events=[artifact("j-pre", "checkpoint", at("11:00"))])
    con = build(warehouse)

    got = {(r["job_id"], r["attempt"]): r for r in rows(con, "select * from marts.fct_attempt_checkpoints")}
    pre = got[("j-pre", 1)]
    assert (pre["cause"], pre["checkpoints_ok"], pre["checkpoints_failed"]) == ("preempted", 1, 1)
    assert pre["last_ok_checkpoint_at"] == at("11:00")
    assert pre["work_lost_gpu_hours"] == pytest.approx(2.0)
    assert got[("j-reclaim", 1)]["cause"] == "reclaimed"
    assert got[("j-reclaim", 1)]["work_lost_gpu_hours"] == pytest.approx(0.5)
    assert (got[("j-ml", 1)]["work_lost_gpu_hours"], got[("j-ml", 2)]["work_lost_gpu_hours"]) == (
        pytest.approx(0.5), pytest.approx(1.0))
    assert got[("j-ml", 2)]["last_ok_checkpoint_at"] == at("12:00")
    assert got[("j-kept", 1)]["work_lost_gpu_hours"] == 0

    breaches = {job: r["policy_breach_kind"] for (job, _), r in got.items() if r["is_policy_breach"]}
    assert breaches == {"j-breach": "gap", "j-never": "no_checkpoint", "j-30min": "gap"}
    assert (got[("j-breach", 1)]["max_gap_s"], got[("j-kept", 1)]["max_gap_s"]) == (9000, 3600)
    assert (got[("j-kept", 1)]["end_gap_s"], got[("j-30min", 1)]["checkpoint_interval_s"]) == (1200, 1800)
    steps = got[("j-steps", 1)]
    assert (steps["checkpoint_policy_kind"], steps["checkpoint_interval_s"]) == ("steps", None)

    # preempted: j-pre 2.0 + j-ml attempt 1 0.5, both with a checkpoint; reclaimed 0.5 without; user_code 1.0
    lost = {r["cause"]: r for r in rows(con, "select * from metrics.work_lost")}
    assert set(lost) == {"preempted", "reclaimed", "user_code"}
    assert (lost["preempted"]["attempts"], lost["preempted"]["work_lost_gpu_hours"]) == (2, pytest.approx(2.5))
    assert lost["preempted"]["attempts_without_checkpoint"] == 0
    assert (lost["reclaimed"]["attempts_without_checkpoint"],
            lost["reclaimed"]["work_lost_without_checkpoint_gpu_hours"]) == (1, pytest.approx(0.5))
    assert lost["user_code"]["work_lost_with_checkpoint_gpu_hours"] == pytest.approx(1.0)

    # 9 training attempts, 8 with a time policy (not j-steps), 3 breaches, one never checkpointed
    month = one(con, "select * from metrics.checkpoint_policy_breaches")
    assert (month["training_attempts"], month["attempts_with_time_policy"], month["policy_breaches"],
            month["breaches_without_checkpoint"], month["jobs_breaching"]) == (9, 8, 3, 1, 3)
    assert month["policy_breach_rate_pct"] == pytest.approx(37.5)

    # j-breach, measured at each hour's end: 09:00 -> 0, 10:00 -> 1 h, 11:00 -> 2 h (overdue), 12:00 -> 30 min
    ages = rows(con, "select hour_at, checkpoint_age_s, is_checkpoint_overdue from metrics.checkpoint_age "
                     "where job_id = 'j-breach' order by hour_at")
    assert [(r["hour_at"].hour, r["checkpoint_age_s"], r["is_checkpoint_overdue"]) for r in ages] == [
        (8, 0, False), (9, 3600, False), (10, 7200, True), (11, 1800, False)]

    status = {r["job_id"]: r for r in rows(con, "select * from marts.fct_job_artifacts")}
    assert {job: r["artifact_status"] for job, r in status.items()} == {
        "j-kept": "registered", "j-breach": "logged_only", "j-never": "none", "j-30min": "none",
        "j-steps": "none", "j-reclaim": "none", "j-ml": "none"}
    assert (status["j-kept"]["model_name"], status["j-kept"]["model_version"]) == ("resnet", "3")
    assert (status["j-30min"]["has_checkpoint"], status["j-never"]["has_checkpoint"]) == (True, False)
    by_status = {r["artifact_status"]: r for r in rows(con, "select * from metrics.artifact_status")}
    assert {s: r["jobs"] for s, r in by_status.items()} == {"registered": 1, "logged_only": 1, "none": 5}
    assert by_status["none"]["jobs_share_pct"] == pytest.approx(100 * 5 / 7)
    assert by_status["none"]["jobs_with_checkpoint"] == 2  # j-30min, j-ml
