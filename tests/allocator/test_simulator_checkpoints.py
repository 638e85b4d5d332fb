"""The simulator's checkpoints and model artifacts (allocator/sim/checkpoints.py): known answers on
hand-made jobs, the shares of the generated workload, and the records of a simulated pool."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from allocator.model import JobState, Template
from allocator.pool import default_pool
from allocator.sim.checkpoints import (
    LATE_SHARE,
    LOGGED_SHARE,
    NEVER_SHARE,
    REGISTERED_SHARE,
    CheckpointPlan,
    Habit,
    Outcome,
    lay_out,
    policy_interval,
)
from allocator.sim.scaling import scale_pool
from allocator.sim.simulator import simulate
from allocator.sim.workload import Workload, generate_workload

START = dt.date(2026, 11, 2)
BEGIN = dt.datetime.combine(START, dt.time())
H = 3600


def _artifacts(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(out.glob("allocator_artifacts/*/artifacts.jsonl"))
            for line in p.read_text().splitlines()]


def _ts(record: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(record["ts"].removesuffix("Z"))


def _by_job(records: list[dict], kind: str = "checkpoint") -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r["kind"] == kind:
            out[r["job_id"]].append(r)
    return out


# --- known answers: three hourly jobs, a zombie, on a quiet pool -----------------------------------


class _Watcher:
    """A governance that only looks: the engine's last checkpoint of each running job, every 20 minutes,
    and the pool's forecast of it 40 minutes later (what the simulated governance evaluates ahead on)."""

    def __init__(self) -> None:
        self.seen: list[tuple[dt.datetime, str, int, dt.datetime | None]] = []
        self.forecast: dict[tuple[dt.datetime, str, int], tuple[dt.datetime | None, dt.datetime | None]] = {}

    def attach(self, pool) -> None:
        self.pool = pool
        for k in range(1, 24 * 3):
            pool.at(pool.start + dt.timedelta(minutes=20 * k) + dt.timedelta(seconds=1), self.look)

    def job_started(self, job, profile, now) -> None:
        pass

    def look(self, now: dt.datetime) -> None:
        for job_id, job in sorted(self.pool.engine.jobs.items()):
            if job.state == JobState.RUNNING:
                self.seen.append((now, job_id, job.attempt, job.last_checkpoint_at))
                later = now + dt.timedelta(minutes=40)
                self.forecast[(later, job_id, job.attempt)] = (job.last_checkpoint_at,
                                                               self.pool.last_checkpoint(job, later))


def _hourly(habit: Habit, drift: float = 1.0) -> CheckpointPlan:
    return CheckpointPlan(family="resnet50", habit=habit, drift=drift, step_s=0.5, state_bytes=358_400_000,
                          weights_bytes=51_200_000, outcome=Outcome.REGISTERED, every_s=3600.0)


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    pool = scale_pool(default_pool(), 64)
    generated = generate_workload(pool, BEGIN, 1, 7)
    # ordinary one-GPU training jobs of this pool (their specs pass admission), made into known cases
    base = [j for j in generated.jobs
            if j.spec.template == Template.TRAINING and j.spec.gpus == 1 and j.behaviour.waste is None][:4]
    at = BEGIN + dt.timedelta(minutes=10)
    cases = {
        "on-policy": (5.5 * H, None, None, _hourly(Habit.ON_POLICY)),
        "late": (10 * H, None, None, _hourly(Habit.LATE, drift=3.0)),
        "never": (5.5 * H, None, None, _hourly(Habit.NEVER)),
        "zombie": (None, 2.5 * H, 8 * H, _hourly(Habit.ON_POLICY)),  # hangs after 2.5 h, cancelled at 8 h
    }
    jobs = []
    for (name, (work, busy, cancel, cp)), j in zip(cases.items(), base, strict=True):
        b = j.behaviour
        behaviour = replace(
            b, work_s=None if work is None else int(work), outcome=JobState.COMPLETED, exit_code=0, reason=None,
            failing_attempts=0, cancel_after_run_s=None if cancel is None else int(cancel), patience_s=None,
            profile=replace(b.profile, busy_for_s=busy), checkpoints=cp, xid=None,
        )
        spec = replace(j.spec, checkpoint_policy="hourly", expected_runtime_s=12 * H)
        jobs.append(replace(j, job_id=f"j-{name}", submit_at=at, spec=spec, behaviour=behaviour))
    workload = Workload(tuple(jobs), (), None, None, {})
    out = tmp_path_factory.mktemp("known")
    watcher = _Watcher()
    report = simulate(out, 1, pool=pool, seed=7, start=START, admin=None, fault_scale=None, workload=workload,
                      governance=watcher)
    return out, report, watcher


def test_an_hourly_job_reports_about_one_checkpoint_per_hour_of_work(known):
    out, report, _ = known
    writes = _by_job(_artifacts(out))["j-on-policy"]
    assert len(writes) == 5  # 5.5 h of work: at about 1, 2, 3, 4 and 5 h
    times = [_ts(r) for r in writes]
    gaps = np.diff([(t - BEGIN).total_seconds() for t in times])
    assert np.all((gaps > 0.95 * H) & (gaps < 1.1 * H))
    steps = [r["training_step"] for r in writes]
    assert steps == sorted(steps) and steps[0] == pytest.approx(H / 0.5, rel=0.05)  # 0.5 s a step
    assert {r["attempt"] for r in writes} == {1}
    assert all(r["reported_by"] and r["location"].startswith("s3://") for r in writes)
    assert all(r["size_bytes"] == 358_400_000 for r in writes if r["status"] == "ok")
    assert report.artifacts["checkpoint ok"] + report.artifacts.get("checkpoint failed", 0) == sum(
        len(v) for v in _by_job(_artifacts(out)).values())


def test_a_late_job_writes_two_to_four_times_further_apart_and_a_breaker_never(known):
    out, _, _ = known
    by_job = _by_job(_artifacts(out))
    late = by_job["j-late"]
    assert len(late) == 3  # 10 h at about every 3 h
    starts = [(_ts(r) - BEGIN).total_seconds() for r in late]
    assert np.all(np.diff(starts) >= 2 * H) and np.all(np.diff(starts) <= 4 * H)
    assert "j-never" not in by_job


def test_the_forecast_of_a_running_attempts_last_checkpoint_is_what_the_engine_holds_then(known):
    _, _, watcher = known
    held = {(at, job_id, attempt): last for at, job_id, attempt, last in watcher.seen}
    compared = [(then, forecast, held[k]) for k, (then, forecast) in watcher.forecast.items() if k in held]
    assert len(compared) > 20
    assert sum(forecast != then for then, forecast, _ in compared) >= 5  # writes not reported yet, foreseen
    assert [forecast for _, forecast, _ in compared] == [engine for _, _, engine in compared]


def test_a_zombie_stops_checkpointing_when_its_work_stops(known):
    out, _, _ = known
    writes = _by_job(_artifacts(out))["j-zombie"]
    assert len(writes) == 2  # at about 1 and 2 h; nothing in the 5.5 h it then holds its GPUs idle
    assert max(_ts(r) for r in writes) < BEGIN + dt.timedelta(minutes=10, hours=2.5)


def test_completed_jobs_register_their_model(known):
    out, _, _ = known
    records = _artifacts(out)
    assert set(_by_job(records, "artifact")) == {"j-on-policy", "j-late", "j-never"}
    versions = _by_job(records, "model_version")
    assert set(versions) == {"j-on-policy", "j-late", "j-never"}  # the zombie was cancelled: nothing
    names = Counter(r["model_name"] for v in versions.values() for r in v)
    assert all(n.endswith("-resnet50") for n in names)
    assert sorted(int(r["model_version"]) for v in versions.values() for r in v if r["model_name"] in names) == \
        sorted(k + 1 for n, c in names.items() for k in range(c))


def test_the_engines_last_checkpoint_is_the_last_ok_one(known):
    out, _, watcher = known
    by_job = _by_job(_artifacts(out))
    assert watcher.seen
    for now, job_id, attempt, last in watcher.seen:
        ok = [_ts(r) for r in by_job.get(job_id, []) if r["status"] == "ok" and r["attempt"] == attempt
              and _ts(r) <= now]
        assert last == (max(ok) if ok else None), (now, job_id)
    assert any(last is not None for *_, last in watcher.seen)


# --- the plans of a generated workload -------------------------------------------------------------


def test_plans_follow_their_shares_and_declared_policies():
    pool = default_pool()
    workload = generate_workload(pool, BEGIN, 7, 7)
    plans = [(j.spec, j.behaviour.checkpoints) for j in workload.jobs]
    assert all((cp is not None) == (spec.template == Template.TRAINING) for spec, cp in plans)
    training = [(spec, cp) for spec, cp in plans if cp is not None]
    n = len(training)
    assert n > 1500
    habits = Counter(cp.habit for _, cp in training)
    assert habits[Habit.NEVER] / n == pytest.approx(NEVER_SHARE, abs=0.015)
    assert habits[Habit.LATE] / n == pytest.approx(LATE_SHARE, abs=0.02)
    outcomes = Counter(cp.outcome for _, cp in training)
    assert outcomes[Outcome.REGISTERED] / n == pytest.approx(REGISTERED_SHARE, abs=0.03)
    assert outcomes[Outcome.LOGGED_ONLY] / n == pytest.approx(LOGGED_SHARE, abs=0.03)
    for spec, cp in training:
        every_s, every_steps = policy_interval(spec.checkpoint_policy)
        assert (cp.every_s, cp.every_steps or None) == (every_s, every_steps) or (
            spec.checkpoint_policy == "each epoch" and cp.every_steps and cp.every_s is None)
        assert cp.drift == 1.0 if cp.habit != Habit.LATE else 2.0 <= cp.drift <= 4.0
        assert cp.weights_bytes < cp.state_bytes
    # the plans come from their own generator: the rest of the workload is the same with or without them
    again = generate_workload(pool, BEGIN, 7, 7)
    assert again == workload
    other = generate_workload(pool, BEGIN, 7, 8)
    assert [j.behaviour.checkpoints for j in other.jobs[:200]] != [j.behaviour.checkpoints for j in workload.jobs[:200]]


def test_policy_interval_reads_the_workloads_policies_and_refuses_others():
    assert policy_interval("hourly") == (3600.0, None)
    assert policy_interval("every 30 min") == (1800.0, None)
    assert policy_interval("every 2 h") == (7200.0, None)
    assert policy_interval("every 1000 steps") == (None, 1000)
    assert policy_interval("each epoch") == (None, None)
    with pytest.raises(ValueError, match="expected 'hourly'"):
        policy_interval("sometimes")


def test_step_policies_save_on_their_steps_and_resume_after_the_last():
    cp = CheckpointPlan(family="dlrm", habit=Habit.ON_POLICY, drift=1.0, step_s=0.25, state_bytes=1,
                        weights_bytes=1, outcome=Outcome.NONE, every_steps=1000)
    writes = lay_out(cp, progress_s=3600.0, window_s=2 * H, rng=np.random.default_rng(1))
    assert writes.steps.tolist() == [15_000 + 1000 * k for k in range(len(writes.steps))]  # 14,400 done
    assert len(writes.steps) == int((2 * H / 0.25 + 14_400) // 1000) - 14
    assert np.all(np.diff(writes.offsets_s) == 250)


# --- a simulated pool ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt")
    report = simulate(out, days=2, gpus=64, seed=7, start=START)
    workload = generate_workload(scale_pool(default_pool(), 64), BEGIN, 2, 7)
    return out, report, workload


def _finals(out: Path) -> dict[str, str]:
    states = {}
    for path in sorted(out.glob("allocator_events/*/events.jsonl")):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e["type"] == "finish":
                states[e["job_id"]] = e["state"]
    return states


def test_finished_training_jobs_end_registered_logged_or_with_nothing(pool_run):
    out, report, workload = pool_run
    records = _artifacts(out)
    artifacts, versions = _by_job(records, "artifact"), _by_job(records, "model_version")
    plans = {j.job_id: j.behaviour.checkpoints for j in workload.jobs}
    states = _finals(out)
    completed = [j for j, s in states.items() if s == "COMPLETED" and plans.get(j) is not None]
    assert len(completed) > 50
    seen = Counter()
    for job_id in completed:
        status = ("registered" if job_id in versions else "logged_only" if job_id in artifacts else "none")
        assert status == plans[job_id].outcome.value, job_id
        seen[status] += 1
    assert set(seen) == {"registered", "logged_only", "none"}
    # nothing but completed training jobs leave a model
    assert set(artifacts) | set(versions) <= set(completed)
    assert report.artifacts["artifact ok"] == sum(len(v) for v in artifacts.values())


def test_checkpoints_in_a_simulated_pool(pool_run):
    out, report, workload = pool_run
    records = _artifacts(out)
    plans = {j.job_id: j.behaviour.checkpoints for j in workload.jobs}
    by_job = _by_job(records)
    assert all(plans[j] is not None and plans[j].habit != Habit.NEVER for j in by_job)
    statuses = Counter(r["status"] for v in by_job.values() for r in v)
    assert 0 < statuses["failed"] < 0.06 * statuses["ok"]
    assert report.artifacts["checkpoint failed"] == statuses["failed"]
    for job_id, writes in by_job.items():
        for attempt in {r["attempt"] for r in writes}:
            times = [_ts(r) for r in writes if r["attempt"] == attempt]
            assert times == sorted(times), job_id
        cp = plans[job_id]
        if cp.every_steps and cp.habit == Habit.ON_POLICY:
            assert all(r["training_step"] % cp.every_steps == 0 for r in writes)
    # each day's records are in that day's file
    for path in out.glob("allocator_artifacts/*/artifacts.jsonl"):
        assert {line[line.index('"ts":"') + 6:][:10] for line in path.read_text().splitlines()} == {path.parent.name}


def test_same_seed_same_records(pool_run, tmp_path):
    out, _, _ = pool_run
    simulate(tmp_path, days=2, gpus=64, seed=7, start=START)
    for path in sorted(out.glob("allocator_artifacts/*/artifacts.jsonl")):
        assert (tmp_path / path.relative_to(out)).read_bytes() == path.read_bytes()
