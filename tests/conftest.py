"""Shared fixtures: a temporary gpupool home and the real-data samples in tests/fixtures/real-data."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

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
