"""Model tests start from a home whose models were built once per test run, on no data: their own
build then rebuilds the tables and re-creates no view (the views exist and did not change). The
ordering tests share one simulated pool's landing files, replayed (tests/models/replay.py)."""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.warehouse import Warehouse
from tests.models.replay import Replays, simulate_landing


@pytest.fixture
def warehouse(tmp_path: Path, built_empty_home: Path) -> Warehouse:
    """A copy of the built empty home, without its last-build time: the test's data is then all new,
    and the day-by-day marts rebuild every day of it."""
    home = tmp_path / "gpupool"
    shutil.copytree(built_empty_home, home, ignore=shutil.ignore_patterns("last-build", "logs", "target"))
    return Warehouse(home)


@pytest.fixture(scope="session")
def replays(tmp_path_factory: pytest.TempPathFactory, built_empty_home: Path) -> Iterator[Replays]:
    """The simulated pool's landing files, replayed in the orderings tests ask for (tests/models/replay.py),
    once per test run: the homes and full refreshes they reach are shared."""
    root = tmp_path_factory.mktemp("replays")
    simulate_landing(root / "landing")
    replays = Replays(root, root / "landing", built_empty_home)
    yield replays
    replays.forget()
