"""The release registry on a real SQLite file."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.lake.releases import Release, ReleaseNotFound, ReleaseRegistry
from pipelines.lake.tables import LakeError


def test_record_latest_get_list(tmp_path: Path) -> None:
    record_latest_get_list(ReleaseRegistry.under(tmp_path / "lake"),
                           reopen=lambda: ReleaseRegistry.under(tmp_path / "lake"))


def record_latest_get_list(registry: ReleaseRegistry, reopen) -> None:
    """The registry's contract, on any backend (tests/lake/test_registry_postgres.py runs it on PostgreSQL)."""
    assert registry.latest() is None and registry.list() == []
    first = registry.record("ingest", "day 2026-11-01", {"raw.samples": 3})
    second = registry.record("build", None, {"mart.a": 0, "raw.samples": 4})
    assert second > first
    latest = registry.latest()
    assert isinstance(latest, Release)
    assert (latest.release_id, latest.kind, latest.note, latest.tables) == (second, "build", None,
                                                                             {"mart.a": 0, "raw.samples": 4})
    assert latest.created_at.tzinfo is None
    assert registry.get(first).tables == {"raw.samples": 3}
    assert [r.release_id for r in registry.list(limit=1)] == [second]
    assert [r.release_id for r in reopen().list()] == [second, first]
    with pytest.raises(AttributeError):
        latest.kind = "other"  # frozen


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
