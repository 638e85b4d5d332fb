"""The enforcement ledger shared by every engine (SQLite, WAL), opened by many appliers at once."""
from __future__ import annotations

from pipelines.enforcement.base import ActionLedger
from tests.concurrency import race


def test_appliers_opening_a_new_ledger_at_the_same_moment_all_succeed(tmp_path):
    """Switching a fresh file to WAL takes an exclusive lock that SQLite's busy timeout does not cover;
    CI hung once when one of six appliers failed to open the ledger."""
    for round_ in range(20):
        path = tmp_path / f"r{round_}" / "ledger.db"
        modes = race(lambda path=path: (lambda: ActionLedger(path, tmp_path / "landing", "slurm")._db.execute(
            "pragma journal_mode").fetchone()[0]), 8)
        assert modes == ["wal"] * 8
