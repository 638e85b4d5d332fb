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
