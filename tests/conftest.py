"""Shared fixtures: a temporary gpupool home and the real-data samples in ../shared."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.paths import REPO_ROOT
from pipelines.warehouse import Warehouse

REAL_DATA = (REPO_ROOT.parent / "shared" / "real-data").resolve()


@pytest.fixture
def real_data() -> Path:
    if not REAL_DATA.exists():
        pytest.fail(f"real-data samples not found at {REAL_DATA}: the tests expect ../shared beside the repository")
    return REAL_DATA


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "gpupool")
