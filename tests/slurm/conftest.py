"""The real one-node Slurm cluster (scripts/slurm-up.sh) as a session fixture, and job helpers; the
enforcer under test with a recorder of the commands it ran, and the node the drain tests drain.

If `sinfo` answers for the test cluster, it is used as it is. Otherwise the fixture runs
scripts/slurm-up.sh (root only) and runs scripts/slurm-down.sh at the end of the session.
Without the Debian packages the tests are skipped with the reason, unless
GPUPOOL_REQUIRE_COMPONENTS is set (CI): then slurm-up.sh installs them, and anything missing fails.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipelines.connectors.slurm import CommandResult, run_command
from pipelines.enforcement.base import ActionLedger
from pipelines.enforcement.slurm import SlurmEnforcer, slurm_node
from pipelines.paths import REPO_ROOT

CLUSTER = "gpupool"
STATE = Path(os.environ.get("GPUPOOL_SLURM_STATE", "/var/tmp/gpupool-slurm"))
REST_URL = f"http://127.0.0.1:{os.environ.get('GPUPOOL_SLURM_REST_PORT', '6820')}"
REQUIRED = bool(os.environ.get("GPUPOOL_REQUIRE_COMPONENTS"))


def missing(reason: str) -> None:
    """Skip locally; fail where the components are required (CI)."""
    if REQUIRED:
        pytest.fail(f"{reason} (GPUPOOL_REQUIRE_COMPONENTS is set: the Slurm tests must run)", pytrace=False)
    pytest.skip(reason)


def slurm(*argv: str, check: bool = True, timeout: float = 30) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, "TZ": "UTC"},
                          check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _cluster_name() -> str | None:
    """The name of the cluster `scontrol` talks to, or None when no slurmctld answers."""
    try:
        done = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=10, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            return value.strip()
    return None


def accounting_diagnosis() -> str:
    """What explains accounting that does not land: the DBD agent's queue (sdiag) and the tails of
    slurmctld's and slurmdbd's logs."""
    agent = [line.strip() for line in slurm("sdiag", check=False).splitlines() if "DBD Agent" in line]
    tails = []
    for name in ("slurmctld.log", "slurmdbd.log"):
        log = STATE / "log" / name
        lines = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else ["(no log)"]
        tails.append(f"--- {name}\n" + "\n".join(lines))
    return "\n".join(["sdiag: " + ("; ".join(agent) or "(no DBD agent line)"), *tails])


@dataclass
class SlurmCluster:
    """Submit jobs to the test cluster and watch them; cancels what it submitted at the end."""

    started_here: bool
    submitted: list[str] = field(default_factory=list)

    def submit(self, *, partition: str = "batch", gpus: int = 1, account: str = "vision", name: str = "gpupool-test",
               requeue: bool | None = None, comment: str | None = None, time_min: int = 60, hold: bool = False,
               command: str = "sleep 300") -> str:
        argv = ["sbatch", "--parsable", f"--partition={partition}", f"--account={account}", f"--gres=gpu:{gpus}",
                f"--job-name={name}", f"--time={time_min}", "--output=/dev/null", "--chdir=/tmp"]
        if requeue is not None:
            argv.append("--requeue" if requeue else "--no-requeue")
        if comment:
            argv.append(f"--comment={comment}")
        if hold:
            argv.append("--hold")
        job_id = slurm(*argv, "--wrap", command).strip().split(";")[0]
        self.submitted.append(job_id)
        return job_id

    def job(self, job_id: str) -> dict | None:
        """The job's squeue --json entry, None when slurmctld no longer knows it."""
        jobs = json.loads(slurm("squeue", "--json"))["jobs"]
        return next((j for j in jobs if str(j["job_id"]) == job_id), None)

    def state(self, job_id: str) -> str | None:
        job = self.job(job_id)
        if job is None:
            return None
        state = job["job_state"]
        return state[0] if isinstance(state, list) else state

    def wait_for(self, what: str, check: Callable[[], bool], timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
            time.sleep(0.3)

    def wait_running(self, *job_ids: str, timeout_s: float = 30) -> None:
        self.wait_for(f"jobs {', '.join(job_ids)} to run",
                      lambda: all(self.state(j) == "RUNNING" for j in job_ids), timeout_s)

    def sacct_rows(self, job_id: str) -> list[dict]:
        """The job's accounting rows (one per attempt), as sacct --duplicates lists them."""
        out = slurm("sacct", "--duplicates", "--allusers", "-X", "--parsable2", "--noheader", f"--jobs={job_id}",
                    "--format=JobID,State,Start,End,Partition")
        keys = ("job_id", "state", "start", "end", "partition")
        return [dict(zip(keys, line.split("|"), strict=True)) for line in out.splitlines() if line]

    def wait_accounted(self, job_id: str, check: Callable[[list[dict]], bool], what: str,
                       timeout_s: float = 120) -> list[dict]:
        """Poll sacct: accounting lands a second or two after the fact, longer when slurmctld's queue
        to slurmdbd is backed up on a loaded machine. On a timeout the message says what sacct last
        showed, the DBD agent's queue and the daemons' last log lines, so a CI failure explains itself."""
        rows: list[dict] = []

        def landed() -> bool:
            nonlocal rows
            rows = self.sacct_rows(job_id)
            return check(rows)

        try:
            self.wait_for(f"sacct to show job {job_id} {what}", landed, timeout_s)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}; sacct last showed {rows}\n{accounting_diagnosis()}") from None
        return rows

    def cancel(self, *job_ids: str) -> None:
        if job_ids:
            slurm("scancel", *job_ids, check=False)

    def cancel_all(self) -> None:
        """Cancel every job in the test cluster, and wait until the GPUs are free."""
        jobs = slurm("squeue", "-h", "-o", "%A").split()
        self.cancel(*jobs)
        self.wait_for("the queue to empty", lambda: not slurm("squeue", "-h", "-o", "%A").split(), 30)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    installed = shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()
    name = _cluster_name() if installed else None
    started_here = False
    if name is None:
        if not installed and not REQUIRED:
            pytest.skip("Slurm is not installed: `sudo bash scripts/slurm-up.sh` installs Debian's slurm-wlm and "
                        "starts the one-node test cluster (CI sets GPUPOOL_REQUIRE_COMPONENTS=1 to make this a "
                        "failure)")
        if os.geteuid() != 0:
            missing("the Slurm test cluster is not running and starting it needs root: "
                    "run `sudo bash scripts/slurm-up.sh`")
        up = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "slurm-up.sh")], capture_output=True, text=True,
                            timeout=600, check=False)
        if up.returncode != 0:
            missing(f"scripts/slurm-up.sh failed (exit {up.returncode}): {(up.stdout + up.stderr)[-1500:]}")
        started_here = True
        name = _cluster_name()
    if name != CLUSTER:
        missing(f"slurmctld answers for cluster {name!r}: these tests submit and cancel jobs, so they run only "
                f"against the {CLUSTER!r} test cluster of scripts/slurm-up.sh")
    cluster = SlurmCluster(started_here)
    try:
        yield cluster
    finally:
        cluster.cancel(*cluster.submitted)
        if started_here:
            subprocess.run(["bash", str(REPO_ROOT / "scripts" / "slurm-down.sh")], capture_output=True, timeout=120,
                           check=False)


class Recorder:
    """Runs the real commands and remembers them (thread-safe)."""

    def __init__(self):
        self.calls: list[tuple[str, ...]] = []
        self._lock = threading.Lock()

    def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        with self._lock:
            self.calls.append(tuple(argv))
        return run_command(argv, timeout_s)

    def count(self, *prefix: str) -> int:
        return sum(1 for call in self.calls if call[: len(prefix)] == prefix)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def enforcer(tmp_path, recorder) -> SlurmEnforcer:
    return SlurmEnforcer(ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "slurm"), run=recorder)


NODE = "localhost"


def mapped_gpus(job_id: str) -> list[int]:
    """The GPU indices the prolog mapped to the job (scripts/slurm/prolog-hpc-job-map.sh: one file per
    GPU index naming its jobs, the folder dcgm-exporter's --hpc-job-mapping-dir reads)."""
    return sorted(int(p.name) for p in (STATE / "hpc-job-map").glob("[0-9]*") if job_id in p.read_text().split())


def node_state() -> tuple[str, str | None]:
    """The node's State and Reason, as `scontrol show node` has them."""
    node = slurm_node(slurm("scontrol", "-o", "show", "node", NODE))
    return node.state, node.reason


def resume_if_drained() -> None:
    state, _ = node_state()
    if "DRAIN" in state:
        slurm("scontrol", "update", f"NodeName={NODE}", "State=RESUME")


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The test cluster with its node resumed before and after (the drain tests drain it)."""
    slurm_cluster.cancel_all()
    resume_if_drained()
    try:
        yield slurm_cluster
    finally:
        resume_if_drained()
        slurm_cluster.cancel_all()
