"""Shared fixtures: a temporary gpupool home, homes built once per test run (on no data, and a small
demo month), and the real-data samples in tests/fixtures/real-data."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from pipelines.build import build
from pipelines.warehouse import Warehouse

REAL_DATA = Path(__file__).parent / "fixtures" / "real-data"  # public samples, with their PROVENANCE.md

# Property-based tests: "ci" is reproducible (the same examples every run, no example database);
# "dev" explores new examples each run and replays failures from .hypothesis/. CI=1 selects "ci";
# HYPOTHESIS_PROFILE overrides. Tests set their own max_examples.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

# Tests that share one live system or one costly session fixture run on one pytest-xdist worker
# (make test runs `-n auto`), one after another: the Slurm tests submit, drain and cancel on the one
# cluster scripts/slurm-up.sh starts; the ordering tests share the homes `replays` keeps. Every other
# test file goes whole to whichever worker is free, so a module's fixtures are built once. (A
# scheduler of our own, not xdist's `loadgroup`: that one renames node ids, which pytest 9 no longer
# lets a plugin do.)
SHARED = {"tests/slurm/": "slurm", "tests/models/test_build_orderings.py": "replays",
          "tests/models/test_late_data.py": "replays"}


def shared_group(nodeid: str) -> str | None:
    return next((group for prefix, group in SHARED.items() if nodeid.startswith(prefix)), None)


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs the suite in one process without this hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedSystemsScheduling(LoadScopeScheduling):
        """xdist's load-by-scope, where a scope is a group of SHARED or else one test file."""

        def _split_scope(self, nodeid: str) -> str:
            return shared_group(nodeid) or nodeid.split("::", 1)[0]

    return SharedSystemsScheduling(config, log)


@pytest.fixture
def real_data() -> Path:
    if not REAL_DATA.exists():
        pytest.fail(f"real-data samples not found at {REAL_DATA}")
    return REAL_DATA


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "gpupool")


@pytest.fixture(scope="session")
def built_empty_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with every model built on no data, once per test run. Read it as it is, or copy it."""
    home = tmp_path_factory.mktemp("built-empty") / "gpupool"
    build(Warehouse(home))
    return home


@pytest.fixture(scope="session")
def small_demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`gpupool demo` for 3 days of a 64-GPU pool with the idle-reclaim policies acting, no baseline
    (~20 s), once per test run. Tests that write to a home take a copy (copy_home)."""
    home = tmp_path_factory.mktemp("small-demo") / "gpupool"
    subprocess.run([str(Path(sys.executable).parent / "gpupool"), "demo", "--days", "3", "--gpus", "64",
                    "--no-baseline", "--home", str(home)], check=True, capture_output=True)
    return home


def copy_home(home: Path, to: Path) -> Path:
    """A copy of a built home (no process may be writing it), at `to`. Its first writer points the lake's
    views (raw.dcgm_samples) at the copy's own lake, as after an operator moves a home."""
    shutil.copytree(home, to)
    with Warehouse(to).writer():
        pass
    return to
