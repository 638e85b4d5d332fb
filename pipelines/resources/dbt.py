"""The dbt project in models/ for Dagster: its manifest, and the dbt CLI resource that builds it.

The manifest (models/target/manifest.json) is written by `dbt parse` at set-up (scripts/setup.sh)
and in CI. Loading the code location parses the project again only when the manifest is missing
(a fresh clone) or older than a file of models/ (an edited model shows at the next reload);
parsing reads models/ alone and needs neither the network nor the warehouse.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dagster._utils import run_with_concurrent_update_guard
from dagster_dbt import DbtCliResource, DbtProject

from pipelines.build import prepared_manifest_is_current
from pipelines.paths import MODELS_DIR

# The dbt of this Python's environment: the code location may run without the venv on PATH.
DBT_EXECUTABLE = str(Path(sys.executable).parent / "dbt")

dbt_project = DbtProject(project_dir=MODELS_DIR, profiles_dir=MODELS_DIR)


def parse(project: DbtProject = dbt_project) -> None:
    """`dbt parse`: write the project's manifest.json; raises RuntimeError with dbt's output."""
    done = subprocess.run(
        [DBT_EXECUTABLE, "parse", "--quiet", "--project-dir", str(project.project_dir),
         "--profiles-dir", str(project.profiles_dir), "--target-path", str(project.manifest_path.parent)],
        check=False, capture_output=True, text=True,
        env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"},  # no network at load
    )
    if done.returncode:
        raise RuntimeError(f"dbt parse of {project.project_dir} failed:\n{done.stdout}{done.stderr}")


def is_stale(project: DbtProject = dbt_project) -> bool:
    """No manifest, or a file of the project (outside target/ and logs/) changed after it."""
    return not prepared_manifest_is_current(Path(project.project_dir))


def prepared_project() -> DbtProject:
    """The project with an up-to-date manifest: parsed now if it has none or is stale."""
    if is_stale(dbt_project):
        dbt_project.manifest_path.parent.mkdir(parents=True, exist_ok=True)
        run_with_concurrent_update_guard(dbt_project.manifest_path, parse, project=dbt_project)
    return dbt_project


def dbt_resource() -> DbtCliResource:
    """The dbt CLI over models/, with this environment's dbt."""
    return DbtCliResource(project_dir=dbt_project, dbt_executable=DBT_EXECUTABLE)
