"""The release registry: which Delta version of every table belongs together.

Why: Delta commits one table at a time, and a build publishes about 30 marts. Readers must never
see half a build, so they do not read "each table's latest version" but a release: one row that
maps every table to the version it had when an ingest or a build finished. Packs and capacity
recommendations store the release id they read, so they can be read again (`--as-of RELEASE`).

The registry is a SQL table, in one of two databases behind the same class and the same queries:
- SQLite (stdlib, a file under the lake root, WAL so readers never wait on a writer, a busy
  timeout so two writers queue instead of failing): the embedded default, one file per home.
- PostgreSQL (psycopg 3), for a many-machine setup: `ReleaseRegistry.from_url("postgresql://...")`,
  or GPUPOOL_CATALOG_URL for a whole home (`registry_for`). Writers never queue on a lock:
  the identity column hands each insert its own id.
The only dialect-specific pieces are the connection, the parameter marker (`?` for sqlite3, `%s`
for psycopg: see `_sql`) and the DDL (`integer primary key` vs `generated always as identity`);
the queries use what both accept (`insert ... returning`, no dialect-only functions).

Several homes may share one PostgreSQL database: every row carries its `home` (text), and every
query is scoped to the registry's own, so their releases never mix (a column rather than a schema
per home, so that the SQL stays the same in SQLite, where `home` is '' and the file is the scope).
`registry_for` names a home by GPUPOOL_CATALOG_HOME, else by its lake root's absolute path: set
GPUPOOL_CATALOG_HOME when a home moves, or when two machines hold different homes at the same path.
Release ids are unique across homes (one identity), not numbered per home.
"""
from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from allocator.filemodes import PRIVATE_MODE, READER_DIR_MODE, create_file, make_dirs
from pipelines.clock import utc_naive
from pipelines.lake.tables import LakeError

DEFAULT_FILE = "releases.sqlite3"
BUSY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10  # PostgreSQL: an unreachable host fails in seconds, not minutes
CATALOG_URL_ENV = "GPUPOOL_CATALOG_URL"
CATALOG_HOME_ENV = "GPUPOOL_CATALOG_HOME"
POSTGRES_SCHEMES = ("postgresql", "postgres")
# PostgreSQL: two processes creating the table at once would collide in the system catalogs, so
# the DDL runs under this transaction-scoped advisory lock (any constant unique to this use)
DDL_LOCK = 0x67707570  # "gpup"

COLUMNS = "release_id, created_at, kind, note, tables"
SCHEMA = {
    "sqlite": """
create table if not exists releases (
    release_id integer primary key,
    home text not null default '',
    created_at timestamp not null,
    kind text not null,
    note text,
    tables text not null
)""",
    "postgresql": """
create table if not exists releases (
    release_id bigint generated always as identity primary key,
    home text not null default '',
    created_at timestamp not null,
    kind text not null,
    note text,
    tables text not null
)""",
}
INDEX = "create index if not exists releases_by_home on releases (home, release_id)"


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


def _parse_location(location: Path | str) -> tuple[str, Path | str]:
    """(dialect, target): a path or `sqlite:///path` is ("sqlite", the file); `postgresql://...` is
    ("postgresql", the URL). `sqlite:` follows SQLAlchemy: `sqlite:///relative`, `sqlite:////absolute`."""
    if isinstance(location, Path) or "://" not in location:
        return "sqlite", Path(location)
    scheme, _, rest = location.partition("://")
    if scheme.lower() == "sqlite" and rest.startswith("/") and len(rest) > 1:
        return "sqlite", Path(rest[1:])
    if scheme.lower() in POSTGRES_SCHEMES:
        return "postgresql", location
    raise LakeError(f"release catalog {_redacted(location)!r}: expected a file path, sqlite:///path or "
                    f"postgresql://user:password@host:port/database")


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class ReleaseRegistry:
    """The releases of one home, in a SQLite file (default: `<lake root>/releases.sqlite3`) or in a
    PostgreSQL database that several homes may share (`from_url`, `registry_for`)."""

    def __init__(self, location: Path | str, home: str = "") -> None:
        """`location`: a SQLite file (a path, or `sqlite:///path`) or a `postgresql://` URL. `home`: the
        namespace of this home's releases where several homes share the database."""
        self.dialect, self._target = _parse_location(location)
        self.home = home
        self.paramstyle = "?" if self.dialect == "sqlite" else "%s"
        shown = str(self._target) if self.dialect == "sqlite" else _redacted(str(self._target))
        self.where = f"{shown} (home {home!r})" if home else shown
        if self.dialect == "postgresql":
            with self._connect() as con:
                con.execute("select pg_advisory_xact_lock(%s)", (DDL_LOCK,))
                con.execute(SCHEMA["postgresql"])
                con.execute(INDEX)
            return
        path = Path(self._target)
        make_dirs(path.parent, READER_DIR_MODE)  # the lake's folder: readers read its Parquet files
        create_file(path, PRIVATE_MODE)  # the registry is the publisher's state; SQLite gives -wal, -shm its mode
        con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:  # WAL is a property of the file: set once, outside any transaction
            con.execute("pragma journal_mode=wal")
            con.execute(SCHEMA["sqlite"])
            con.execute(INDEX)
        finally:
            con.close()

    @classmethod
    def under(cls, lake_root: Path) -> ReleaseRegistry:
        return cls(Path(lake_root) / DEFAULT_FILE)

    @classmethod
    def from_url(cls, url: str, home: str = "") -> ReleaseRegistry:
        """From configuration text (GPUPOOL_CATALOG_URL): a file path, `sqlite:///path` or `postgresql://...`."""
        return cls(url, home)

    @contextmanager
    def _connect(self, write: bool = False) -> Iterator[Any]:
        """One connection per call, one transaction per `with`: committed on success, rolled back on
        an error. Nothing is held open between calls. In SQLite a write takes the write lock at once
        (`begin immediate`), so two writers queue on the busy timeout instead of failing mid-transaction;
        PostgreSQL needs no lock (the identity column serialises only the id)."""
        if self.dialect == "postgresql":
            import psycopg  # here: only a PostgreSQL catalog needs the driver

            try:
                con = psycopg.connect(str(self._target), connect_timeout=CONNECT_TIMEOUT_S)
            except psycopg.OperationalError as error:
                reason = " ".join(str(error).split())  # libpq's message spans lines
                raise LakeError(f"cannot connect to the release catalog {self.where} ({reason}): is the server up "
                                f"(scripts/postgres-up.sh starts a local one) and {CATALOG_URL_ENV} right?") from error
            with con:  # psycopg: commit on success, rollback on an error, then close
                yield con
            return
        con = sqlite3.connect(self._target, timeout=BUSY_TIMEOUT_S, isolation_level=None)
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
        created_at = utc_naive().isoformat(sep=" ")  # text: sqlite3 stores it as is, PostgreSQL casts it
        with self._connect(write=True) as con:
            (release_id,) = con.execute(
                self._sql("insert into releases (home, created_at, kind, note, tables) values (?, ?, ?, ?, ?) "
                          "returning release_id"),
                (self.home, created_at, kind, note, tables)).fetchone()
        return int(release_id)

    def latest(self) -> Release | None:
        with self._connect() as con:
            row = con.execute(self._sql(f"select {COLUMNS} from releases where home = ? "
                                        "order by release_id desc limit 1"), (self.home,)).fetchone()
        return self._release(row) if row else None

    def get(self, release_id: int) -> Release:
        with self._connect() as con:
            row = con.execute(self._sql(f"select {COLUMNS} from releases where home = ? and release_id = ?"),
                              (self.home, int(release_id))).fetchone()
        if row is None:
            raise ReleaseNotFound(f"release {release_id} not found in {self.where}")
        return self._release(row)

    def list(self, limit: int = 20) -> list[Release]:
        """The newest `limit` releases, newest first."""
        with self._connect() as con:
            rows = con.execute(self._sql(f"select {COLUMNS} from releases where home = ? "
                                         "order by release_id desc limit ?"), (self.home, int(limit))).fetchall()
        return [self._release(row) for row in rows]


def registry_for(lake_root: Path) -> ReleaseRegistry:
    """The registry of the home whose lake is at `lake_root`: in the database GPUPOOL_CATALOG_URL names
    (for the whole home), scoped to GPUPOOL_CATALOG_HOME or else the lake root's absolute path; without
    GPUPOOL_CATALOG_URL, the SQLite file under the lake root."""
    url = os.environ.get(CATALOG_URL_ENV)
    if not url:
        return ReleaseRegistry.under(lake_root)
    return ReleaseRegistry.from_url(url, os.environ.get(CATALOG_HOME_ENV) or str(Path(lake_root).resolve()))
