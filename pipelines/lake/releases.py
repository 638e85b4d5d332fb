"""The release registry: which Delta version of every table belongs together.

Why: Delta commits one table at a time, and a build publishes about 30 marts. Readers must never
see half a build, so they do not read "each table's latest version" but a release: one row that
maps every table to the version it had when an ingest or a build finished. Packs and capacity
recommendations store the release id they read, so they can be read again (`--as-of RELEASE`).

The registry is a SQL table. SQLite (stdlib, a file under the lake root, WAL so readers never wait
on a writer, a busy timeout so two writers queue instead of failing) is the embedded default; the
SQL is kept to what PostgreSQL accepts too (`insert ... returning`, no SQLite-only functions), so a
many-machine setup can point the same class at PostgreSQL later. The only dialect-specific pieces
are the connection and the parameter marker (`?` here, `%s` for psycopg): see `_sql`.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pipelines.lake.tables import LakeError

DEFAULT_FILE = "releases.sqlite3"
BUSY_TIMEOUT_S = 30.0

SCHEMA = """
create table if not exists releases (
    release_id integer primary key,
    created_at timestamp not null,
    kind text not null,
    note text,
    tables text not null
)
"""


class ReleaseNotFound(LakeError, KeyError):
    """No release with that id in the registry."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Release:
    """One consistent state of the lake: each table name ("schema.table") at a Delta version."""
    release_id: int
    created_at: datetime  # naive UTC, as every timestamp in the project
    kind: str  # "ingest", "build", ...
    note: str | None
    tables: dict[str, int] = field(hash=False)


def _utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class ReleaseRegistry:
    """Releases in a SQLite file (default: `<lake root>/releases.sqlite3`)."""

    paramstyle = "?"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:  # WAL is a property of the file: set once, outside any transaction
            con.execute("pragma journal_mode=wal")
            con.execute(SCHEMA)
        finally:
            con.close()

    @classmethod
    def under(cls, lake_root: Path) -> ReleaseRegistry:
        return cls(Path(lake_root) / DEFAULT_FILE)

    @contextmanager
    def _connect(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """One connection per call, one transaction per `with`: committed on success, rolled back on
        an error. A write takes the write lock at once (`begin immediate`), so two writers queue on
        the busy timeout instead of failing mid-transaction. Nothing is held open between calls."""
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            con.execute(f"pragma busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            con.execute("begin immediate" if write else "begin")
            yield con
            con.execute("commit")
        except BaseException:
            if con.in_transaction:
                con.execute("rollback")
            raise
        finally:
            con.close()

    def _sql(self, text: str) -> str:
        return text.replace("?", self.paramstyle) if self.paramstyle != "?" else text

    @staticmethod
    def _release(row: tuple) -> Release:
        release_id, created_at, kind, note, tables = row
        return Release(release_id=int(release_id), created_at=datetime.fromisoformat(str(created_at)),
                       kind=kind, note=note, tables=json.loads(tables))

    def record(self, kind: str, note: str | None, versions: dict[str, int]) -> int:
        """Record a release (one transaction) and return its id. Versions are Delta versions, >= 0."""
        for name, version in versions.items():
            if "." not in name or not isinstance(version, int) or isinstance(version, bool) or version < 0:
                raise LakeError(f"release: {name!r} -> {version!r}: expected 'schema.table' -> a version >= 0")
        tables = json.dumps(dict(sorted(versions.items())))
        created_at = _utc_now().isoformat(sep=" ")
        with self._connect(write=True) as con:
            (release_id,) = con.execute(
                self._sql("insert into releases (created_at, kind, note, tables) values (?, ?, ?, ?) "
                          "returning release_id"),
                (created_at, kind, note, tables)).fetchone()
        return int(release_id)

    def latest(self) -> Release | None:
        with self._connect() as con:
            row = con.execute("select release_id, created_at, kind, note, tables from releases "
                              "order by release_id desc limit 1").fetchone()
        return self._release(row) if row else None

    def get(self, release_id: int) -> Release:
        with self._connect() as con:
            row = con.execute(self._sql("select release_id, created_at, kind, note, tables from releases "
                                        "where release_id = ?"), (int(release_id),)).fetchone()
        if row is None:
            raise ReleaseNotFound(f"release {release_id} not found in {self.path}")
        return self._release(row)

    def list(self, limit: int = 20) -> list[Release]:
        """The newest `limit` releases, newest first."""
        with self._connect() as con:
            rows = con.execute(self._sql("select release_id, created_at, kind, note, tables from releases "
                                         "order by release_id desc limit ?"), (int(limit),)).fetchall()
        return [self._release(row) for row in rows]
