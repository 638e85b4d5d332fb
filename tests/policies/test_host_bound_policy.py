"""The host-bound policy: GPUs underused while their host's CPU is saturated (a data-loader-bound job)
is advice (more CPUs or faster storage), never a reclaim. Known answers at both thresholds
(min_saturated_minutes 30, min_saturated_share 0.5 in the shipped catalog), and the daily record
through the warehouse."""
from __future__ import annotations

import datetime as dt
import json
from typing import Any

import polars as pl
import pytest

from pipelines.assets.reclaim import DAILY_KINDS, record_day
from pipelines.contracts import Mode, PolicyKind, StepAction
from pipelines.governance.outbox import Outbox
from pipelines.policies.catalog import CatalogError, load_catalog
from pipelines.policies.host import RECOMMENDATION
from pipelines.policies.inputs import PolicyInputs
from pipelines.policies.model import LIVE_KINDS
from tests.models.builders import at as wat
from tests.models.builders import build, gpu, load, series, simple_job
from tests.policies.frames import T0, activity, alloc, at, catalog_with, find

NOW = at(240)


def usage(job_id: str = "j1", *, saturated: int, observed: int, running: bool = False, **fields: Any) -> dict:
    """One metrics.job_host_usage row of a 2-GPU training attempt on n1 from T0 to T0 + observed minutes."""
    row = {
        "source": "allocator", "job_id": job_id, "attempt": 1, "tenant": "vision", "queue": "q",
        "template": "training", "gpu_model": "A100", "started_at": T0,
        "ended_at": None if running else at(observed), "is_running": running, "gpus": 2.0, "allocations": 2,
        "observed_minutes": observed, "gpu_activity_mean": 0.2, "host_saturated_minutes": saturated,
        "host_saturated_gpu_hours": saturated * 2 / 60, "saturated_host": "n1" if saturated else None,
        "saturated_cpu_busy_fraction_mean": 0.95 if saturated else None,
        "saturated_disk_read_bytes_per_s_mean": 2e8 if saturated else None,
        "saturated_gpu_activity_mean": 0.18 if saturated else None,
    }
    return row | fields


def host_findings(*rows: dict, catalog=None, allocations: list[dict] | None = None) -> list[dict]:
    data = PolicyInputs(allocations=pl.from_dicts(allocations or [alloc("a0")]), minutes=None,
                        host_usage=pl.from_dicts(list(rows), infer_schema_length=None))
    return find(data, NOW, PolicyKind.HOST_BOUND, catalog)


@pytest.mark.parametrize(("saturated", "observed", "found"), [
    (30, 60, True),    # both thresholds exactly: 30 minutes, share 0.5
    (29, 58, False),   # share 0.5 but one minute short
    (30, 61, False),   # 30 minutes but share just under 0.5
    (31, 61, True),    # just above both
    (120, 120, True),
])
def test_both_thresholds_at_their_edges(saturated, observed, found):
    got = host_findings(usage(saturated=saturated, observed=observed))
    assert bool(got) is found


def test_a_finding_recommends_more_cpus_or_faster_storage_with_its_evidence():
    [f] = host_findings(usage(saturated=45, observed=60, running=True), allocations=[alloc("a0", user_name="ana")])
    assert f["policy"] == "host-bound" and f["kind"] == "host_bound"
    assert f["metric"] == "host_saturated_share"
    assert f["observed"] == pytest.approx(0.75) and f["threshold"] == pytest.approx(0.5)
    assert f["recommendation"] == RECOMMENDATION
    assert "more CPUs or faster storage" in f["recommendation"]
    assert (f["gpus_flagged"], f["gpus_held"]) == (2, 2)
    assert f["gpu_hours"] == pytest.approx(45 * 2 / 60)
    assert f["is_ongoing"] is True and f["window_end_at"] == NOW  # running: to the data's end
    assert f["window_start_at"] == T0 and f["detected_at"] == at(30)
    assert f["user_name"] == "ana"
    assert {k: f["evidence"][k] for k in ("host", "cpu_busy_fraction", "disk_read_bytes_per_s", "gpu_activity",
                                         "host_saturated_minutes", "observed_minutes")} == {
        "host": "n1", "cpu_busy_fraction": 0.95, "disk_read_bytes_per_s": 2e8, "gpu_activity": 0.18,
        "host_saturated_minutes": 45, "observed_minutes": 60}


def test_an_ended_attempt_is_judged_over_its_life():
    [f] = host_findings(usage(saturated=40, observed=60))
    assert f["is_ongoing"] is False and f["window_end_at"] == at(60)


def test_an_idle_gpu_on_an_unsaturated_host_is_not_a_finding():
    # idle GPUs on a host with spare CPU: the idle policies' business, not this one's
    assert host_findings(usage(saturated=0, observed=120, gpu_activity_mean=0.0)) == []


def test_a_busy_gpu_on_a_saturated_host_has_no_saturated_minutes_and_no_finding():
    # metrics.job_host_usage counts no minute when the GPUs average >= 0.3 (here 0.8), however busy the CPU
    assert host_findings(usage(saturated=0, observed=120, gpu_activity_mean=0.8)) == []


def test_scopes_switch_it_off_and_move_the_thresholds(tmp_path):
    def edit(doc):
        doc["policies"]["host-bound"]["overrides"] = [
            {"template": "inference", "params": {"enabled": False}},
            {"queue": "strict", "params": {"min_saturated_minutes": 60}},
        ]

    catalog = catalog_with(tmp_path, edit)
    assert host_findings(usage(saturated=40, observed=60, template="inference"), catalog=catalog) == []
    assert host_findings(usage(saturated=40, observed=60, queue="strict"), catalog=catalog) == []
    [f] = host_findings(usage(saturated=40, observed=60), catalog=catalog)
    assert f["scope"] == "default"


def test_the_catalog_refuses_any_step_but_recommend(tmp_path):
    assert [s.action for s in load_catalog().rule("host-bound").steps] == [StepAction.RECOMMEND]
    with pytest.raises(CatalogError, match=r"policies.host-bound.steps: a host_bound policy only recommends"):
        catalog_with(tmp_path, lambda d: d["policies"]["host-bound"]["steps"].append({"action": "reclaim"}))
    with pytest.raises(CatalogError, match=r"host-bound.overrides\[0\].steps: a host_bound policy only recommends"):
        catalog_with(tmp_path, lambda d: d["policies"]["host-bound"].update(
            overrides=[{"queue": "q", "steps": [{"action": "remind"}]}]))
    with pytest.raises(CatalogError, match=r"min_saturated_share: 1.5: expected a number between 0 and 1"):
        catalog_with(tmp_path, lambda d: d["policies"]["host-bound"]["params"].update(min_saturated_share=1.5))


def test_the_live_idle_policies_never_call_a_loader_bound_job_idle():
    # two GPUs working at 10-25 % for four hours: above every idle threshold (0.05, zombie 0.02),
    # while the host-bound policy finds it
    levels = [0.10 + 0.15 * (m % 2) for m in range(240)]
    allocations = [alloc("a0"), alloc("a1", gpu=1)]
    minutes = activity("a0", levels) + activity("a1", levels[::-1])
    data = PolicyInputs(allocations=pl.from_dicts(allocations), minutes=pl.from_dicts(minutes),
                        host_usage=pl.from_dicts([usage(saturated=200, observed=240, running=True)]))
    for kind in LIVE_KINDS:
        assert find(data, NOW, kind) == [], kind
    assert len(find(data, NOW, PolicyKind.HOST_BOUND)) == 1
    assert PolicyKind.HOST_BOUND in DAILY_KINDS and PolicyKind.HOST_BOUND not in LIVE_KINDS


# -- through the warehouse -------------------------------------------------------------------
GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def host_rows(host: str, minutes: int, busy_share: float) -> list[dict]:
    """node_exporter CPU counters of a 100-CPU host busy `busy_share` of every minute from 10:00."""
    out = []
    for m in range(minutes + 1):
        t = wat("10:00") + dt.timedelta(minutes=m)
        for mode, share in (("user", busy_share), ("idle", 1 - busy_share)):
            out.append({"sampled_at": t, "host": host, "metric": "node_cpu_seconds_total", "value": 6000 * share * m,
                        "cpu": "all", "mode": mode, "source": "node_exporter", "source_file": f"{host}.prom"})
    return out


def test_the_daily_record_recommends_for_a_loader_bound_job_only(warehouse, tmp_path):
    # j-loader on h1 at 0.15 activity for 60 minutes, its host 95 % busy; j-busy on h2 at 0.8 with
    # its host 95 % busy too; j-quiet idles on h3, whose host is 20 % busy
    jobs = {"j-loader": ("h1", 0.15), "j-busy": ("h2", 0.8), "j-quiet": ("h3", 0.0)}
    events, placements, dcgm, hosts = [], [], [], []
    for job_id, (host, level) in jobs.items():
        job_events, job_placements = simple_job(job_id, host, 0, wat("10:00"), wat("11:00"),
                                                spec={"expected_runtime_s": 7200, "checkpoint_policy": "hourly"})
        events += job_events
        placements += job_placements
        dcgm += series(host, 0, GR, wat("10:00"), 60, level)
        hosts += host_rows(host, 60, 0.2 if host == "h3" else 0.95)
    load(warehouse, gpu_inventory=[gpu(h, 0) for h in ("h1", "h2", "h3")], job_events=events,
         job_gpus=placements, dcgm_samples=dcgm, host_samples=hosts)
    build(warehouse).close()

    outbox = Outbox(tmp_path / "outbox.db", warehouse.landing, writer="daily")
    try:
        record = record_day(warehouse, wat("00:00").date(), load_catalog().with_mode(Mode.ENFORCE), outbox,
                            dt.datetime(2026, 11, 2, 1, 10))
        decisions = [r for r in outbox.rows() if r["finding_id"].startswith("host-bound:")]
    finally:
        outbox.close()
    found = record.findings.filter(pl.col("policy") == "host-bound").to_dicts()
    assert [f["job_id"] for f in found] == ["j-loader"]
    [f] = found
    # 59 minutes with a CPU rate (10:01..10:59) of 60 observed: share 59/60
    assert f["observed"] == pytest.approx(59 / 60)
    assert f["recommendation"] == RECOMMENDATION
    evidence = json.loads(f["evidence"])
    assert evidence["host"] == "h1"
    assert evidence["cpu_busy_fraction"] == pytest.approx(0.95)
    assert evidence["gpu_activity"] == pytest.approx(0.15)
    assert [(d["action"], d["status"]) for d in decisions] == [("recommend", "recommended")]
    assert not record.findings.filter(pl.col("job_id") == "j-loader", pl.col("kind").is_in(
        [k.value for k in LIVE_KINDS])).height  # never idle at 0.15
