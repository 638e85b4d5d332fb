"""Idle reclaim end to end on the real one-node Slurm, minute by virtual minute.

Three jobs hold fake GPUs on the one node: an idle training job (2 GPUs, `--comment=gpupool:training`),
an idle experiment (1 GPU, `gpupool:experiment`) and a busy training job (2 GPUs). The test serves
dcgm-exporter text for the node's 8 GPUs on 127.0.0.1, each GPU labelled `hpc_job` from the prolog's
job map as dcgm-exporter's --hpc-job-mapping-dir does, the idle jobs' GPUs at 0 activity, the busy
job's at 90 %. Every virtual minute it scrapes that endpoint with the real scraper into the landing
zone and runs the `idle_reclaim` sensor's body (`GovernanceResource.tick`) wired from a gpupool.yml
with `slurm.governance`, `reminders` (email to an aiosmtpd server the test starts) and the shipped
policy catalog with a 5-minute idle window, a 2-minute grace and training jobs preempted instead of
reclaimed. The clock is virtual (`now` moves a minute a tick); Slurm's state is real.

- shadow (first: it leaves the jobs as they are): no mail, no AdminComment, no requeue or cancel, and
  the decision log holds the "would" decisions;
- enforce: the owner's mail names the GPUs and the next step, both idle jobs carry the reminder in
  their AdminComment, after the grace the training job is requeued (restart_cnt 1) and the experiment
  cancelled, the busy job runs on with no decision; ingested, the warehouse holds every decision and
  answer and the Slurm enforcer's audit, and once built the reclaim ledger holds each applied step.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from pipelines.build import build
from pipelines.config import section
from pipelines.connectors.scrape import DcgmConfig, Scraper, write_round
from pipelines.governance.tick import TickReport
from pipelines.ingest import ingest_partition
from pipelines.policies.catalog import DEFAULT_POLICIES
from pipelines.resources.governance import GovernanceResource
from pipelines.sources.slurm_squeue import slurm_number
from pipelines.warehouse import Warehouse
from tests.connectors.conftest import LoopbackServer, send
from tests.notify.servers import Inbox, smtp_server
from tests.slurm.conftest import NODE, STATE, SlurmCluster, mapped_gpus, resume_if_drained

pytestmark = pytest.mark.slow

WINDOW_MIN, GRACE_S = 5, 120
OWNER_ADDRESS = "gpu-owner@lab.example"
BUSY, IDLE = 0.9, 0.0
MAX_MINUTES = 20  # the grace is over by minute ~9; more means nothing happened
# role -> (GPUs, --comment: the template marker)
JOBS = {"train": (2, "gpupool:training"), "experiment": (1, "gpupool:experiment"), "busy": (2, "gpupool:training")}


class Exporter:
    """dcgm-exporter's text for the node's 8 GPUs: activity per GPU index, `hpc_job` from the
    prolog's job map (what dcgm-exporter --hpc-job-mapping-dir reads)."""

    def __init__(self, activity: dict[int, float]):
        self.activity = activity
        self.url = ""

    def text(self) -> str:
        lines = []
        for metric, value in (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lambda g: self.activity.get(g, IDLE)),
                              ("DCGM_FI_DEV_FB_USED", lambda g: 30000.0 if self.activity.get(g) == BUSY else 512.0)):
            lines.append(f"# TYPE {metric} gauge")
            for gpu in range(8):
                mapped = STATE / "hpc-job-map" / str(gpu)
                job = mapped.read_text().split() if mapped.exists() else []
                labels = (f'gpu="{gpu}",UUID="GPU-00000000-0000-0000-0000-00000000000{gpu}",device="nvidia{gpu}",'
                          f'modelName="NVIDIA H100 80GB HBM3",Hostname="{NODE}"'
                          + (f',hpc_job="{job[-1]}"' if job else ""))
                lines.append(f"{metric}{{{labels}}} {value(gpu):.3f}")
        return "\n".join(lines) + "\n"


@contextmanager
def exporter_server(exporter: Exporter) -> Iterator[Exporter]:
    server = LoopbackServer(lambda request: send(request, 200, exporter.text().encode()))
    exporter.url = f"{server.url}/metrics"
    try:
        yield exporter
    finally:
        server.stop()


@dataclasses.dataclass
class Pool:
    cluster: SlurmCluster
    jobs: dict[str, str]  # role -> Slurm job id
    gpus: dict[str, list[int]]  # role -> the GPU indices Slurm gave it
    t0: dt.datetime  # the minute the last job started in (UTC)
    exporter: Exporter


@pytest.fixture(scope="module")
def pool(slurm_cluster: SlurmCluster) -> Iterator[Pool]:
    c = slurm_cluster
    c.cancel_all()
    resume_if_drained()
    jobs = {role: c.submit(gpus=gpus, comment=comment, name=f"e2e-{role}", requeue=True, time_min=120)
            for role, (gpus, comment) in JOBS.items()}
    c.wait_running(*jobs.values())
    c.wait_for("the prolog to map the jobs' GPUs",
               lambda: all(len(mapped_gpus(jobs[role])) == gpus for role, (gpus, _) in JOBS.items()), 10)
    gpus = {role: mapped_gpus(job) for role, job in jobs.items()}
    started = max(slurm_number(c.job(job)["start_time"], "start_time") for job in jobs.values())
    t0 = dt.datetime.fromtimestamp(started, dt.UTC).replace(tzinfo=None, second=0)
    activity = {gpu: BUSY for gpu in gpus["busy"]}
    with exporter_server(Exporter(activity)) as exporter:
        yield Pool(c, jobs, gpus, t0, exporter)
    c.cancel(*jobs.values())


def catalog_file(folder: Path, mode: str) -> Path:
    """The shipped catalog with idle-allocation in `mode`, a short window and grace, and training jobs
    (they checkpoint) preempted where others are reclaimed."""
    doc = yaml.safe_load(DEFAULT_POLICIES.read_text())
    idle = doc["policies"]["idle-allocation"]
    idle["mode"] = mode
    idle["params"].update(window_minutes=WINDOW_MIN, min_coverage=0.8)
    idle["steps"] = [{"action": "remind", "after_s": 0}, {"action": "reclaim", "after_s": GRACE_S}]
    idle["overrides"].append({"template": "training", "steps": [{"action": "remind", "after_s": 0},
                                                                 {"action": "preempt", "after_s": GRACE_S}]})
    (folder / "policies.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (folder / "exemptions.yml").write_text("exemptions: []\n")
    return folder / "policies.yml"


@dataclasses.dataclass
class Loop:
    """A gpupool home governing the test cluster, and its reports by virtual minute."""

    governance: GovernanceResource
    warehouse: Warehouse
    scraper: Scraper
    inbox: Inbox
    reports: dict[int, TickReport] = dataclasses.field(default_factory=dict)

    def decisions(self) -> list[dict]:
        files = sorted((self.warehouse.landing / "governance_actions").glob("*/*.jsonl"))
        return [json.loads(line) for f in files for line in f.read_text().splitlines()]

    def first(self, decision: str) -> int:
        """The virtual minute of the first tick that recorded `<action> <status>`."""
        return min(m for m, r in self.reports.items() if r.decisions.get(decision))


@contextmanager
def governed(tmp_path: Path, pool: Pool, mode: str) -> Iterator[Loop]:
    catalog_file(tmp_path, mode)
    with smtp_server() as (port, inbox):
        config = tmp_path / "gpupool.yml"
        config.write_text(yaml.safe_dump({
            "governance": {"policies": "policies.yml", "exemptions": "exemptions.yml", "outbox": "state/outbox.db"},
            "slurm": {"governance": {"partitions": ["batch"]}},
            "dcgm": {"targets": [pool.exporter.url], "interval_s": 5, "connect_timeout_s": 1, "read_timeout_s": 2},
            "reminders": {
                "users": {getpass.getuser(): {"email": OWNER_ADDRESS}},
                "exemption_contact": "#gpu-pool",
                "email": {"host": "127.0.0.1", "port": port, "security": "none", "from_address": "gpupool@example.org",
                          "address_template": "{user}@example.org", "timeout_s": 5},
            },
        }))
        scraper = Scraper(section("dcgm", DcgmConfig, config))
        try:
            yield Loop(GovernanceResource(config_file=str(config)), Warehouse(tmp_path / "home"), scraper, inbox)
        finally:
            scraper.close()


def run_until(loop: Loop, pool: Pool, *decisions: str) -> None:
    """Virtual minutes from t0 + 1: a scrape round in the middle of the minute before, then a tick at the
    minute; until every one of `decisions` was recorded, then one minute more."""
    for m in range(1, MAX_MINUTES):
        now = pool.t0 + dt.timedelta(minutes=m)
        scrape = loop.scraper.scrape_round(now - dt.timedelta(seconds=30))
        assert scrape.gaps.height == 0, scrape.gaps
        write_round(loop.warehouse.landing, scrape)
        report = loop.governance.tick(loop.warehouse, now)
        assert report.ok and not report.skipped, report.summary()
        assert report.running_by_source["slurm"] >= 2, report.summary()
        loop.reports[m] = report
        if all(any(r.decisions.get(d) for r in loop.reports.values()) for d in decisions):
            return
    raise AssertionError(f"no {', '.join(decisions)} within {MAX_MINUTES} minutes: "
                         f"{[r.summary() for r in loop.reports.values()][-3:]}")


def untouched(pool: Pool) -> None:
    """Every job still runs its first attempt, without an AdminComment, its Comment as submitted."""
    for role, job_id in pool.jobs.items():
        job = pool.cluster.job(job_id)
        assert (pool.cluster.state(job_id), job["restart_cnt"], job["admin_comment"]) == ("RUNNING", 0, ""), role
        assert job["comment"] == JOBS[role][1]


def test_shadow_sends_nothing_touches_nothing_and_records_what_it_would_do(pool: Pool, tmp_path: Path):
    with governed(tmp_path, pool, "shadow") as loop:
        run_until(loop, pool, "preempt shadow", "reclaim shadow")
        assert all(r.delivery.sent == 0 for r in loop.reports.values())
        assert loop.inbox.messages == []
        untouched(pool)
        logged = sorted((d["job_id"], d["record"], d["action"], d["mode"], d["status"]) for d in loop.decisions())
        train, experiment = pool.jobs["train"], pool.jobs["experiment"]
        assert logged == sorted([(train, "decision", "remind", "shadow", "shadow"),
                                 (train, "decision", "preempt", "shadow", "shadow"),
                                 (experiment, "decision", "remind", "shadow", "shadow"),
                                 (experiment, "decision", "reclaim", "shadow", "shadow")])
        assert loop.first("preempt shadow") == loop.first("remind shadow") + GRACE_S // 60
        # the reminder it would send: to whom, and the step it would announce
        would = {d["job_id"]: d["evidence"] for d in loop.decisions() if d["action"] == "remind"}
        assert {job: (e["user_name"], e["next_step"]["action"]) for job, e in would.items()} == {
            train: (getpass.getuser(), "preempt"), experiment: (getpass.getuser(), "reclaim")}
        assert not (loop.warehouse.landing / "allocator_audit").exists()  # Slurm was never asked to act


def test_enforce_reminds_marks_requeues_and_cancels_the_idle_jobs_and_leaves_the_busy_one(pool: Pool,
                                                                                          tmp_path: Path):
    train, experiment, busy = pool.jobs["train"], pool.jobs["experiment"], pool.jobs["busy"]
    with governed(tmp_path, pool, "enforce") as loop:
        run_until(loop, pool, "remind queued")
        remind_at = max(loop.reports)
        assert loop.reports[remind_at].decisions == {"remind queued": 2}
        assert loop.reports[remind_at].delivery.answered == {"applied": 2}

        # the owner's mail, one per job, naming the GPUs Slurm gave it and what comes next, and when
        mails = {msg["Subject"]: (to, msg.get_content()) for to, msg in loop.inbox.messages}
        due = pool.t0 + dt.timedelta(minutes=remind_at, seconds=GRACE_S)
        for role, step in (("train", "the job is preempted (requeued) and its GPUs freed"),
                           ("experiment", "the job is stopped and its GPUs reclaimed")):
            job, gpus = pool.jobs[role], JOBS[role][0]
            to, body = mails[f"[gpupool] Idle GPUs: job {job} holds {gpus} idle GPU(s) on {NODE}"]
            assert to == [OWNER_ADDRESS]
            slots = ", ".join(f"{NODE}/{g}" for g in pool.gpus[role])
            assert f"GPUs: {slots} ({gpus} of the {gpus} GPUs the job holds)" in body
            assert "scheduler slurm" in body and "tenant vision, queue batch" in body
            assert f"Next: {step} at {due:%Y-%m-%d %H:%M} UTC (in 2 min)" in body
        assert len(mails) == 2

        # the engine's own mark, where squeue and scontrol show it; the user's Comment as it was
        reminded = pool.t0 + dt.timedelta(minutes=remind_at)
        for role, verb in (("train", "preempt"), ("experiment", "reclaim")):
            job = pool.cluster.job(pool.jobs[role])
            assert job["admin_comment"].startswith(f"gpupool: reminded {reminded:%Y-%m-%d %H:%M} UTC: GPU activity 0")
            assert job["admin_comment"].endswith(f"; {verb} in 2 min unless it is used (policy idle-allocation 1)")
            assert job["comment"] == JOBS[role][1]

        run_until(loop, pool, "preempt queued", "reclaim queued")
        acted_at = max(loop.reports)
        assert acted_at == remind_at + GRACE_S // 60
        assert loop.reports[acted_at].delivery.answered == {"applied": 2}

    # in Slurm: the training job requeued (its next attempt), the experiment cancelled, the busy job running
    c = pool.cluster
    c.wait_for(f"job {train} requeued", lambda: c.job(train)["restart_cnt"] == 1)
    c.wait_accounted(experiment, lambda rows: rows and rows[-1]["state"].startswith("CANCELLED"), "cancelled")
    c.wait_accounted(train, lambda rows: rows and rows[0]["state"] == "REQUEUED", "requeued")
    assert (c.state(busy), c.job(busy)["restart_cnt"], c.job(busy)["admin_comment"]) == ("RUNNING", 0, "")

    # into the warehouse: the decision log and the Slurm enforcer's audit, ingested
    wh = loop.warehouse
    days = sorted({pool.t0.date(), (pool.t0 + dt.timedelta(minutes=acted_at)).date()})
    for source in ("governance_actions", "allocator_audit"):
        for day in days:
            report = ingest_partition(wh, source, day)
            assert report.records_quarantined == 0, report.summary()
    with wh.connect() as con:
        actions = con.sql("""
            select job_id, action, record, status, outcome, engine from raw.governance_actions
            order by job_id, step_index, record desc""").fetchall()
        audit = con.sql("""
            select object_name, action, decision, after_json from raw.audit_events where source = 'slurm'
            order by object_name, occurred_at""").fetchall()
    assert actions == sorted([
        (train, "remind", "decision", "queued", None, "slurm"), (train, "remind", "answer", "answered", "applied", "slurm"),
        (train, "preempt", "decision", "queued", None, "slurm"),
        (train, "preempt", "answer", "answered", "applied", "slurm"),
        (experiment, "remind", "decision", "queued", None, "slurm"),
        (experiment, "remind", "answer", "answered", "applied", "slurm"),
        (experiment, "reclaim", "decision", "queued", None, "slurm"),
        (experiment, "reclaim", "answer", "answered", "applied", "slurm"),
    ], key=lambda r: (r[0], ("remind", "preempt", "reclaim").index(r[1]), r[2] != "decision"))
    assert [(a[0], a[1], a[2]) for a in audit] == sorted([
        (train, "enforcement.remind", "applied"), (train, "enforcement.preempt", "applied"),
        (experiment, "enforcement.remind", "applied"), (experiment, "enforcement.reclaim", "applied")],
        key=lambda r: (r[0], "remind" not in r[1]))
    assert json.loads(audit[0][3])["admin_comment"].startswith("gpupool: reminded")
    assert busy not in {a[0] for a in actions}
    # built, the reclaim ledger holds each applied step once, in the engine's own word (its audit record)
    build(wh)
    with wh.connect() as con:
        ledger = con.sql("""
            select job_id, action_kind, engine, record_source, is_from_decision_log, policy
            from marts.fct_reclaim_ledger""").fetchall()
    assert sorted(ledger) == sorted([
        (train, "remind", "slurm", "audit", True, "idle-allocation"),
        (train, "preempt", "slurm", "audit", True, "idle-allocation"),
        (experiment, "remind", "slurm", "audit", True, "idle-allocation"),
        (experiment, "reclaim", "slurm", "audit", True, "idle-allocation"),
    ])
