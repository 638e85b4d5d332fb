"""The per-minute marts' day files: what reads them, their modes, and deleting the ones nothing reads.

The per-minute marts (fct_gpu_activity, fct_host_activity, fct_allocation_activity) are Parquet files
under <home>/lake/marts/<model>/, one or more per day, written by the build
(models/macros/day_files.sql); a warehouse file lists the files its views read in MART_FILES, by
path relative to the home. A build writes new files and never rewrites one, so every release keeps
reading the files its own list names, and a publish copies the list, not the rows.

A file no list names any more (its day was rebuilt, the release that read it expired, or the build
that wrote it failed) is deleted by `sweep` once it has gone unread for the vacuum's hours
(GPUPOOL_LAKE_VACUUM_HOURS, as the Delta vacuum): a reader that opened a release just before it
expired can still finish its query. When a file was first seen unread is kept in UNREAD_STATE.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

import duckdb

from allocator.filemodes import READER_DIR_MODE, READER_MODE, write_atomic

MARTS_FOLDER = Path("lake") / "marts"  # relative to the home
MART_FILES = "ops.mart_files"
RELEASE_CHUNKS = "ops.release_chunks"  # a release's Parquet chunks (pipelines/lake/release_chunks.py)
UNREAD_STATE = ".unread.json"  # in MARTS_FOLDER: file -> when a sweep first found no list naming it


def marts_dir(home: Path) -> Path:
    return Path(home) / MARTS_FOLDER


def listed_files(db_path: Path) -> set[str]:
    """The day files a warehouse file's views read, and a release's chunks (pipelines/lake/release_chunks.py),
    by paths relative to the home; none for a file from before day files. A file that cannot be opened
    raises: a sweep never deletes on a guess."""
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        present = {f"ops.{name}" for (name,) in con.execute(
            "select table_name from information_schema.tables where table_schema = 'ops'").fetchall()}
        return {path for table in (MART_FILES, RELEASE_CHUNKS) if table in present
                for (path,) in con.execute(f"select path from {table}").fetchall()}
    finally:
        con.close()


def settle_modes(home: Path) -> None:
    """Readers of other accounts read the day files as they read the lake's: DuckDB creates them with
    the umask's modes."""
    root = marts_dir(home)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            _chmod(Path(folder) / name, READER_DIR_MODE)
        for name in files:
            if name.endswith(".parquet"):
                _chmod(Path(folder) / name, READER_MODE)


def _chmod(path: Path, mode: int) -> None:
    if path.stat().st_mode & 0o7777 != mode:
        path.chmod(mode)


@dataclass(frozen=True)
class Swept:
    files: int
    bytes: int


def sweep(home: Path, listing_files: list[Path], retention_hours: int, now: dt.datetime,
          dry_run: bool = False) -> Swept:
    """Delete the day files that no warehouse file of `listing_files` (the writers' file and every
    kept release) names and that have gone unread for `retention_hours` since a sweep first saw
    them so. The caller holds the publish and writers' locks: no build or publish is in flight."""
    root = marts_dir(home)
    if not root.exists():
        return Swept(0, 0)
    listed: set[str] = set()
    for path in listing_files:
        listed |= listed_files(path)
    state_path = root / UNREAD_STATE
    unread_since = json.loads(state_path.read_text()) if state_path.exists() else {}
    present = {p.relative_to(home).as_posix(): p for p in root.rglob("*.parquet")}
    still = {}
    files = size = 0
    for name, path in sorted(present.items()):
        if name in listed:
            continue
        since = dt.datetime.fromisoformat(unread_since.get(name, now.isoformat()))
        if now - since >= dt.timedelta(hours=retention_hours):
            files += 1
            size += path.stat().st_size
            if not dry_run:
                path.unlink(missing_ok=True)
            continue
        still[name] = since.isoformat()
    if not dry_run:
        for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
            if not any(folder.iterdir()):
                folder.rmdir()
        write_atomic(state_path, json.dumps(still, sort_keys=True), READER_MODE)
    return Swept(files, size)
