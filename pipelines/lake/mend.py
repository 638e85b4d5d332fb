"""Releases published before the lake's files were named relative to the home, mended on the first publish
after the upgrade (Warehouse.publish)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Protocol

import duckdb

from allocator.filemodes import READER_MODE, copy_file, write_atomic
from pipelines.contracts import LAKE_TABLES, contract
from pipelines.lake.reader import search_config
from pipelines.lake.tables import DeltaStore

RELATIVE_MARK = ".relative"  # in releases/: every kept release names its lake files relative to the home


class Warehouse(Protocol):
    """What the mend reads of pipelines.warehouse.Warehouse (which imports this module)."""

    home: Path
    db_path: Path
    releases: Path
    store: DeltaStore

    def current_release(self) -> int | None: ...

    def kept_releases(self) -> list[int]: ...

    def release_path(self, release_id: int, must_exist: bool = True) -> Path: ...


def mend_releases(warehouse: Warehouse) -> None:
    """Releases published before the lake's files were named relative to the home name them by the
    folder the home was in then: moved, the home could not read them. On the first publish after
    the upgrade (under the publish lock), each such kept release gets its lake views re-created
    with relative names, on a copy renamed over it (a reader keeps the file it has open), and
    RELATIVE_MARK records that every kept release is mended."""
    mark = warehouse.releases / RELATIVE_MARK
    if mark.exists() or not warehouse.releases.exists():
        return
    current = warehouse.current_release()
    for release_id in warehouse.kept_releases():
        path = warehouse.release_path(release_id)
        with duckdb.connect(str(path), read_only=True) as con:
            locations = con.execute("select location from ops.lake_versions where location like '/%'").fetchall()
            views = con.execute("select sql from duckdb_views() where not internal and schema_name = 'raw'"
                                ).fetchall()
        # where the home was: a table's recorded folder less the table's place in a home
        prefixes = {location.removesuffix(str(warehouse.store.path(table).relative_to(warehouse.home))) for table, location
                    in ((_table_of(warehouse, loc), loc) for (loc,) in locations) if table}
        statements = [sql for (sql,) in views if any(f"'{prefix}" in sql for prefix in prefixes)]
        if not statements:
            continue
        copy = warehouse.releases / f".{uuid.uuid4().hex}.tmp"
        try:
            copy_file(path, copy, READER_MODE)
            with duckdb.connect(str(copy), config=search_config(warehouse.home)) as con:  # a view binds its files
                for sql in statements:
                    for prefix in prefixes:
                        sql = sql.replace(f"'{prefix}", "'")
                    con.execute(sql.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
                con.execute("checkpoint")
            os.replace(copy, path)
        finally:
            copy.unlink(missing_ok=True)
        if release_id == current:
            link = warehouse.home / f".warehouse.duckdb.{uuid.uuid4().hex}.tmp"
            os.link(path, link)
            os.replace(link, warehouse.db_path)
    write_atomic(mark, "every kept release names its lake files relative to the home\n", READER_MODE)

def _table_of(warehouse: Warehouse, location: str) -> str | None:
    """The lake table whose folder, in some home, `location` is (None: not one of ours)."""
    for name in LAKE_TABLES:
        table = contract(name).table
        if location.endswith("/" + str(warehouse.store.path(table).relative_to(warehouse.home))):
            return table
    return None
