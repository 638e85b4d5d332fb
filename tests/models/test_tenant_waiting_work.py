"""metrics.tenant_month reports waiting work beside its wait percentiles (PRODUCT.md "Waiting work"): the jobs
cancelled while queued in the month and the jobs still waiting at its end, with their pending ages, equal to a
recomputation from the hand-made job events below."""
from __future__ import annotations

import datetime as dt

import pytest

from tests.models.builders import at, build, event, gpu, load, one, placement, rows, series, submit

pytestmark = pytest.mark.slow  # dbt builds of constructed warehouses

OCT31 = dt.datetime(2026, 10, 31)

# job -> (tenant, submitted, first start or None, cancelled while queued at or None)
JOBS = {
    "a-1": ("vision", at("10:00"), at("10:30"), None),
    "a-2": ("vision", at("10:00"), at("12:00"), None),
    "a-3": ("vision", at("11:00"), at("15:10"), None),
    "a-cancel-1": ("vision", at("10:00"), None, at("10:20")),
    "a-cancel-2": ("vision", at("09:00"), None, at("13:00")),
    "a-wait-1": ("vision", at("20:00"), None, None),
    "a-wait-2": ("vision", at("21:30"), None, None),
    "a-oct": ("vision", OCT31 + dt.timedelta(hours=22), at("01:00"), None),  # waits over October's end
    "b-wait": ("speech", at("09:00"), None, None),
    "b-cancel": ("speech", OCT31 + dt.timedelta(hours=23), None, at("00:30")),  # submitted in October
    "b-oct-cancel": ("speech", OCT31 + dt.timedelta(hours=20), None, OCT31 + dt.timedelta(hours=21)),
}


def job_rows() -> tuple[list[dict], list[dict]]:
    events, placements = [], []
    for job_id, (tenant, submitted, started, cancelled) in JOBS.items():
        queue = f"{tenant}-train"
        events.append(submit(job_id, submitted, tenant=tenant, queue=queue))
        if started is not None:
            events += [event(job_id, "admit", started), event(job_id, "start", started),
                       event(job_id, "finish", started + dt.timedelta(minutes=20), state="COMPLETED", exit_code=0)]
            placements.append(placement(job_id, 1, "n1", 0, started))
        if cancelled is not None:
            events.append(event(job_id, "finish", cancelled, state="CANCELLED", reason="cancelled by owner"))
    return events, placements


def quantile_cont(values: list[float], q: float) -> float | None:
    """DuckDB's quantile_cont: linear interpolation between the order statistics."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def month_of(t: dt.datetime) -> dt.date:
    return dt.date(t.year, t.month, 1)


def recomputed(data_end: dt.datetime) -> dict[tuple[dt.date, str], dict]:
    """Each tenant's month from JOBS alone: "now" for a month is its end, the data's end in the last month."""
    month_ends = {dt.date(2026, 10, 1): at("00:00"), dt.date(2026, 11, 1): data_end}
    out: dict[tuple[dt.date, str], dict] = {}

    def row(month: dt.date, tenant: str) -> dict:
        return out.setdefault((month, tenant), {"started": [], "waiting": [], "cancelled": []})

    for tenant, submitted, started, cancelled in JOBS.values():
        if started is not None:
            row(month_of(started), tenant)["started"].append((started - submitted).total_seconds())
        if cancelled is not None:
            row(month_of(cancelled), tenant)["cancelled"].append((cancelled - submitted).total_seconds())
        pending_until = started or cancelled
        for month, end in month_ends.items():
            if submitted < end and (pending_until is None or pending_until > end):
                row(month, tenant)["waiting"].append((end - submitted).total_seconds())
    return {
        key: {
            "jobs_started": len(r["started"]),
            "queue_wait_p50_s": quantile_cont(r["started"], 0.5),
            "queue_wait_p95_s": quantile_cont(r["started"], 0.95),
            "jobs_waiting": len(r["waiting"]),
            "waiting_age_p95_s": quantile_cont(r["waiting"], 0.95),
            "waiting_age_max_s": max(r["waiting"], default=None),
            "cancelled_while_queued": len(r["cancelled"]),
            "cancelled_pending_age_p95_s": quantile_cont(r["cancelled"], 0.95),
        }
        for key, r in out.items()
    }


def test_tenant_month_waiting_work_equals_a_recomputation_from_the_jobs(warehouse):
    events, placements = job_rows()
    # telemetry to 23:00 on Nov 1 gives the data window (its end is "now" for the jobs still waiting)
    load(warehouse, gpu_inventory=[gpu("n1", 0)], job_events=events, job_gpus=placements,
         dcgm_samples=series("n1", 0, "DCGM_FI_DEV_GPU_UTIL", at("00:00"), 23 * 60, 50.0))
    con = build(warehouse)

    data_end = one(con, "select max(as_of_at) as at from marts.dim_days")["at"]
    assert data_end.date() == dt.date(2026, 11, 1)
    expected = recomputed(data_end)
    found = {(r.pop("month"), r.pop("tenant")): r for r in rows(con, "select * from metrics.tenant_month")}
    assert set(found) == set(expected)
    for key, want in expected.items():
        assert found[key] == pytest.approx(want), key
    # the cases the recomputation covers, spelled out
    assert found[(dt.date(2026, 11, 1), "vision")]["cancelled_while_queued"] == 2
    assert found[(dt.date(2026, 11, 1), "vision")]["jobs_waiting"] == 2
    assert found[(dt.date(2026, 10, 1), "vision")]["jobs_waiting"] == 1  # a-oct, at October's end
    assert found[(dt.date(2026, 10, 1), "speech")]["cancelled_while_queued"] == 1
    assert found[(dt.date(2026, 11, 1), "speech")]["jobs_started"] == 0
