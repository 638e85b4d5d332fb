"""Checks the lake tests run on more than one backend."""
from __future__ import annotations

import pytest

from pipelines.lake.releases import Release, ReleaseRegistry


def record_latest_get_list(registry: ReleaseRegistry, reopen) -> None:
    """The registry's contract, on any backend (tests/lake/test_releases.py on SQLite, test_registry_postgres.py
    on PostgreSQL)."""
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
