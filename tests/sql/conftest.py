"""A small demo warehouse shared by the SQL-access tests (a copy of the test run's 3-day, 64-GPU demo)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import copy_home


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory: pytest.TempPathFactory, small_demo_home: Path) -> Path:
    return copy_home(small_demo_home, tmp_path_factory.mktemp("sql_demo") / "gpupool")
