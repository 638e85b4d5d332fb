"""The release registry on a real SQLite file."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.lake.releases import ReleaseNotFound, ReleaseRegistry
from pipelines.lake.tables import LakeError
from tests.lake.helpers import record_latest_get_list


def test_record_latest_get_list(tmp_path: Path) -> None:
    record_latest_get_list(ReleaseRegistry.under(tmp_path / "lake"),
                           reopen=lambda: ReleaseRegistry.under(tmp_path / "lake"))


def test_a_missing_release_names_its_id(tmp_path: Path) -> None:
    registry = ReleaseRegistry.under(tmp_path / "lake")
    registry.record("ingest", None, {"raw.samples": 0})
    with pytest.raises(ReleaseNotFound, match="release 42 not found"):
        registry.get(42)


def test_bad_versions_are_refused(tmp_path: Path) -> None:
    registry = ReleaseRegistry.under(tmp_path / "lake")
    with pytest.raises(LakeError, match="samples"):
        registry.record("ingest", None, {"samples": 1})
    with pytest.raises(LakeError, match="-1"):
        registry.record("ingest", None, {"raw.samples": -1})
    assert registry.latest() is None
