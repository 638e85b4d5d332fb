"""The gpu_health policy and its drain/undrain plan, with known answers: thresholds at their
boundaries, application XIDs, node vs GPU targets, the undrain's wait and telemetry, the rate limit."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json

import polars as pl
import pytest

from pipelines.contracts import DecisionStatus, Mode, PolicyKind, StepAction
from pipelines.policies.catalog import load_catalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.inputs import PolicyInputs
from pipelines.policies.planner import plan
from tests.policies.history import MemoryHistory

T0 = dt.datetime(2026, 11, 1, 0, 0)
HOUR = dt.timedelta(hours=1)


def at(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


def catalog(mode: Mode = Mode.ENFORCE, **params):
    """The shipped catalog with gpu-health's parameters (defaults: 2 faults in 24 h, 2 GPUs a node, 24 h healthy)."""
    cat = load_catalog()
    policy = cat.policies["gpu-health"]
    policy = dataclasses.replace(policy, mode=mode, params={**policy.params, **params})
    return dataclasses.replace(cat, policies={**cat.policies, "gpu-health": policy})


def fault(host: str, gpu: int, hours: float, *, xid: int | None = 79, signal: str = "xid", hardware: bool = True):
    return {"host": host, "gpu": gpu, "minute_at": at(hours), "signal": signal, "xid": xid, "event_count": 1.0,
            "is_hardware_fault": hardware}


def seen(host: str, gpu: int, hours: float):
    return {"host": host, "gpu": gpu, "minute_at": at(hours), "signal": "telemetry", "xid": None,
            "event_count": 60.0, "is_hardware_fault": False}


def health(rows: list[dict]) -> PolicyInputs:
    return PolicyInputs(allocations=None, minutes=None, health=pl.from_dicts(rows, infer_schema_length=None))


def found(rows: list[dict], now: dt.datetime, cat=None) -> pl.DataFrame:
    return evaluate(health(rows), cat or catalog(), now, kinds=[PolicyKind.GPU_HEALTH])


def test_a_gpu_with_min_faults_within_the_window_is_a_finding_at_the_second_fault():
    [row] = found([fault("n1", 3, 0), fault("n1", 3, 23.9)], at(48)).iter_rows(named=True)
    assert (row["job_id"], row["attempt"], row["tenant"], row["queue"], row["source"]) == ("n1/3", 0, "platform",
                                                                                          "platform", "allocator")
    assert row["detected_at"] == at(23.9) + dt.timedelta(minutes=1)
    assert row["window_start_at"] == at(0) and row["metric"] == "hardware_fault_minutes" and row["observed"] == 2
    assert row["finding_id"] == "gpu-health:1:n1/3:a0:2026-11-01T00:00:00"


def test_faults_further_apart_than_the_window_or_below_the_threshold_are_not():
    # 24 h + 1 min apart: the first fault minute has left the window when the second ends
    assert found([fault("n1", 3, 0), fault("n1", 3, 24)], at(72)).is_empty()
    assert found([fault("n1", 3, 0), fault("n1", 3, 1)], at(72), catalog(min_hardware_faults=3)).is_empty()
    assert found([fault("n1", 3, 0), fault("n1", 3, 1), fault("n1", 3, 2)], at(72),
                 catalog(min_hardware_faults=3)).height == 1


def test_xid_13_never_counts_even_when_flagged_and_warnings_do_not_count():
    rows = [fault("n1", 0, h, xid=13) for h in (0, 1, 2)]
    rows += [fault("n1", 0, h, xid=None, signal="thermal_throttle", hardware=False) for h in (3, 4)]
    assert found(rows, at(10)).is_empty()
    assert found([fault("n1", 0, 0, xid=48), fault("n1", 0, 1, xid=None, signal="ecc_dbe")], at(10)).height == 1


def test_a_node_with_enough_faulty_gpus_is_drained_whole():
    rows = [fault("n1", 0, 0), fault("n1", 0, 1), fault("n1", 5, 2), fault("n1", 5, 3), fault("n2", 1, 0)]
    frame = found(rows, at(10))
    assert frame["job_id"].to_list() == ["n1/0", "n1"]  # GPU 5's own finding is covered by the node's
    node = frame.row(1, named=True)
    assert node["metric"] == "faulty_gpus" and node["gpus_flagged"] == 2 and node["window_start_at"] == at(0)
    assert json.loads(node["evidence"])["faulty_gpus"] == [0, 5]
    assert found(rows, at(10), catalog(node_min_faulty_gpus=3))["job_id"].to_list() == ["n1/0", "n1/5"]


def test_the_engine_is_the_hosts():
    rows = [{**fault("n1", 0, h), "engine": "slurm"} for h in (0, 1)]
    assert found(rows, at(5))["source"].to_list() == ["slurm"]


def _plan(rows, now, history, cat=None):
    cat = cat or catalog()
    decided = plan(found(rows, now, cat), cat, history, now)
    history.record(decided, now)
    return decided


def test_drain_then_undrain_healthy_hours_after_the_drain_not_before():
    history = MemoryHistory()
    faults = [fault("n1", 3, 0), fault("n1", 3, 1)]
    [drain] = _plan(faults, at(2), history)
    assert (drain.action, drain.status, drain.job_id) == (StepAction.DRAIN, DecisionStatus.QUEUED, "n1/3")
    assert "n1/3 drained" in drain.reason
    telemetry = [seen("n1", 3, h) for h in range(2, 40)]
    assert _plan(faults + telemetry, at(2) + 24 * HOUR - dt.timedelta(seconds=1), history) == []
    [undrain] = _plan(faults + telemetry, at(26), history)
    assert (undrain.action, undrain.status, undrain.step_index) == (StepAction.UNDRAIN, DecisionStatus.QUEUED, 1)
    assert undrain.finding_id == drain.finding_id
    assert _plan(faults + telemetry, at(30), history) == []  # once


def test_a_fault_after_the_drain_moves_the_undrain():
    history = MemoryHistory()
    faults = [fault("n1", 3, 0), fault("n1", 3, 1)]
    _plan(faults, at(2), history)
    later = faults + [fault("n1", 3, 10)] + [seen("n1", 3, h) for h in range(2, 40)]
    assert _plan(later, at(26), history) == []
    [undrain] = _plan(later, at(34.1), history)
    assert undrain.action == StepAction.UNDRAIN


def test_no_undrain_without_telemetry():
    history = MemoryHistory()
    faults = [fault("n1", 3, 0), fault("n1", 3, 1)]
    _plan(faults, at(2), history)
    assert _plan(faults, at(50), history) == []  # silent since the drain
    assert _plan(faults + [seen("n1", 3, 20)], at(50), history) == []  # seen, but not by the due time
    assert [a.action for a in _plan(faults + [seen("n1", 3, 26)], at(50), history)] == [StepAction.UNDRAIN]


def test_shadow_mode_records_the_drain_and_the_same_plan_gives_the_same_keys():
    rows = [fault("n1", 3, 0), fault("n1", 3, 1)]
    first = plan(found(rows, at(2), catalog(Mode.SHADOW)), catalog(Mode.SHADOW), MemoryHistory(), at(2))
    again = plan(found(rows, at(3), catalog(Mode.SHADOW)), catalog(Mode.SHADOW), MemoryHistory(), at(3))
    assert [(a.status, a.idempotency_key) for a in first] == [(a.status, a.idempotency_key) for a in again]
    assert first[0].status == DecisionStatus.SHADOW


@pytest.mark.parametrize("limit", [0, 2])
def test_drains_per_hour_are_limited_and_wait_for_the_next_hour(limit):
    cat = catalog()
    cat = dataclasses.replace(cat, rate_limits=dataclasses.replace(cat.rate_limits, drains_per_hour=limit))
    rows = [fault(f"n{i}", 0, h) for i in range(3) for h in (0, 1)]
    history = MemoryHistory()
    decided = _plan(rows, at(2), history, cat)
    assert [a.status for a in decided].count(DecisionStatus.QUEUED) == limit
    assert [a.status for a in decided].count(DecisionStatus.RATE_LIMITED) == 3 - limit
    assert "drains in the last hour" in decided[-1].status_reason
    assert [a.status for a in _plan(rows, at(2) + HOUR, history, cat)].count(DecisionStatus.QUEUED) == 0
    later = _plan(rows, at(2) + HOUR + dt.timedelta(seconds=1), history, cat)
    assert [a.status for a in later].count(DecisionStatus.QUEUED) == min(limit, 3 - limit)
