"""One idle rule: the warehouse's idle windows (marts.fct_idle_windows) and the live idle-allocation
policy's (pipelines/policies/idle.py) are the same on the same minutes, over random activity profiles.

The profiles mix idle stretches, busy work, keep-alive spikes of every length around the rule's
spike_max_minutes, scrape gaps, memory above and below a floor, and windows clipped by the job's
start and end; the jobs run in queues and templates whose overrides change the window, the memory
floor and the spike tolerance, or switch the policy off. The rule comes from a policy catalog a site
configures (gpupool.yml governance.policies): the build and the policy both read it from there.
"""
from __future__ import annotations

import datetime as dt
import random

import polars as pl
import pytest
import yaml

from pipelines.contracts import PolicyKind
from pipelines.policies.catalog import DEFAULT_POLICIES, load_catalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.idle import IDLE_PARAMS, idle_windows
from pipelines.policies.inputs import PolicyInputs, with_rules
from tests.models.builders import at, build, event, gpu, load, placement, submit

pytestmark = pytest.mark.slow  # dbt builds of random activity profiles

GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB = "DCGM_FI_DEV_FB_USED"
POLICY = "idle-allocation"
OVERRIDES = [  # besides the default rule (5 %, 30 min, spikes up to 2 min, 90 % coverage)
    {"template": "inference", "params": {"window_minutes": 60}},
    {"template": "interactive", "params": {"enabled": False}},
    {"queue": "tight", "params": {"memory_floor_mib": 2000, "spike_max_minutes": 3, "window_minutes": 20}},
    {"queue": "strict", "params": {"spike_max_minutes": 0, "min_coverage": 1.0}},
]
QUEUES = ("batch", "tight", "strict")
TEMPLATES = ("training", "training", "inference", "interactive")


def random_jobs(rng: random.Random, jobs: int) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """Inventory, events, placements and DCGM samples of `jobs` finished jobs, each on a host of its own."""
    inventory, events, placements, samples = [], [], [], []
    for j in range(jobs):
        job_id, host = f"job-{j:03d}", f"node-{j:03d}"
        start = at("00:00") + dt.timedelta(minutes=rng.randrange(0, 20 * 60))
        length = rng.randrange(25, 360)
        gpus = rng.randint(1, 3)
        events += [
            submit(job_id, start, queue=rng.choice(QUEUES), template=rng.choice(TEMPLATES), gpus=gpus),
            event(job_id, "admit", start), event(job_id, "start", start),
            event(job_id, "finish", start + dt.timedelta(minutes=length), state="COMPLETED"),
        ]
        for index in range(gpus):
            inventory.append(gpu(host, index))
            placements.append(placement(job_id, 1, host, index, start))
            samples += profile_samples(rng, host, index, start, length)
    return inventory, events, placements, samples


def profile_samples(rng: random.Random, host: str, index: int, start: dt.datetime, length: int) -> list[dict]:
    """One GPU's minutes: stretches of idle, work, short spikes and gaps, in random order and length."""
    rows, minute = [], 0
    while minute < length:
        kind = rng.choices(("idle", "busy", "spike", "gap"), weights=(5, 2, 3, 2))[0]
        span = {"idle": rng.randint(3, 70), "busy": rng.randint(3, 40), "spike": rng.randint(1, 4),
                "gap": rng.randint(1, 5)}[kind]
        memory = rng.choice((500.0, 1500.0, 30000.0))  # below, between and above the floors
        for m in range(minute, min(minute + span, length)):
            if kind == "gap":
                continue
            activity = rng.uniform(0.0, 0.049) if kind == "idle" else rng.uniform(0.05, 0.95)
            sampled_at = start + dt.timedelta(minutes=m)
            for metric, value in ((GR, activity), (FB, memory)):
                rows.append({"sampled_at": sampled_at, "host": host, "gpu": index, "metric": metric, "value": value,
                             "source": "dcgm_text", "source_file": "metrics.prom"})
        minute += span
    return rows


@pytest.fixture
def site_catalog(tmp_path, monkeypatch):
    """A site's policy catalog with the overrides above, named by gpupool.yml as an operator would."""
    doc = yaml.safe_load(DEFAULT_POLICIES.read_text())
    doc["policies"][POLICY]["overrides"] = OVERRIDES
    (tmp_path / "policies.yml").write_text(yaml.safe_dump(doc, allow_unicode=True))
    (tmp_path / "gpupool.yml").write_text("governance:\n  policies: policies.yml\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "gpupool.yml"))
    return load_catalog()


@pytest.mark.parametrize("seed", [11, 2028])
def test_warehouse_and_live_policy_find_the_same_idle_windows(warehouse, site_catalog, seed):
    inventory, events, placements, samples = random_jobs(random.Random(seed), jobs=40)
    load(warehouse, gpu_inventory=inventory, job_events=events, job_gpus=placements, dcgm_samples=samples)
    con = build(warehouse)
    allocations = con.sql(
        "select allocation_id, source, job_id, attempt, tenant, queue, template, user_name, host, gpu, gpu_model, "
        "fraction, started_at, ended_at, is_running from marts.fct_allocations").pl()
    minutes = con.sql("select allocation_id, minute_at, activity, fb_used_mib from marts.fct_allocation_activity").pl()
    mart = con.sql("select * from marts.fct_idle_windows").pl()
    assert allocations.height > 60 and not allocations["is_running"].any()
    now = minutes["minute_at"].max() + dt.timedelta(days=1)

    # the live policy's windows: its parameter resolution (with_rules) and idle_windows, as it evaluates them
    params = with_rules(allocations, site_catalog, POLICY, (*IDLE_PARAMS, "window_minutes")).select(
        "allocation_id", *IDLE_PARAMS, "window_minutes", "started_at", "ended_at")
    live = idle_windows(minutes, params, now)
    enabled = mart.filter("is_policy_enabled")
    compared = ["allocation_id", "window_start_at", "window_end_at"]
    assert enabled.height > 20, "the profiles should give many windows"
    assert mart.filter(~pl.col("is_policy_enabled")).height > 0, "interactive sessions' windows are recorded too"
    assert sorted(enabled.select(compared).rows()) == sorted(live.select(compared).rows())

    joined = enabled.join(live, on=compared, suffix="_live")
    assert joined.height == enabled.height
    for mart_col, live_col in (("idle_minutes", "span_minutes"), ("telemetry_minutes", "telemetry_minutes"),
                               ("busy_minutes", "busy_minutes"), ("missing_minutes", "missing_minutes"),
                               ("spikes_bridged", "spikes"), ("mean_activity", "mean_activity_live"),
                               ("peak_fb_used_mib", "peak_fb_used_mib_live")):
        assert joined[mart_col].to_list() == pytest.approx(joined[live_col].to_list()), mart_col
    # the profiles reach the rule's edges: bridged spikes and gaps, and every override in use
    assert enabled["spikes_bridged"].sum() > 0 and enabled["missing_minutes"].sum() > 0
    assert set(enabled["policy_scope"]) >= {"default", "template:inference", "queue:tight", "queue:strict"}

    # and the findings it acts on: one per attempt per group of overlapping windows, the same GPU-hours
    findings = evaluate(PolicyInputs(allocations=allocations, minutes=minutes), site_catalog, now,
                        kinds=(PolicyKind.IDLE_ALLOCATION,))
    acted = findings.group_by("job_id").agg(pl.col("gpu_hours").sum()).sort("job_id")
    recorded = enabled.group_by("job_id").agg(pl.col("idle_gpu_hours").sum()).sort("job_id")
    assert acted["job_id"].to_list() == recorded["job_id"].to_list()
    assert acted["gpu_hours"].to_list() == pytest.approx(recorded["idle_gpu_hours"].to_list())
