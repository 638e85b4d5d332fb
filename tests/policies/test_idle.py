"""Idle allocation, zombie and idle interactive at their boundaries, on hand-made minute frames."""
from __future__ import annotations

import json

import polars as pl
import pytest

from pipelines.contracts import PolicyKind
from pipelines.policies.model import finding_key
from tests.policies.frames import T0, activity, alloc, at, busy, catalog_with, find, idle, inputs

IDLE = PolicyKind.IDLE_ALLOCATION


def test_thirty_idle_minutes_are_caught_and_twenty_nine_are_not():
    caught = find(inputs([alloc()], activity("a0", idle(30) + busy(10))), at(40), IDLE)
    assert len(caught) == 1
    f = caught[0]
    assert (f["window_start_at"], f["window_end_at"], f["detected_at"]) == (T0, at(30), at(30))
    assert f["gpu_hours"] == pytest.approx(0.5)
    assert f["is_ongoing"] is False  # busy again by the data's end
    assert f["finding_id"] == finding_key("idle-allocation", "1", "j1", 1, T0.isoformat())
    assert find(inputs([alloc()], activity("a0", idle(29) + busy(10))), at(39), IDLE) == []


def test_short_spikes_inside_idle_do_not_reset_the_window_but_count_in_the_mean():
    # a 10 s burst makes one minute ~17% busy; a 2-minute keep-alive run is tolerated too
    values = idle(10) + [0.17] + idle(10) + busy(2) + idle(10)
    [f] = find(inputs([alloc()], activity("a0", values)), at(33), IDLE)
    assert f["window_start_at"] == T0 and f["window_end_at"] == at(33)
    assert f["observed"] == pytest.approx((0.17 + 1.8) / 33)
    assert f["evidence"]["spikes_ignored"] == 2
    assert f["evidence"]["gpus"][0]["busy_minutes"] == 3
    assert f["is_ongoing"] is True


def test_three_busy_minutes_reset_the_window():
    values = idle(20) + busy(3) + idle(20)
    assert find(inputs([alloc()], activity("a0", values)), at(43), IDLE) == []


def test_memory_floor_separates_holding_memory_from_truly_idle(tmp_path):
    catalog = catalog_with(tmp_path, lambda doc: doc["policies"]["idle-allocation"]["params"].update(
        memory_floor_mib=1000))
    allocations = [alloc("holding", "j-hold"), alloc("empty", "j-empty")]
    minutes = activity("holding", idle(40), fb=30000.0) + activity("empty", idle(40), fb=500.0)
    found = find(inputs(allocations, minutes), at(40), IDLE, catalog)
    assert [f["job_id"] for f in found] == ["j-empty"]
    # without a floor both are idle
    assert len(find(inputs(allocations, minutes), at(40), IDLE)) == 2


def test_mig_slice_counts_its_fraction():
    a = alloc("slice", fraction=1 / 7, gpu_instance_profile="1g.10gb", share_mode="mig")
    [f] = find(inputs([a], activity("slice", idle(60))), at(60), IDLE)
    assert f["gpu_hours"] == pytest.approx(1 / 7)
    assert (f["gpus_flagged"], f["gpus_held"]) == (1, 1)


def test_eight_gpu_job_with_one_busy_gpu_flags_seven():
    allocations = [alloc(f"g{i}", gpu=i) for i in range(8)]
    minutes = [m for i in range(1, 8) for m in activity(f"g{i}", idle(45))] + activity("g0", busy(45))
    [f] = find(inputs(allocations, minutes), at(45), IDLE)
    assert (f["gpus_flagged"], f["gpus_held"]) == (7, 8)
    assert f["gpu_hours"] == pytest.approx(7 * 0.75)
    assert f["recommendation"] == "7 of 8 GPUs idle: ask for 1 GPUs"
    assert sorted(g["allocation_id"] for g in f["evidence"]["gpus"]) == [f"g{i}" for i in range(1, 8)]
    assert f["is_ongoing"] is True


def test_busy_early_then_idle_for_hours_is_caught_from_when_it_went_idle():
    [f] = find(inputs([alloc()], activity("a0", busy(120) + idle(240))), at(360), IDLE)
    assert f["window_start_at"] == at(120)
    assert f["detected_at"] == at(150)
    assert f["gpu_hours"] == pytest.approx(4.0)
    assert f["is_ongoing"] is True


def test_missing_telemetry_is_not_idleness():
    # an hour with no telemetry between two 20-minute idle runs: two short runs, no window
    values = idle(20) + [None] * 60 + idle(20)
    assert find(inputs([alloc()], activity("a0", values)), at(100), IDLE) == []
    # a 2-minute scrape gap is bridged: 32 minutes with 30 reported (coverage 0.94 >= 0.9)
    [f] = find(inputs([alloc()], activity("a0", idle(15) + [None, None] + idle(15))), at(32), IDLE)
    assert f["evidence"]["gpus"][0]["missing_minutes"] == 2
    # sparse telemetry (every other minute) does not reach the coverage needed
    assert find(inputs([alloc()], activity("a0", [0.0, None] * 40)), at(80), IDLE) == []
    # no telemetry at all: nothing
    assert find(inputs([alloc()], []), at(80), IDLE) == []


def test_stale_telemetry_is_not_ongoing():
    [f] = find(inputs([alloc()], activity("a0", idle(40))), at(60), IDLE)
    assert f["is_ongoing"] is False  # the GPU stopped reporting 20 minutes before the data's end


def test_inference_uses_its_longer_window_and_interactive_is_left_to_its_policy():
    allocations = [alloc("inf", "j-inf", template="inference"), alloc("nb", "j-nb", template="interactive")]
    minutes = activity("inf", idle(45)) + activity("nb", idle(45))
    assert find(inputs(allocations, minutes), at(45), IDLE) == []
    [f] = find(inputs(allocations, activity("inf", idle(60))), at(60), IDLE)
    assert f["scope"] == "template:inference"


def test_zombie_needs_every_gpu_idle_and_no_progress_for_the_limit():
    allocations = [alloc("g0"), alloc("g1", gpu=1)]
    minutes = activity("g0", idle(150)) + activity("g1", idle(150))
    [f] = find(inputs(allocations, minutes), at(150), PolicyKind.ZOMBIE)
    assert (f["window_start_at"], f["detected_at"], f["window_end_at"]) == (T0, at(120), at(150))
    assert f["observed"] == pytest.approx(150) and f["threshold"] == 120
    assert f["is_ongoing"] is True and f["gpus_flagged"] == 2
    # a progress signal (job event, checkpoint) 60 minutes in restarts the clock: 90 quiet minutes
    progress = [{"job_id": "j1", "attempt": 1, "at": at(60)}]
    assert find(inputs(allocations, minutes, progress), at(150), PolicyKind.ZOMBIE) == []
    # one GPU busy: not a zombie
    minutes = activity("g0", idle(150)) + activity("g1", busy(150))
    assert find(inputs(allocations, minutes), at(150), PolicyKind.ZOMBIE) == []


def test_zombie_progress_before_a_long_quiet_period_still_caught():
    progress = [{"job_id": "j1", "attempt": 1, "at": at(10)}]
    [f] = find(inputs([alloc()], activity("a0", idle(200)), progress), at(200), PolicyKind.ZOMBIE)
    assert f["window_start_at"] == at(10)
    assert f["detected_at"] == at(130)
    assert f["evidence"]["last_progress_at"] == "2026-11-01T10:10:00Z"


def test_idle_interactive_reminds_after_the_threshold_and_its_steps_reclaim_later():
    nb = alloc(template="interactive")
    assert find(inputs([nb], activity("a0", idle(59))), at(59), PolicyKind.IDLE_INTERACTIVE) == []
    [f] = find(inputs([nb], activity("a0", idle(60))), at(60), PolicyKind.IDLE_INTERACTIVE)
    assert f["detected_at"] == at(60) and f["is_ongoing"] is True
    from pipelines.policies.catalog import load_catalog

    rule = load_catalog().rule("idle-interactive", queue="q", template="interactive")
    assert [(s.action.value, s.after_s) for s in rule.steps] == [("remind", 0), ("reclaim", 3600)]
    # the job's own idle_reminder_s wins: 20 minutes
    [f] = find(inputs([nb | {"idle_reminder_s": 1200}], activity("a0", idle(20))), at(20),
               PolicyKind.IDLE_INTERACTIVE)
    assert f["threshold"] == 20
    # training jobs are not interactive sessions
    assert find(inputs([alloc()], activity("a0", idle(90))), at(90), PolicyKind.IDLE_INTERACTIVE) == []


def test_window_is_thirty_elapsed_minutes_from_a_mid_minute_start_not_thirty_minute_rows():
    # The allocation starts at 10:00:30; its first minute row (10:00) holds a sample taken after the
    # start. 30 idle minute rows (10:00 .. 10:29) span 10:00:30 -> 10:30, 29.5 elapsed minutes: not
    # the 30-minute window. 31 rows span 30.5 minutes: caught, starting at the allocation's start.
    start = at(0.5)
    assert find(inputs([alloc(started_at=start)], activity("a0", idle(30) + busy(10))), at(40), IDLE) == []
    [f] = find(inputs([alloc(started_at=start)], activity("a0", idle(31) + busy(10))), at(41), IDLE)
    assert (f["window_start_at"], f["window_end_at"]) == (start, at(31))
    assert f["gpu_hours"] == pytest.approx(30.5 / 60)


def test_idle_policies_evaluated_together_find_what_each_finds_alone():
    # evaluate finds the three idle policies' windows in one pass (an allocation judged once per distinct
    # rule: idle-allocation's 0.05 and zombie's 0.02 thresholds differ); each policy alone finds its own
    from pipelines.policies import idle as policies
    from pipelines.policies.catalog import load_catalog
    from pipelines.policies.evaluate import evaluate

    catalog = load_catalog()
    allocations = [alloc("g0"), alloc("g1", gpu=1), alloc("inf", "j-inf", template="inference"),
                   alloc("nb", "j-nb", template="interactive"), alloc("quiet", "j-quiet")]
    minutes = (
        activity("g0", idle(20) + [0.03] * 110 + busy(3) + idle(40))  # idle at 0.05, busy at zombie's 0.02
        + activity("g1", idle(150) + [None] * 5 + idle(18))
        + activity("inf", idle(70) + [None, 0.9] + idle(100))
        + activity("nb", [0.03] * 70 + busy(1) + idle(100))
        + activity("quiet", idle(175))
    )[::-1]  # the minutes in no order
    data = inputs(allocations, minutes)
    now = at(173)
    together = evaluate(data, catalog, now, kinds=policies.IDLE_KINDS)
    alone = pl.concat([policies.idle_allocation(data, catalog, "idle-allocation", now),
                       policies.zombie(data, catalog, "zombie", now),
                       policies.idle_interactive(data, catalog, "idle-interactive", now)])
    assert set(together["policy"]) == {"idle-allocation", "zombie", "idle-interactive"}
    assert together["job_id"].n_unique() == 4
    assert _rounded(together).equals(_rounded(alone.select(together.columns).sort("detected_at", "finding_id")))


def _rounded(found: pl.DataFrame) -> pl.DataFrame:
    """The findings with their means to 12 decimals: Polars' group mean can differ in the 17th digit
    with the size of the frame it is taken in (the one pass holds more rows than one policy's)."""
    def evidence(text: str) -> str:
        return json.dumps(json.loads(text, parse_float=lambda v: round(float(v), 12)))
    return found.with_columns(pl.col("observed").round(12),
                              pl.col("evidence").map_elements(evidence, return_dtype=pl.String))
