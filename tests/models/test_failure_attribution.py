"""Failure attribution: every ended attempt gets one cause, each known by construction. Jobs run
10:00-10:30 on one GPU each; the telemetry is dcgm-exporter's own lines through the text parser."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.models.builders import DAY1, at, build, event, gpu, load, one, rows, simple_job
from tests.models.health_lines import every, line, parse

XID = "DCGM_EXP_XID_ERRORS_COUNT"

# job -> (GPU on n1, end state, exit code, reason, expected cause)
JOBS = {
    "j-xid79": (0, "FAILED", 1, None, "hardware"),          # XID 79 at 10:20, during the attempt
    "j-xid79-after": (1, "FAILED", 1, None, "user_code"),   # XID 79 at 10:40, after it ended
    "j-xid13": (2, "FAILED", 1, None, "user_code"),         # XID 13: raised by user code
    "j-dbe": (3, "FAILED", 1, None, "hardware"),            # ECC double-bit errors at 10:10
    "j-oom": (4, "FAILED", 137, None, "out_of_memory"),
    "j-nodefail": (5, "NODE_FAIL", None, None, "hardware"),
    "j-timeout": (6, "TIMEOUT", None, None, "time_limit"),
    "j-ok": (7, "COMPLETED", 0, None, "completed"),
    "j-cancel": (8, "CANCELLED", None, "cancelled by uid 1000", "cancelled"),
    "j-reclaim": (9, "CANCELLED", None, "reclaimed: idle for 30 min", "reclaimed"),
    "j-unknown": (10, "FAILED", None, None, "unknown"),
}


def telemetry() -> list[dict]:
    lines = []
    for t in every(30, at("10:00"), 50):
        minute = t.hour * 60 + t.minute - 600
        lines.append(line(XID, "n1", 0, 1 if 20 <= minute < 25 else 0, t, xid="79"))
        lines.append(line(XID, "n1", 1, 1 if 40 <= minute < 45 else 0, t, xid="79"))
        lines.append(line(XID, "n1", 2, 1 if 20 <= minute < 25 else 0, t, xid="13"))
        lines.append(line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "n1", 3, 1 if minute >= 10 else 0, t))
    return parse(lines)


def test_each_cause_by_construction(warehouse):
    events, placements = [], []
    for job_id, (index, state, exit_code, reason, _) in JOBS.items():
        evs, ps = simple_job(job_id, "n1", index, at("10:00"), at("10:30"), state=state)
        evs[-1] |= {"exit_code": exit_code, "reason": reason}
        events += evs
        placements += ps
    # preempted: the scheduler's preemption ends the attempt
    evs, ps = simple_job("j-preempt", "n1", 11, at("10:00"), None)
    events += [*evs, event("j-preempt", "preempt", at("10:30"), state="PREEMPTED", reason="preempted by job j-9")]
    placements += ps
    load(warehouse, gpu_inventory=[gpu("n1", i) for i in range(12)], job_events=events, job_gpus=placements,
         dcgm_samples=telemetry())
    con = build(warehouse)

    outcomes = {r["job_id"]: r for r in rows(con, "select * from marts.fct_attempt_outcomes")}
    expected = {job_id: spec[-1] for job_id, spec in JOBS.items()} | {"j-preempt": "preempted"}
    assert {job_id: o["cause"] for job_id, o in outcomes.items()} == expected

    hardware = json.loads(outcomes["j-xid79"]["cause_evidence"])
    assert [(f["signal"], f["xid"]) for f in hardware["hardware_faults"]] == [("xid", 79)]
    assert json.loads(outcomes["j-xid79-after"]["cause_evidence"])["hardware_faults"] is None
    assert (outcomes["j-oom"]["is_user_fault"], outcomes["j-oom"]["is_failure"]) == (True, True)
    assert (outcomes["j-cancel"]["is_failure"], outcomes["j-cancel"]["gpu_hours_lost"]) == (False, 0)
    assert outcomes["j-dbe"]["gpu_hours_lost"] == pytest.approx(0.5)

    # 12 attempts; failures: every cause but completed and cancelled = 10, 3 of them the user's
    # (user_code x2, out_of_memory) -> 7 not the user's fault; 10 x 0.5 GPU-hours lost.
    # the pool's row (tenant all) adds up the tenants' rows
    total = one(con, "select * from metrics.failure_causes where tenant = 'all' and cause = 'all'")
    assert (total["attempts"], total["failures"]) == (12, 10)
    assert total["failure_rate_pct"] == pytest.approx(100 * 10 / 12)
    assert total["not_user_fault_pct"] == pytest.approx(70.0)
    assert total["gpu_hours_lost"] == pytest.approx(5.0)
    tenants = con.execute("select sum(attempts), sum(failures) from metrics.failure_causes "
                          "where tenant <> 'all' and cause = 'all'").fetchone()
    assert tenants == (12, 10)
    hw = one(con, "select * from metrics.failure_causes where tenant = 'all' and cause = 'hardware'")
    assert (hw["failures"], hw["failure_rate_pct"], hw["gpu_hours_lost"]) == (3, pytest.approx(25.0), pytest.approx(1.5))


def test_memory_full_just_before_the_end_is_out_of_memory(warehouse):
    # FAILED with exit code 1, device memory 80000 of 81920 MiB (97.7 %) until 10:20, then 81000 (98.9 %)
    evs, ps = simple_job("j-mem", "n1", 0, at("10:00"), at("10:30"), state="FAILED")
    evs[-1]["exit_code"] = 1
    samples = parse([
        line("DCGM_FI_DEV_FB_USED", "n1", 0, 80000 if t < at("10:27") else 81000, t)
        for t in every(60, at("10:00"), 30)
    ] + [line("DCGM_FI_DEV_GPU_UTIL", "n1", 0, 90, t) for t in every(60, at("10:00"), 30)])
    load(warehouse, gpu_inventory=[gpu("n1", 0)], job_events=evs, job_gpus=ps, dcgm_samples=samples)
    con = build(warehouse)
    outcome = one(con, "select cause, cause_evidence from marts.fct_attempt_outcomes")
    assert outcome["cause"] == "out_of_memory"
    assert json.loads(outcome["cause_evidence"])["peak_fb_used_pct_before_end"] == pytest.approx(100 * 81000 / 81920)


def test_a_fault_in_the_first_scrape_after_the_end_is_hardware(warehouse):
    # Jobs end at 16:23:04 (FAILED, exit code 1); dcgm-exporter scraped every minute on the minute. A fault
    # reaches telemetry at the next scrape: 16:24:00 is evidence for the attempt, 16:25:00 is not. GPU 3's
    # telemetry stopped at 16:23 and came back at 16:40: that scrape is no evidence (beyond one interval + 1 min).
    end = at("16:23") + dt.timedelta(seconds=4)
    faults = {  # GPU -> (scrape times, metric, value from the fault on, labels, fault time, expected cause)
        0: (every(60, at("16:00"), 30), XID, {"xid": "79"}, at("16:24"), "hardware"),
        1: (every(60, at("16:00"), 30), XID, {"xid": "48"}, at("16:24"), "hardware"),
        2: (every(60, at("16:00"), 30), XID, {"xid": "79"}, at("16:25"), "user_code"),
        3: ([*every(60, at("16:00"), 24), *every(60, at("16:40"), 5)], XID, {"xid": "79"}, at("16:40"), "user_code"),
    }
    events, placements, lines = [], [], []
    for index, (times, metric, labels, fault_at, _) in faults.items():
        evs, ps = simple_job(f"j-{index}", "n1", index, at("16:00"), end, state="FAILED")
        evs[-1]["exit_code"] = 1
        events += evs
        placements += ps
        lines += [line(metric, "n1", index, 1 if fault_at <= t < fault_at + dt.timedelta(minutes=5) else 0, t, **labels)
                  for t in times]
    # GPU 1's XID 48 comes with a double-bit ECC error, in the same scrape
    lines += [line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "n1", 1, 1 if t >= at("16:24") else 0, t)
              for t in every(60, at("16:00"), 30)]
    load(warehouse, gpu_inventory=[gpu("n1", i) for i in faults], job_events=events, job_gpus=placements,
         dcgm_samples=parse(lines))
    con = build(warehouse)

    outcomes = {r["job_id"]: r for r in rows(con, "select * from marts.fct_attempt_outcomes")}
    assert {job_id: o["cause"] for job_id, o in outcomes.items()} == {
        f"j-{index}": spec[-1] for index, spec in faults.items()}
    evidence = json.loads(outcomes["j-1"]["cause_evidence"])
    assert [(f["signal"], f["xid"], f["minute_at"][11:16]) for f in evidence["hardware_faults"]] == [
        ("ecc_dbe", None, "16:24"), ("xid", 48, "16:24")]
    assert evidence["next_scrape_at"][11:19] == "16:24:00"
    assert json.loads(outcomes["j-3"]["cause_evidence"])["hardware_faults"] is None


def test_a_corrected_first_scrape_after_the_end_on_the_next_day_re_decides_the_attempt(warehouse):
    # ended 23:59:30 on day 1; the next scrape (00:00 on day 2) shows XID 79 only once day 2 is re-ingested,
    # after days 1-3 were built: the build of the window from day 2 (pipelines/build_window.py) re-decides the
    # attempt, though it ended before the window's start
    evs, ps = simple_job("j-late", "n1", 0, at("23:00"), at("23:59") + dt.timedelta(seconds=30), state="FAILED")
    evs[-1]["exit_code"] = 1
    day2, day3 = DAY1 + dt.timedelta(days=1), DAY1 + dt.timedelta(days=2)

    def xid_79(start: dt.datetime, minutes: int, value: int) -> list[dict]:
        return parse([line(XID, "n1", 0, value, t, xid="79") for t in every(60, start, minutes)])

    load(warehouse, gpu_inventory=[gpu("n1", 0)], job_events=evs, job_gpus=ps, dcgm_samples=xid_79(at("23:00"), 60, 0))
    load(warehouse, day=day2, dcgm_samples=xid_79(at("00:00", day=2), 3, 0))
    # a job on day 3 moves the data's end there: the re-ingest of day 2 does not reach it
    evs, ps = simple_job("j-next", "n1", 0, at("00:00", day=3), at("00:02", day=3))
    load(warehouse, day=day3, job_events=evs, job_gpus=ps, dcgm_samples=xid_79(at("00:00", day=3), 3, 0))
    late = "select cause from marts.fct_attempt_outcomes where job_id = 'j-late'"
    con = build(warehouse)
    assert one(con, late)["cause"] == "user_code"
    con.close()

    load(warehouse, day=day2, dcgm_samples=xid_79(at("00:00", day=2), 3, 1))
    con = build(warehouse)
    assert one(con, late)["cause"] == "hardware"
