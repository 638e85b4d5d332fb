"""Overrun, oversized, retry storm and template breach on hand-made frames."""
from __future__ import annotations

import pytest

from pipelines.contracts import PolicyKind
from tests.policies.frames import T0, activity, alloc, at, busy, find, idle, inputs


def test_overrun_past_factor_of_expected_runtime_caps_at_cap_factor():
    a = alloc(expected_runtime_s=3600)  # flagged past 1.5 h, capped at 1.75 h
    assert find(inputs([a], []), at(90), PolicyKind.OVERRUN) == []
    [f] = find(inputs([a], []), at(120), PolicyKind.OVERRUN)
    assert f["window_start_at"] == at(90) and f["detected_at"] == at(90)
    assert f["observed"] == 7200 and f["threshold"] == 5400
    assert f["evidence"]["runtime_cap_s"] == 6300 and f["evidence"]["limit"] == "expected_runtime"
    assert f["gpu_hours"] == pytest.approx(0.5)
    assert f["is_ongoing"] is True


def test_overrun_past_the_queue_max_runtime_and_the_cap_never_exceeds_it():
    [f] = find(inputs([alloc(max_runtime_s=3600)], []), at(61), PolicyKind.OVERRUN)
    assert f["evidence"]["limit"] == "queue_max_runtime" and f["evidence"]["runtime_cap_s"] == 3600
    [f] = find(inputs([alloc(expected_runtime_s=3600, max_runtime_s=6000)], []), at(95), PolicyKind.OVERRUN)
    assert f["evidence"]["runtime_cap_s"] == 6000  # 1.75 h would pass the queue's cap
    # an attempt that ended past its limit is recorded, not ongoing; inference is exempt from the rule
    [f] = find(inputs([alloc(expected_runtime_s=600, ended_at=at(30))], []), at(60), PolicyKind.OVERRUN)
    assert f["is_ongoing"] is False and f["window_end_at"] == at(30)
    assert find(inputs([alloc(template="inference", max_runtime_s=60)], []), at(60), PolicyKind.OVERRUN) == []


def test_oversized_eight_gpus_with_two_used_recommends_two():
    allocations = [alloc(f"g{i}", gpu=i, gpu_model="H100") for i in range(8)]
    minutes = [m for i in range(2) for m in activity(f"g{i}", busy(90), fb=60000.0)]
    minutes += [m for i in range(2, 8) for m in activity(f"g{i}", idle(90), fb=0.0)]
    [f] = find(inputs(allocations, minutes), at(90), PolicyKind.OVERSIZED)
    assert f["recommendation"] == "2 x H100 instead of 8 x H100"
    assert (f["observed"], f["threshold"], f["gpus_flagged"]) == (2, 8, 6)
    assert f["gpu_hours"] == pytest.approx(1.5 * 6)
    assert f["detected_at"] == at(60)


def test_oversized_one_light_gpu_recommends_a_mig_profile():
    # 30% busy at p95 -> 3 of 7 slices; 20 GB peak x 1.2 = 24 GB -> 3g.40gb on an A100
    [f] = find(inputs([alloc()], activity("a0", [0.3] * 90, fb=20000.0)), at(90), PolicyKind.OVERSIZED)
    assert f["recommendation"] == "1 x 3g.40gb instead of 1 x A100"
    assert f["evidence"]["recommended_profile"] == "3g.40gb"
    assert f["gpu_hours"] == pytest.approx(1.5 * 4 / 7)
    # a GPU that needs all its memory is right-sized; too short a run is not judged
    assert find(inputs([alloc()], activity("a0", [0.3] * 90, fb=78000.0)), at(90), PolicyKind.OVERSIZED) == []
    assert find(inputs([alloc()], activity("a0", [0.3] * 30, fb=2000.0)), at(30), PolicyKind.OVERSIZED) == []


def test_oversized_does_not_judge_gpus_without_telemetry():
    allocations = [alloc("g0"), alloc("g1", gpu=1)]
    assert find(inputs(allocations, activity("g0", busy(90), fb=70000.0)), at(90), PolicyKind.OVERSIZED) == []


def attempt(n: int, state: str | None, start: float, end: float | None, **fields) -> dict:
    return {"source": "allocator", "job_id": "j1", "attempt": n, "tenant": "vision", "queue": "q",
            "template": "training", "started_at": at(start), "ended_at": at(end) if end is not None else None,
            "end_state": state, "is_running": end is None, "is_job_finished": False, "gpu_hours": 1.0} | fields


def test_retry_storm_three_failures_within_a_day_while_still_retrying():
    attempts = [attempt(1, "FAILED", 0, 60), attempt(2, "OUT_OF_MEMORY", 70, 130), attempt(3, "FAILED", 140, 200),
                attempt(4, None, 210, None)]
    allocations = [alloc(attempt=4, started_at=at(210))]
    [f] = find(inputs(allocations, [], attempts=attempts), at(300), PolicyKind.RETRY_STORM)
    assert (f["attempt"], f["observed"], f["threshold"]) == (3, 3, 3)
    assert f["window_start_at"] == T0 and f["detected_at"] == at(200) and f["window_end_at"] == at(300)
    assert f["gpu_hours"] == pytest.approx(3.0)
    assert f["is_ongoing"] is True
    assert [x["attempt"] for x in f["evidence"]["failures"]] == [1, 2, 3]
    # two failures, or three spread over more than 24 h, are not a storm
    assert find(inputs(allocations, [], attempts=attempts[1:]), at(300), PolicyKind.RETRY_STORM) == []
    spread = [attempt(1, "FAILED", 0, 60), attempt(2, "FAILED", 800, 860), attempt(3, "FAILED", 1600, 1660)]
    assert find(inputs(allocations, [], attempts=spread), at(1700), PolicyKind.RETRY_STORM) == []
    # preemptions and cancellations are not failures
    benign = [attempt(1, "PREEMPTED", 0, 60), attempt(2, "CANCELLED", 70, 130), attempt(3, "FAILED", 140, 200)]
    assert find(inputs(allocations, [], attempts=benign), at(300), PolicyKind.RETRY_STORM) == []


def test_template_breach_lists_the_missing_fields():
    allocations = [
        alloc("t-ok", "j-ok", expected_runtime_s=3600, checkpoint_policy="hourly"),
        alloc("t-bad", "j-train", checkpoint_policy="none"),
        alloc("i-bad", "j-inf", template="inference", min_replicas=2),
        alloc("e-ok", "j-exp-ok", template="experiment", queue="backfill", queue_low_priority=True),
        alloc("e-bad", "j-exp", template="experiment", queue="prod", queue_low_priority=False),
        alloc("e-res", "j-exp-res", template="experiment", queue="prod", queue_low_priority=False, reservation="r1"),
        alloc("e-unknown", "j-exp-unk", template="experiment", queue="slurm-part"),
    ]
    found = {f["job_id"]: f for f in find(inputs(allocations, []), at(10), PolicyKind.TEMPLATE_BREACH)}
    assert sorted(found) == ["j-exp", "j-inf", "j-train"]
    assert found["j-train"]["evidence"]["missing"] == ["expected_runtime_s", "checkpoint_policy"]
    assert found["j-inf"]["evidence"]["missing"] == ["rollback"]
    assert found["j-exp"]["recommendation"] == "declare reservation|queue_low_priority"
    assert found["j-train"]["is_ongoing"] is True
