"""The what-if replay on a small month built by `gpupool demo` (3 days, 64 GPUs, policies on)."""
from __future__ import annotations

from pathlib import Path

import pytest

from allocator.model import JobState
from allocator.pool import default_pool, pool_capacity
from pipelines.capacity.demand import load_demand
from pipelines.capacity.replay import (
    Change,
    WhatIfResult,
    changed_catalog,
    changed_pool,
    observed,
    replay,
    whatif,
)
from pipelines.policies.catalog import load_catalog
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow  # builds a 3-day warehouse (~25 s)


@pytest.fixture(scope="module")
def con(home: Path):
    c = Warehouse(home).connect(read_only=True)  # the same configuration as whatif's own connection
    yield c
    c.close()


@pytest.fixture(scope="module")
def demand(con):
    return load_demand(con)


@pytest.fixture(scope="module")
def baseline(demand):
    return replay(demand)[0]


def test_demand_holds_every_job_and_the_observed_pool(con, demand) -> None:
    submitted = con.execute("select count(*) from marts.dim_jobs").fetchone()[0]
    chained = sum(j.behaviour.resubmits for j in demand.workload.jobs)
    assert len(demand.workload.jobs) + chained == submitted
    assert demand.days == 3 and demand.governed
    inventory = dict(con.execute(
        "select gpu_model, sum(fraction) from staging.stg_pool__gpu_inventory "
        "where snapshot_at = (select min(snapshot_at) from staging.stg_pool__gpu_inventory) group by 1").fetchall())
    assert pool_capacity(demand.pool) == pytest.approx(inventory)


def test_a_completed_job_needs_the_time_it_ran(con, demand) -> None:
    job_id, run_s = con.execute(
        "select job_id, run_time_s from marts.dim_jobs where final_state = 'COMPLETED' and attempts = 1 "
        "order by job_id limit 1").fetchone()
    plan = next(j for j in demand.workload.jobs if j.job_id == job_id)
    assert plan.behaviour.outcome == JobState.COMPLETED
    assert plan.behaviour.work_s == pytest.approx(run_s, abs=1)


def test_reclaimed_jobs_run_to_the_ledgers_would_end(con, demand) -> None:
    row = con.execute(
        "select job_id, epoch(would_end_at - attempt_started_at) from marts.fct_reclaim_ledger "
        "where action_kind = 'reclaim' and attempt = 1 order by job_id limit 1").fetchone()
    assert row is not None, "the 3-day demo (policies on, seed 7) reclaims idle work: its ledger has reclaims"
    plan = next(j for j in demand.workload.jobs if j.job_id == row[0])
    assert plan.behaviour.work_s == pytest.approx(row[1], abs=1)
    assert plan.behaviour.cancel_after_run_s is None


def test_a_started_job_may_give_up_later_than_it_started(con, demand) -> None:
    waits = dict(con.execute(
        "select job_id, epoch(first_started_at - submitted_at) from marts.dim_jobs where first_started_at is not null").fetchall())
    drawn = [(j.behaviour.patience_s, waits[j.job_id]) for j in demand.workload.jobs
             if j.job_id in waits and j.behaviour.patience_s is not None]
    assert drawn, "the 3-day demo has give-ups: the started jobs get a patience from them"
    assert all(patience > wait for patience, wait in drawn)
    assert len(drawn) <= demand.notes["started: patience drawn beyond its wait"]


def test_baseline_reproduces_the_observed_month(con, demand, baseline) -> None:
    seen = observed(con, demand.start, demand.days)
    assert baseline.jobs == len(demand.workload.jobs) + sum(j.behaviour.resubmits for j in demand.workload.jobs)
    assert abs(baseline.pool_utilisation_pct - seen.pool_utilisation_pct) <= 2.0
    assert abs(baseline.allocation_rate_pct - seen.allocation_rate_pct) <= 2.0
    assert abs(baseline.wait_p95_s - seen.wait_p95_s) <= 0.10 * seen.wait_p95_s
    assert baseline.idle_gpu_hours == pytest.approx(seen.idle_gpu_hours, rel=0.15)


def test_more_gpus_of_the_scarce_model_shorten_its_wait(demand, baseline) -> None:
    more, _ = replay(demand, Change(add_nodes={"H100": 2}))
    assert more.capacity_gpu_hours == pytest.approx(baseline.capacity_gpu_hours + 16 * 24 * demand.days)
    assert more.wait_p95_by_model_s["H100"] < baseline.wait_p95_by_model_s["H100"]


def test_a_shorter_idle_window_lowers_idle_gpu_hours(demand, baseline) -> None:
    shorter, _ = replay(demand, Change(idle_window_minutes=10))
    assert shorter.idle_gpu_hours < baseline.idle_gpu_hours


def test_a_quota_change_moves_waits(demand, baseline) -> None:
    queue = next(q for q in demand.pool.queues if q.quota.get("H100") and not q.shared_with)
    emptied, _ = replay(demand, Change(quotas={(queue.name, "H100"): 0.0}))
    assert emptied.wait_p95_by_model_s != baseline.wait_p95_by_model_s


def test_whatif_returns_observed_baseline_and_change(home: Path) -> None:
    result = whatif(home, Change(add_nodes={"H100": 1}), parallel=False)
    assert isinstance(result, WhatIfResult)
    assert result.changed is not None and result.policies
    text = result.table()
    assert "+1 H100 node" in text and "wait p95" in text and "idle allocated GPU-h" in text


def test_changes_parse_and_apply() -> None:
    change = Change.parse(["H100=2", "L40S=-1"], ["nlp-train:H100=40"], 20)
    assert change.add_nodes == {"H100": 2, "L40S": -1}
    pool = changed_pool(default_pool(), change)
    before, after = pool_capacity(default_pool()), pool_capacity(pool)
    assert after["H100"] == before["H100"] + 16 and after["L40S"] == before["L40S"] - 8
    assert {n.host for n in pool.nodes} >= {"h100-13", "h100-14"}
    assert pool.queue("nlp-train").quota["H100"] == 40
    rule = changed_catalog(load_catalog(), change).rule("idle-allocation", template="training")
    assert rule.params["window_minutes"] == 20
    with pytest.raises(ValueError, match="QUEUE:MODEL=N"):
        Change.parse(quotas=["nlp-train=4"])
    with pytest.raises(ValueError, match="no node of that model"):
        changed_pool(default_pool(), Change(add_nodes={"V100": 1}))
