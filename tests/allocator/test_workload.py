"""The workload generator: deterministic for a seed, shaped like the public traces, admissible."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import numpy as np
import pytest

from allocator.engine import Engine
from allocator.model import JobState, ShareMode, Template
from allocator.pool import default_pool
from allocator.records import MemorySink
from allocator.sim.simulator import scale_pool
from allocator.sim.workload import CALIBRATION, PER_JOB_WASTE, Waste, generate_workload

START = dt.datetime(2026, 11, 2)  # a Monday


@pytest.fixture(scope="module")
def pool():
    return default_pool()


@pytest.fixture(scope="module")
def fortnight(pool):
    return generate_workload(pool, START, 14, seed=11)


def test_same_seed_same_workload_other_seed_another(pool):
    a = generate_workload(pool, START, 2, seed=3)
    b = generate_workload(pool, START, 2, seed=3)
    c = generate_workload(pool, START, 2, seed=4)
    assert a == b
    assert [j.submit_at for j in a.jobs] != [j.submit_at for j in c.jobs]


def test_job_sizes_follow_the_traces(fortnight):
    gpus = np.array([j.spec.gpus for j in fortnight.jobs])
    # Helios, Philly, Acme: median GPU count 1; Philly 1.93 and Helios Earth 2.10 GPUs on average
    assert np.median(gpus) == 1
    assert 0.65 <= (gpus == 1).mean() <= 0.78
    assert 1.7 <= gpus.mean() <= 2.5
    assert set(np.unique(gpus)) <= {1, 2, 4, 8, 16, 32}
    assert (gpus > 8).mean() < 0.03  # few multi-node requests


def test_run_times_are_heavy_tailed(fortnight):
    work = np.array(
        [j.behaviour.work_s for j in fortnight.jobs if j.behaviour.work_s is not None], dtype=float
    )
    # medians of the traces run from 122 s (Seren) to 874 s (Philly); means from 1,414 s to 18,006 s
    assert 300 <= np.median(work) <= 1800
    assert 3_600 <= work.mean() <= 18_000
    assert work.mean() / np.median(work) > 4


def test_final_state_mix_matches_the_plan(fortnight):
    jobs = [j for j in fortnight.jobs if j.behaviour.waste is None]
    failing = sum(j.behaviour.outcome != JobState.COMPLETED for j in jobs) / len(jobs)
    cancelling = sum(j.behaviour.cancel_after_run_s is not None for j in jobs) / len(jobs)
    assert abs(failing - CALIBRATION.failed) < 0.02
    # inference services are not cancelled half-way, so a little under the calibrated share
    assert CALIBRATION.cancelled - 0.03 < cancelling <= CALIBRATION.cancelled + 0.01


def test_arrivals_follow_the_day_and_the_week(fortnight):
    after_opening = [j.submit_at for j in fortnight.jobs if j.submit_at >= START + dt.timedelta(hours=1)]
    hours = Counter(t.hour for t in after_opening)
    assert sum(hours[h] for h in range(10, 17)) > 3 * sum(hours[h] for h in range(7))
    weekdays = Counter(t.weekday() for t in after_opening)
    assert min(weekdays[d] for d in range(5)) > 1.8 * max(weekdays[5], weekdays[6])


def test_planted_waste_at_its_rates(fortnight):
    planted = fortnight.planted
    interactive = sum(j.spec.template == Template.INTERACTIVE for j in fortnight.jobs)
    training = sum(j.spec.template == Template.TRAINING for j in fortnight.jobs)
    assert (
        abs(len(planted[Waste.FORGOTTEN_INTERACTIVE]) / interactive - CALIBRATION.forgotten_interactive)
        < 0.04
    )
    assert abs(len(planted[Waste.ZOMBIE]) / training - CALIBRATION.zombie) < 0.008
    assert abs(len(planted[Waste.OVERRUN]) / training - CALIBRATION.overrun) < 0.02
    assert {k for k, v in planted.items() if v} == set(Waste)
    by_id = {j.job_id: j for j in fortnight.jobs}
    for job_id in planted[Waste.ZOMBIE]:
        b = by_id[job_id].behaviour
        assert b.work_s is None and b.profile.busy_for_s is not None and b.cancel_after_run_s is not None
    for job_id in planted[Waste.OVERSIZED]:
        job = by_id[job_id]
        assert job.spec.gpus >= 4 and job.behaviour.profile.working_gpus == job.spec.gpus // 4
    for job_id in planted[Waste.OVERRUN]:
        job = by_id[job_id]
        assert job.behaviour.work_s >= 1.5 * job.spec.expected_runtime_s
    storm = by_id[planted[Waste.RETRY_STORM][0]].behaviour
    assert storm.failing_attempts > 100 and storm.resubmits >= 5
    borrower = fortnight.borrowing_tenant
    assert all(by_id[j].spec.tenant == borrower for j in planted[Waste.BORROWED_QUOTA])
    assert all(by_id[j].spec.gpu_model == "H100" for j in planted[Waste.SCARCE_MODEL_QUEUE])


def test_a_single_day_on_a_small_pool_still_plants_every_kind():
    small = scale_pool(default_pool(), 64)
    workload = generate_workload(small, START, 1, seed=5)
    kinds = {j.behaviour.waste for j in workload.jobs} - {None}
    assert kinds == set(PER_JOB_WASTE)
    assert workload.rogues and workload.borrowing_tenant


@pytest.mark.parametrize("gpus", [None, 64])
def test_every_request_passes_admission(gpus):
    pool = default_pool() if gpus is None else scale_pool(default_pool(), gpus)
    engine = Engine(pool, MemorySink())
    workload = generate_workload(pool, START, 3, seed=2)
    errors = Counter(e.rule for j in workload.jobs if (e := engine.admission_error(j.spec, j.submit_at)))
    assert not errors
    modes = Counter(j.spec.share_mode for j in workload.jobs)
    assert modes[ShareMode.MIG] and modes[ShareMode.TIMESLICE] and modes[ShareMode.WHOLE]
