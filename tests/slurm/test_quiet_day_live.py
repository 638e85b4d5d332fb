"""`gpupool land slurm` on a day the real test cluster ran no job (2020-01-01, years before it started):
sacct answers its header alone, sacct --json "Nothing found", sacctmgr its header. That is a quiet day:
it lands, loads nothing, exits 0 and rebuilds the models, as cron needs (issue 33)."""
from __future__ import annotations

import os
import subprocess
import sys

import yaml

from pipelines.cli.common import EXIT_OK
from pipelines.paths import REPO_ROOT
from tests.conftest import copy_home

DAY = "2020-01-01"


def test_a_day_without_jobs_lands_exits_0_and_rebuilds(slurm_cluster, built_empty_home, tmp_path):
    home = copy_home(built_empty_home, tmp_path / "home")
    config = tmp_path / "gpupool.yml"
    config.write_text(yaml.safe_dump({"slurm": {"accounting": ["sacct", "sacct_json", "transactions"]}}))
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "land", "slurm", "--date", DAY, "--home", str(home)],
        capture_output=True, text=True, check=False, timeout=900, cwd=REPO_ROOT,  # this checkout's code
        env={**os.environ, "GPUPOOL_CONFIG": str(config)},
    )
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_OK, output
    landed = sorted(p.relative_to(home / "landing").as_posix() for p in (home / "landing").rglob("*") if p.is_file())
    assert landed == [f"slurm_sacct/{DAY}/sacct.txt", f"slurm_sacct_json/{DAY}/sacct.json",
                      f"slurm_sacctmgr/{DAY}/transactions.txt"]
    assert "no job in the answer: a quiet day" in output
    assert "0 loaded" in output and "checks failed" not in output
    assert "build models" in output  # the rebuild ran
