"""Model tests start from a home whose models were built once per test run, on no data: their own
build then rebuilds the tables and re-creates no view (the views exist and did not change)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipelines.warehouse import Warehouse


@pytest.fixture
def warehouse(tmp_path: Path, built_empty_home: Path) -> Warehouse:
    """A copy of the built empty home, without its last-build time: the test's data is then all new,
    and the day-by-day marts rebuild every day of it."""
    home = tmp_path / "gpupool"
    shutil.copytree(built_empty_home, home, ignore=shutil.ignore_patterns("last-build", "logs", "target"))
    return Warehouse(home)
