"""`gpupool reclaim --dry-run`: every running job with its idle evidence and what each policy would do
now, over the allocator and Slurm at once, touching nothing: no decision recorded, no action or
reminder sent, no outbox created; after a real tick it announces the step that follows, and when."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import polars as pl

from pipelines.connectors.slurm import SlurmConfig
from pipelines.governance.dryrun import dry_run
from pipelines.governance.live import SAMPLE_SCHEMA, SCRAPE_SOURCE
from pipelines.governance.outbox import Outbox
from pipelines.governance.running import AllocatorWork, SlurmWork
from pipelines.governance.telemetry import TelemetryUnavailable
from pipelines.governance.tick import governance_tick
from tests.governance.conftest import GRACE_S, Recorder
from tests.governance.test_running_work import (
    GR,
    SCOPE,
    Allocator,
    Squeue,
    idle_catalog,
    land_rounds,
    recorded,
    squeue_started_before,
)

NOW = dt.datetime(2026, 12, 3, 8, 0)


def engines(squeue: Squeue):
    return [AllocatorWork(Allocator()), SlurmWork(SlurmConfig(governance=SCOPE), run=squeue)]


def by_job(frame: pl.DataFrame) -> dict[tuple[str, str], dict]:
    return {(r["source"], r["job_id"]): r for r in frame.iter_rows(named=True)}


def test_a_dry_run_lists_every_running_job_with_its_evidence_and_touches_nothing(tmp_path):
    landing = tmp_path / "landing"
    land_rounds(landing, 62)
    squeue = Squeue(recorded())
    result = dry_run(NOW, landing=landing, catalog=idle_catalog(), readers=engines(squeue),
                     outbox_path=tmp_path / "outbox.db", lookback=dt.timedelta(minutes=60))
    jobs = by_job(result.jobs)
    assert set(jobs) == {("allocator", "j-000001"), ("slurm", "73"), ("slurm", "74"), ("slurm", "75")}
    idle, busy = jobs[("slurm", "73")], jobs[("slurm", "74")]
    assert (idle["user_name"], idle["tenant"], idle["queue"], idle["template"]) == ("root", "vision", "batch", "training")
    assert idle["slots"] == "localhost/3, localhost/4" and idle["gpus"] == 2
    assert idle["mean_activity"] == 0.0 and idle["minutes_reported"] == 2 * 41  # 07:19 (its start) to 08:00
    assert idle["findings"].startswith("idle-allocation: activity 0 vs 0.05")
    assert idle["now"] == "idle-allocation: remind queued"
    assert busy["mean_activity"] == 0.9 and busy["findings"] is None and busy["now"] is None
    assert squeue.calls == [("squeue", "--json", "--states=RUNNING")]  # listed, nothing else asked of Slurm
    assert not (tmp_path / "outbox.db").exists()
    assert not (landing / "governance_actions").exists()


class Unreadable:
    source = "prometheus"

    def read(self, now, lookback):
        raise TelemetryUnavailable("Prometheus at http://prometheus:9090: connection refused")


def test_telemetry_that_cannot_be_read_lists_the_jobs_and_judges_none(tmp_path):
    landing = tmp_path / "landing"
    land_rounds(landing, 62)
    result = dry_run(NOW, landing=landing, catalog=idle_catalog(), readers=engines(Squeue(recorded())),
                     outbox_path=None, lookback=dt.timedelta(minutes=60), telemetry=Unreadable())
    assert result.jobs.height == 4 and result.jobs["minutes_reported"].sum() == 0
    assert result.jobs["findings"].is_null().all() and result.jobs["now"].is_null().all()
    [error] = result.read.errors
    assert error == ("telemetry (prometheus): TelemetryUnavailable: Prometheus at http://prometheus:9090: "
                     "connection refused; nothing evaluated or planned this tick")


def test_after_a_tick_the_dry_run_says_what_follows_and_when(tmp_path):
    landing = tmp_path / "landing"
    land_rounds(landing, 62)
    squeue, cat, lookback = Squeue(recorded()), idle_catalog(), dt.timedelta(minutes=60)
    outbox = Outbox(tmp_path / "outbox.db", landing)
    try:
        governance_tick(NOW, landing=landing, catalog=cat, outbox=outbox, client=None, lookback=lookback,
                        enforcers={"allocator": Recorder(), "slurm": Recorder()}, work=engines(squeue))
        decided = len(outbox.rows())
    finally:
        outbox.close()
    later = NOW + dt.timedelta(minutes=5)
    result = dry_run(later, landing=landing, catalog=cat, readers=engines(squeue),
                     outbox_path=tmp_path / "outbox.db", lookback=lookback)
    idle = by_job(result.jobs)[("slurm", "73")]
    due = NOW + dt.timedelta(seconds=GRACE_S)
    assert idle["now"] is None  # reminded already: not announced again
    assert idle["next"] == f"idle-allocation: reclaim at {due:%Y-%m-%d %H:%M} UTC"
    outbox = Outbox(tmp_path / "outbox.db", landing)
    try:
        assert len(outbox.rows()) == decided  # the dry run recorded nothing
    finally:
        outbox.close()


def test_the_command_reads_slurm_through_squeue_and_says_so_when_no_engine_is_named(tmp_path):
    home, now = tmp_path / "home", dt.datetime.now(dt.UTC).replace(tzinfo=None)
    for m in range(1, 40):  # the last 40 minutes: job 73's GPUs (localhost 3, 4) idle, 74's busy
        t = now - dt.timedelta(minutes=m)
        folder = home / "landing" / SCRAPE_SOURCE / t.date().isoformat()  # a round lands in its own day
        folder.mkdir(parents=True, exist_ok=True)
        rows = [(t, "localhost", gpu, None, GR, 0.9 if gpu < 3 else 0.0) for gpu in range(8)]
        pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row").write_parquet(folder / f"scrape-{t:%H%M%S}-r{m}.parquet")
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat {squeue_started_before(now, tmp_path)}\n")
    squeue.chmod(0o755)
    config = tmp_path / "gpupool.yml"
    config.write_text(f"slurm:\n  squeue: {squeue}\n  governance:\n    partitions: [batch, urgent]\n"
                      "governance:\n  lookback_minutes: 45\n")
    env = {**os.environ, "GPUPOOL_HOME": str(home), "GPUPOOL_CONFIG": str(config)}
    gpupool = [sys.executable, "-m", "pipelines.cli", "reclaim", "--dry-run"]

    text = subprocess.run(gpupool, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 0, text.stderr
    assert "3 running jobs (slurm 3); nothing was recorded or sent" in text.stdout
    assert "slurm 73 (attempt 1) root · vision/batch · training · 2 GPU(s) localhost/3, localhost/4" in text.stdout
    lines = subprocess.run([*gpupool, "--json"], env=env, capture_output=True, text=True, timeout=120, check=False)
    rows = {r["job_id"]: r for r in map(json.loads, lines.stdout.splitlines())}
    assert "idle-allocation: remind queued" in rows["73"]["now"]
    assert "idle" not in (rows["74"]["findings"] or "") and rows["74"]["mean_activity"] == 0.9  # busy
    assert not (home / "governance").exists()  # no outbox was created

    config.write_text("governance:\n  lookback_minutes: 45\n")
    refused = subprocess.run(gpupool, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 1 and "no engine to govern" in refused.stderr
