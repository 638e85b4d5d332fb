"""GPU health events from dcgm-exporter health lines: the windowed XID gauge counted once per error,
application XIDs apart from hardware faults, counters as increases with resets, throttle bitmasks."""
from __future__ import annotations

import json

import pytest

from tests.models.builders import at, build, gpu, load, one, rows, series, simple_job
from tests.models.health_lines import every, line, parse

XID = "DCGM_EXP_XID_ERRORS_COUNT"


def health_lines() -> list[str]:
    lines: list[str] = []
    for t in every(30, at("10:00"), 10):
        minute = t.hour * 60 + t.minute - 600  # minutes after 10:00
        # the exporter's 0-valued series without xid, on both GPUs
        lines += [line(XID, "n1", 0, 0, t), line(XID, "n1", 1, 0, t)]
        # GPU 0: one XID 79 at 10:02, shown by every scrape of the 5-minute window (10:02-10:06:30)
        lines.append(line(XID, "n1", 0, 1 if 2 <= minute < 7 else 0, t, xid="79"))
        # GPU 1: one XID 13 (user code) at 10:03
        lines.append(line(XID, "n1", 1, 1 if 3 <= minute < 8 else 0, t, xid="13"))
        # throttle reasons on GPU 1: HW thermal slowdown (0x40) 10:08:00 and 10:08:30, SW power cap (0x04) 10:09:00
        reasons = 64 if minute == 8 else 4 if t == at("10:09") else 0
        lines.append(line("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "n1", 1, reasons, t))
    for t in every(60, at("10:00"), 10):
        minute = t.minute
        # GPU 0: two double-bit errors at 10:05, in the volatile and the aggregate total (the same two errors)
        dbe = 2 if minute >= 5 else 0
        lines += [line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "n1", 0, dbe, t),
                  line("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "n1", 0, 7 + dbe, t)]
        # GPU 1: single-bit volatile total 5, reset to 0 at 10:04 (driver reload), 3 at 10:06
        sbe = 5 if minute < 4 else 0 if minute < 6 else 3
        lines.append(line("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "n1", 1, sbe, t))
    return lines


def test_health_events_by_construction(warehouse):
    activity = series("n1", 0, "DCGM_FI_DEV_GPU_UTIL", at("10:00"), 10, 50.0)  # gives the data window
    load(warehouse, "dcgm_text", gpu_inventory=[gpu("n1", 0), gpu("n1", 1)],
         dcgm_samples=parse(health_lines()) + activity)
    con = build(warehouse)

    events = rows(con, "select gpu, strftime(minute_at, '%H:%M') as at, signal, xid, event_count, severity, "
                       "is_hardware_fault from marts.fct_gpu_health_events order by gpu, minute_at, signal")
    assert [tuple(e.values()) for e in events] == [
        (0, "10:02", "xid", 79, 1.0, "fault", True),          # once, not once per scrape or minute
        (0, "10:05", "ecc_dbe", None, 2.0, "fault", True),     # max of volatile and aggregate, not 4
        (1, "10:03", "xid", 13, 1.0, "application", False),   # raised by user code
        (1, "10:06", "ecc_sbe", None, 3.0, "warning", False),  # the reset at 10:04 is no negative count
        (1, "10:08", "thermal_throttle", None, 2.0, "warning", False),
        (1, "10:09", "power_throttle", None, 1.0, "warning", False),
    ]
    assert one(con, "select distinct gpu_model from marts.fct_gpu_health_events")["gpu_model"] == "A100"

    faults = {r["gpu"]: r for r in rows(con, "select * from metrics.gpu_faults")}
    assert (faults[0]["hardware_faults"], faults[0]["is_repeat_offender"]) == (2, True)
    assert (faults[1]["hardware_faults"], faults[1]["is_repeat_offender"]) == (0, False)
    assert faults[1]["is_node_repeat_offender"] is True  # GPU 0's faults make node n1 one
    assert (faults[1]["application_xids"], faults[1]["xids_seen"]) == (1, "13")

    hours = one(con, "select sum(hours) as h from marts.dim_days")["h"]
    assert hours > 0
    model = one(con, "select * from metrics.gpu_model_reliability")
    assert (model["gpu_model"], model["gpus"], model["hardware_faults"]) == ("A100", 2, 2)
    assert model["mtbf_gpu_hours"] == pytest.approx(2 * hours / 2)


def test_xid_gauge_after_a_gap_longer_than_the_window_is_a_new_error(warehouse):
    # XID 48 shown at 10:00-10:01, telemetry gap, shown again at 10:20: two errors. Shown again at
    # 10:03 after a 1-minute gap (inside the 5-minute window): still the first error.
    times = [*every(30, at("10:00"), 2), *every(30, at("10:03"), 1), *every(30, at("10:20"), 1)]
    samples = parse([line(XID, "n1", 0, 1, t, xid="48") for t in times])
    load(warehouse, "dcgm_text", dcgm_samples=samples)
    con = build(warehouse)
    events = rows(con, "select strftime(minute_at, '%H:%M') as at, event_count from marts.fct_gpu_health_events "
                       "order by minute_at")
    assert [tuple(e.values()) for e in events] == [("10:00", 1.0), ("10:20", 1.0)]


def test_a_standing_failure_on_the_first_scrape_is_a_hardware_fault(warehouse):
    # one scrape of one host (a held-out exposition): GPU 0 shows a row-remap failure (a standing gauge, 1) and
    # 2 volatile double-bit errors (the volatile totals reset with the driver: non-zero on a new series is
    # evidence), beside an aggregate total of 9 (a lifetime count, its first value a baseline); GPU 1 shows
    # only a lifetime aggregate of 3 and no failure: no fault. XID 79 on GPU 2 is classed as before.
    t = at("10:00")
    lines = [
        line("DCGM_FI_DEV_ROW_REMAP_FAILURE", "n1", 0, 1, t),
        line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "n1", 0, 2, t),
        line("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "n1", 0, 9, t),
        line("DCGM_FI_DEV_ROW_REMAP_FAILURE", "n1", 1, 0, t),
        line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "n1", 1, 0, t),
        line("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "n1", 1, 3, t),
        line(XID, "n1", 2, 1, t, xid="79"),
    ]
    # a later scrape still showing the standing failure and the same volatile count adds nothing
    lines += [line("DCGM_FI_DEV_ROW_REMAP_FAILURE", "n1", 0, 1, at("10:01")),
              line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "n1", 0, 2, at("10:01"))]
    load(warehouse, "dcgm_text", gpu_inventory=[gpu("n1", i) for i in range(3)], dcgm_samples=parse(lines))
    con = build(warehouse)

    events = rows(con, "select gpu, strftime(minute_at, '%H:%M') as at, signal, xid, event_count, is_hardware_fault "
                       "from marts.fct_gpu_health_events order by gpu, minute_at, signal")
    assert [tuple(e.values()) for e in events] == [
        (0, "10:00", "ecc_dbe", None, 2.0, True),
        (0, "10:00", "row_remap_failure", None, 1.0, True),
        (2, "10:00", "xid", 79, 1.0, True),
    ]
    faults = {r["gpu"]: r["hardware_faults"] for r in rows(con, "select gpu, hardware_faults from metrics.gpu_faults")}
    assert faults == {0: 1, 2: 1}  # hardware-fault minutes; GPU 1 has no health event


def test_a_host_going_down_is_a_hardware_fault_of_its_gpus_while_it_is_down(warehouse):
    # n2 (2 GPUs) reports every minute 10:00-10:29, is silent 4 hours, and reports again from 14:30; n1 reports
    # all along but for 3 missed minutes at 12:00 (no outage: at most max_gap_minutes = 5). A job on n2's GPU 0
    # failed at 10:33 (exit code 1, the scheduler's view of the host lost): hardware, its node went down.
    util = "DCGM_FI_DEV_GPU_UTIL"
    samples = [*series("n2", 0, util, at("10:00"), 30, 90.0), *series("n2", 1, util, at("10:00"), 30, 90.0),
               *series("n2", 0, util, at("14:30"), 10, 0.0), *series("n2", 1, util, at("14:30"), 10, 0.0),
               *series("n1", 0, util, at("10:00"), 120, 50.0), *series("n1", 0, util, at("12:03"), 157, 50.0)]
    evs, ps = simple_job("j-n2", "n2", 0, at("10:00"), at("10:33"), state="FAILED")
    evs[-1]["exit_code"] = 1
    load(warehouse, gpu_inventory=[gpu("n1", 0), gpu("n2", 0), gpu("n2", 1)], job_events=evs, job_gpus=ps,
         dcgm_samples=samples)
    con = build(warehouse)

    outages = rows(con, "select host, strftime(down_from_at, '%H:%M') as down, strftime(back_at, '%H:%M') as back, "
                        "down_minutes, gpus from marts.fct_host_outages")
    assert [tuple(o.values()) for o in outages] == [("n2", "10:30", "14:30", 240, 2)]
    faults = {(r["host"], r["gpu"]): r for r in rows(con, "select * from metrics.gpu_faults")}
    assert set(faults) == {("n2", 0), ("n2", 1)}
    for r in faults.values():
        assert (r["hardware_faults"], r["host_outages"], r["host_down_minutes"]) == (240, 1, 240)
        assert (r["first_fault_at"], r["last_fault_at"]) == (at("10:30"), at("14:29"))

    model = one(con, "select * from metrics.gpu_model_reliability")
    assert (model["gpus"], model["hardware_faults"], model["gpus_with_faults"]) == (3, 480, 2)

    outcome = one(con, "select cause, cause_evidence from marts.fct_attempt_outcomes")
    assert outcome["cause"] == "hardware"
    assert [(f["signal"], f["minute_at"][11:16]) for f in json.loads(outcome["cause_evidence"])["hardware_faults"]] == [
        ("host_down", "10:30")]
