"""inputs_from_warehouse + evaluate on a small warehouse built from raw rows (tests/models/builders)."""
from __future__ import annotations

import datetime as dt

import pytest

from pipelines.contracts import FINDING_SCHEMA
from pipelines.policies.catalog import load_catalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.inputs import inputs_from_warehouse
from pipelines.policies.model import LIVE_KINDS
from tests.models.builders import at, build, event, gpu, load, placement, quota, series, simple_job, submit

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB = "DCGM_FI_DEV_FB_USED"


def test_findings_from_a_built_warehouse(warehouse):
    # j-idle: training on GPUs 0 and 1 from 10:00, still running; GPU 0 busy, GPU 1 idle for 60 min.
    # j-over: declared 30 min, running 10:00-12:00 (past 1.5 x 30 min).
    # j-slurm: a training job without its template's fields, finished.
    idle_events, idle_gpus = simple_job("j-idle", "a100-01", 0, at("10:00"), None,
                                        spec={"expected_runtime_s": 86400, "checkpoint_policy": "hourly"})
    idle_gpus.append(idle_gpus[0] | {"gpu": 1})
    over_events, over_gpus = simple_job("j-over", "a100-01", 2, at("10:00"), at("12:00"),
                                        spec={"expected_runtime_s": 1800, "checkpoint_policy": "hourly"})
    bad_events = [submit("j-bad", at("10:00"), spec={"checkpoint_policy": "none"}),
                  event("j-bad", "start", at("10:00")), event("j-bad", "finish", at("10:30"), state="COMPLETED")]
    samples = (
        series("a100-01", 0, GR, at("10:00"), 60, 0.8) + series("a100-01", 1, GR, at("10:00"), 60, 0.0)
        + series("a100-01", 1, FB, at("10:00"), 60, 100.0) + series("a100-01", 2, GR, at("10:00"), 120, 0.7)
    )
    load(
        warehouse,
        gpu_inventory=[gpu("a100-01", i) for i in range(4)],
        queue_quotas=[quota("vision-train", "vision", "A100", 4.0, max_runtime_s=172800)],
        job_events=idle_events + over_events + bad_events,
        job_gpus=[*idle_gpus, *over_gpus, placement("j-bad", 1, "a100-01", 3, at("10:00"))],
        dcgm_samples=samples,
    )
    con = build(warehouse)
    start, end = dt.datetime(2026, 11, 1), at("11:00")
    inputs = inputs_from_warehouse(con, start, end)

    assert inputs.allocations.filter(job_id="j-over")["is_running"].to_list() == [True]  # as it stood at 11:00
    assert inputs.allocations.filter(job_id="j-idle")["max_runtime_s"].to_list() == [172800, 172800]
    assert inputs.minutes["minute_at"].max() < end

    findings = evaluate(inputs, load_catalog(), end)
    assert findings.schema == FINDING_SCHEMA
    by_policy = {(r["policy"], r["job_id"]): r for r in findings.to_dicts()}
    idle = by_policy[("idle-allocation", "j-idle")]
    assert (idle["gpus_flagged"], idle["gpus_held"]) == (1, 2)
    assert idle["gpu_hours"] == pytest.approx(1.0)
    assert idle["is_ongoing"] is True
    over = by_policy[("overrun", "j-over")]
    assert over["detected_at"] == at("10:45") and over["is_ongoing"] is True
    assert ("template-breach", "j-bad") in by_policy
    assert "zombie" not in {p for p, _ in by_policy}  # GPU 0 is busy

    live = evaluate(inputs, load_catalog(), end, kinds=LIVE_KINDS)
    assert set(live["kind"]) <= {k.value for k in LIVE_KINDS}
    # re-running the same window finds the same things with the same ids
    assert evaluate(inputs_from_warehouse(con, start, end), load_catalog(), end)["finding_id"].to_list() == \
        findings["finding_id"].to_list()
