"""A small month through the whole pipeline, shared by the replay and recommendation tests."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import copy_home


@pytest.fixture(scope="session")
def home(tmp_path_factory: pytest.TempPathFactory, small_demo_home: Path) -> Path:
    """A copy of the small demo month (3 days, 64 GPUs, the idle-reclaim policies acting)."""
    return copy_home(small_demo_home, tmp_path_factory.mktemp("whatif") / "gpupool")
