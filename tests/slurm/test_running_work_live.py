"""Against the real one-node cluster: the governance tick's Slurm reader (pipelines/governance/running.py)
lists the running jobs with the GPUs Slurm gave them.

Two jobs hold fake GPUs: one in batch (account vision, --comment=gpupool:training), one in urgent
(account nlp) requeued once so that it runs its second attempt. Which GPU indices each one holds
is checked against the prolog's job map (scripts/slurm/prolog-hpc-job-map.sh: one file per GPU
index naming its job), a source independent of squeue.
"""
from __future__ import annotations

import getpass

import pytest

from pipelines.connectors.slurm import SlurmConfig, SlurmGovernance
from pipelines.governance.running import SlurmWork
from tests.slurm.conftest import NODE, SlurmCluster, mapped_gpus, slurm

pytestmark = pytest.mark.slow


def test_the_reader_lists_running_jobs_with_their_gpus_user_account_partition_and_attempt(cluster: SlurmCluster):
    train = cluster.submit(partition="batch", gpus=2, account="vision", comment="gpupool:training", time_min=90,
                           name="gov-train")
    notebook = cluster.submit(partition="urgent", gpus=3, account="nlp", requeue=True, time_min=30, name="gov-nb")
    cluster.wait_running(train, notebook)
    slurm("scontrol", "requeue", notebook)
    # a requeued job starts again once its credential expired (cred_expire: 10 s in the test cluster)
    cluster.wait_for(f"job {notebook} to run its second attempt",
                     lambda: cluster.state(notebook) == "RUNNING" and cluster.job(notebook)["restart_cnt"] == 1, 45)
    cluster.wait_for("the prolog to map both jobs",
                     lambda: len(mapped_gpus(train)) == 2 and len(mapped_gpus(notebook)) == 3, 10)

    scope = SlurmGovernance(partitions=["batch", "urgent"], template_by_partition={"urgent": "interactive"})
    work = SlurmWork(SlurmConfig(governance=scope)).read()
    assert work.source == "slurm" and not work.skipped
    jobs = {j["job_id"]: j for j in work.jobs}
    assert set(jobs) == {train, notebook}
    user = getpass.getuser()
    expected = {train: ("vision", "batch", 1, "training", 90), notebook: ("nlp", "urgent", 2, "interactive", 30)}
    for job_id, (account, partition, attempt, template, minutes) in expected.items():
        job = jobs[job_id]
        assert (job["tenant"], job["queue"], job["attempt"], job["user"]) == (account, partition, attempt, user)
        assert (job["spec"]["template"], job["spec"]["expected_runtime_s"]) == (template, minutes * 60)
        assert {g["host"] for g in job["gpus"]} == {NODE}
        assert sorted(g["gpu"] for g in job["gpus"]) == mapped_gpus(job_id)

    # only the partitions in scope are read
    batch_only = SlurmWork(SlurmConfig(governance=SlurmGovernance(partitions=["batch"]))).read()
    assert [j["job_id"] for j in batch_only.jobs] == [train]
