"""The zombie policy's checkpoint staleness (version 2) at its boundaries, on hand-made frames: a training
job whose GPUs are all idle for STALE_IDLE_MINUTES (20) while its last ok checkpoint (or its start) is
older than its declared interval x CHECKPOINT_TOLERANCE (1.5) is a zombie."""
from __future__ import annotations

import pytest

from pipelines.contracts import PolicyKind
from pipelines.policies.idle import CHECKPOINT_TOLERANCE, STALE_IDLE_MINUTES, checkpoint_interval_s
from pipelines.policies.model import finding_key
from tests.policies.frames import T0, activity, alloc, at, busy, find, idle, inputs

ZOMBIE = PolicyKind.ZOMBIE


def _job(policy: str = "hourly", template: str = "training", gpus: int = 1) -> list[dict]:
    # started 100 minutes before T0; the frames' telemetry starts at T0, idle from there
    return [alloc(f"g{i}", gpu=i, template=template, started_at=at(-100), checkpoint_policy=policy)
            for i in range(gpus)]


def _checkpoint(minute: float, ok: bool = True) -> dict:
    return {"job_id": "j1", "attempt": 1, "at": at(minute), "is_checkpoint": ok}


def _idle(n: int, gpus: int = 1) -> list[dict]:
    return [m for i in range(gpus) for m in activity(f"g{i}", idle(n))]


def test_the_constants_and_the_declared_intervals():
    assert (STALE_IDLE_MINUTES, CHECKPOINT_TOLERANCE) == (20, 1.5)
    assert checkpoint_interval_s("hourly") == 3600
    assert checkpoint_interval_s("every 30 min") == 1800
    assert checkpoint_interval_s("Every 2 h") == 7200
    assert checkpoint_interval_s("every 1000 steps") is None
    assert checkpoint_interval_s("each epoch") is None
    assert checkpoint_interval_s(None) is None


def test_idle_but_checkpointing_on_time_is_not_a_zombie():
    # hourly: its last checkpoint 10 minutes before the GPUs went idle is due again at 80 (-10 + 90)
    assert find(inputs(_job(), _idle(60), [_checkpoint(-10)]), at(60), ZOMBIE) == []


def test_idle_with_its_checkpoint_overdue_past_the_limit_is_a_zombie():
    # last checkpoint at -60: overdue from 30 (-60 + 1.5 x 60); idle since 0
    progress = [_checkpoint(-60)]
    assert find(inputs(_job(), _idle(29), progress), at(29), ZOMBIE) == []  # not overdue yet
    [f] = find(inputs(_job(gpus=2), _idle(30, gpus=2), progress), at(30), ZOMBIE)
    assert (f["window_start_at"], f["detected_at"], f["window_end_at"]) == (T0, at(30), at(30))
    assert f["metric"] == "minutes_since_checkpoint"
    assert f["observed"] == pytest.approx(90) and f["threshold"] == pytest.approx(90)
    assert f["gpus_flagged"] == 2 and f["is_ongoing"] is True
    assert f["finding_id"] == finding_key("zombie", "2", "j1", 1, T0.isoformat())
    e = f["evidence"]
    assert (e["last_checkpoint_at"], e["checkpoint_overdue"], e["checkpoint_policy"]) == (
        "2026-11-01T09:00:00Z", True, "hourly")
    assert e["checkpoint_age_minutes"] == pytest.approx(90)


def test_long_overdue_needs_twenty_idle_minutes():
    progress = [_checkpoint(-95)]  # overdue since -5
    assert find(inputs(_job(), _idle(19), progress), at(19), ZOMBIE) == []
    [f] = find(inputs(_job(), _idle(20), progress), at(20), ZOMBIE)
    assert f["detected_at"] == at(20) and f["observed"] == pytest.approx(115)


def test_without_any_checkpoint_its_start_counts():
    # started at -100, no ok checkpoint: overdue since -10
    [f] = find(inputs(_job(), _idle(20)), at(20), ZOMBIE)
    assert f["detected_at"] == at(20) and f["evidence"]["last_checkpoint_at"] is None
    assert f["observed"] == pytest.approx(120)


def test_a_failed_write_is_progress_but_not_a_checkpoint():
    # a failed checkpoint write at 5 restarts the quiet period (the job is alive) but saves nothing
    [f] = find(inputs(_job(), _idle(30), [_checkpoint(-95), _checkpoint(5, ok=False)]), at(30), ZOMBIE)
    assert (f["window_start_at"], f["detected_at"]) == (at(5), at(25))


def test_policies_without_a_time_interval_and_other_templates_are_not_judged():
    for job in (_job("every 1000 steps"), _job("each epoch"), _job(template="experiment")):
        assert find(inputs(job, _idle(60)), at(60), ZOMBIE) == []


def test_one_busy_gpu_is_no_zombie_however_old_its_checkpoint():
    minutes = activity("g0", idle(60)) + activity("g1", busy(60))
    assert find(inputs(_job(gpus=2), minutes), at(60), ZOMBIE) == []


def test_the_old_rule_still_holds_and_comes_first_when_it_fires_first():
    # every 2 h: overdue at -100 + 180 = 80; no progress for 120 minutes fires at 120 anyway
    [f] = find(inputs(_job("every 2 h"), _idle(130)), at(130), ZOMBIE)
    assert f["detected_at"] == at(20 + 60)  # overdue at 80, idle well past 20 minutes
    assert f["metric"] == "minutes_since_checkpoint"
    # a job with no declared interval is caught by the old rule only, at 120
    [g] = find(inputs(_job("every 1000 steps"), _idle(130)), at(130), ZOMBIE)
    assert g["detected_at"] == at(120) and g["metric"] == "minutes_without_progress"
