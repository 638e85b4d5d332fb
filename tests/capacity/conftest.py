"""A small month through the whole pipeline, shared by the replay and recommendation tests."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`gpupool demo` for 3 days of a 64-GPU pool with the idle-reclaim policies acting (~25 s)."""
    home = tmp_path_factory.mktemp("whatif")
    gpupool = Path(sys.executable).parent / "gpupool"
    subprocess.run([str(gpupool), "demo", "--days", "3", "--gpus", "64", "--no-baseline", "--home", str(home)],
                   check=True, capture_output=True)
    return home
