"""Find, and repair, records an earlier allocator logged that are not clean JSON.

Before the API refused them (issue 11), a lone UTF-16 surrogate in a job name or reason (JSON
"\\ud800") or a NaN/Infinity in an action's evidence or a quota could be committed. The service
serves such a store (it replays the log as written and escapes what it answers), so a repair is
optional; it makes what is stored match what is answered.

`find_unclean` lists every row of the command log (payload and answer), the event and audit
records and the snapshot that holds such a value. `repair` rewrites them in one transaction: lone
surrogates become the six characters "\\ud800" (what the API answers), non-finite numbers null,
except in command payloads outside an action's `evidence`, where the engine reads the number
(a quota of Infinity): those are reported and left as logged. The snapshot is never rewritten (it
holds the engine's numbers): it is dropped when it or any command payload was unclean, so the next
start rebuilds the engine from the (repaired) log. Run it with
the service stopped (it takes the store's lock, as the service does).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator.inputs import json_problem, scrub
from allocator.store import _own

# (table, key column, JSON column)
_COLUMNS = (
    ("commands", "seq", "payload"),
    ("commands", "seq", "result"),
    ("events", "seq", "record"),
    ("audit", "seq", "record"),
    ("snapshots", "command_seq", "state"),
)


@dataclass(frozen=True)
class Unclean:
    table: str
    column: str
    key: int
    problem: str
    repairable: bool = True  # False: a number the engine reads, left as logged

    def __str__(self) -> str:
        left = "" if self.repairable else " (left as logged: the engine reads this number)"
        return f"{self.table}.{self.column} {self.key}: {self.problem}{left}"


def _escape_strings(value: Any) -> Any:
    """Lone surrogates escaped; numbers kept (a command payload outside its evidence)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(k): (scrub(v) if k == "evidence" else _escape_strings(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_strings(v) for v in value]
    return value


def _repaired(column: str, value: Any) -> Any:
    return _escape_strings(value) if column == "payload" else scrub(value)


def _rows(db: sqlite3.Connection):
    for table, key, column in _COLUMNS:
        for row_key, text in db.execute(f"select {key}, {column} from {table} order by {key}"):
            value = json.loads(text)
            problem = json_problem(value, max_depth=10**6)
            if problem:
                yield table, column, row_key, value, problem


def find_unclean(db_path: Path | str) -> list[Unclean]:
    """Every stored JSON value that holds a lone surrogate or a non-finite number."""
    with sqlite3.connect(f"file:{Path(db_path)}?mode=ro", uri=True) as db:
        found = []
        for table, column, key, value, problem in _rows(db):
            left = None if table == "snapshots" else json_problem(_repaired(column, value), max_depth=10**6)
            found.append(Unclean(table, column, key, problem, repairable=left is None))
        return found


def repair(db_path: Path | str) -> list[Unclean]:
    """Rewrite what `find_unclean` finds (see the module's docstring); returns what it found."""
    path = Path(db_path)
    owner = _own(path)  # StoreError if a service holds the store
    try:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            db.execute("begin immediate")
            found, drop_snapshots = [], False
            for table, column, key, value, problem in list(_rows(db)):
                if table == "snapshots":  # the engine's numbers: not rewritten, rebuilt from the log
                    found.append(Unclean(table, column, key, problem))
                    drop_snapshots = True
                    continue
                fixed = _repaired(column, value)
                found.append(Unclean(table, column, key, problem, json_problem(fixed, max_depth=10**6) is None))
                db.execute(f"update {table} set {column} = ? where seq = ?", (json.dumps(fixed), key))
                drop_snapshots |= column == "payload"
            if drop_snapshots:
                db.execute("delete from snapshots")  # the next start replays the repaired log
            db.execute("commit")
        except BaseException:
            if db.in_transaction:
                db.execute("rollback")
            raise
        finally:
            db.close()
    finally:
        owner.close()
    return found
