"""The modes of the files gpupool writes, whatever the umask it was started with (issue 26, finding 7).

Readers' files (the published warehouse.duckdb, releases/<id>.duckdb, latest.json, the lake's
Parquet files, packs, exports) are READER_MODE: everyone may read, only the owner writes. State
(the writers' database, the governance outbox, the allocator's store and their SQLite -wal/-shm,
the release registry, lock files) is PRIVATE_MODE. Folders likewise: READER_DIR_MODE where readers
go, PRIVATE_DIR_MODE around state. A mode is set on the file before it holds data or is renamed
into place, so there is no moment where another user could write it.

Files that libraries create (delta-rs' commit log, dbt's logs and target, DuckDB's spill) take the
process umask: every entry point (`gpupool`, `python -m allocator`, the Dagster code location)
calls `restrict_umask`, so none of them is writable by group or others either.

This module lives in the allocator because the allocator never imports the pipeline, while the
pipeline reads the allocator's shared vocabulary (allocator.model, allocator.records): one home
for both.
"""
from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

READER_MODE = 0o644  # files readers open: the owner writes, everyone reads
PRIVATE_MODE = 0o600  # state and writers' files: the owner only
READER_DIR_MODE = 0o755
PRIVATE_DIR_MODE = 0o700
OTHERS_WRITE = 0o022  # group's and others' write bits: never on what gpupool writes or trusts
UMASK_FLOOR = OTHERS_WRITE  # bits every entry point adds to its umask


def restrict_umask() -> int:
    """Add UMASK_FLOOR to this process's umask (a stricter umask stays as it is); returns the new umask.
    Call once at a process's start, before threads: the umask is process-wide."""
    old = os.umask(UMASK_FLOOR)
    os.umask(old | UMASK_FLOOR)
    return old | UMASK_FLOOR


def make_dirs(path: Path | str, mode: int = READER_DIR_MODE, tighten: bool = False) -> Path:
    """`mkdir -p` giving every folder it creates exactly `mode`, whatever the umask (pathlib's
    parents=True creates the parents 0777 less the umask). `tighten`, for a folder of the home's own
    layout (never one a user named): when it exists and is ours it loses the bits `mode` does not give
    (an old home's 0777 writer/ becomes 0700; a folder an operator closed to a group stays closed)."""
    path = Path(path)
    missing = []
    at = path
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:  # another process made it meanwhile
            continue
        os.chmod(folder, mode)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a folder; move it away and run again")
    st = path.stat()
    if tighten and st.st_uid == os.geteuid() and st.st_mode & 0o7777 & ~mode:
        os.chmod(path, st.st_mode & 0o7777 & mode)
    return path


def set_mode(path: Path | str, mode: int) -> None:
    """Give a file a library created for us (DuckDB's, delta-rs') exactly `mode`; another user's file
    is left to them."""
    st = os.stat(path)
    if st.st_uid == os.geteuid() and st.st_mode & 0o7777 != mode:
        os.chmod(path, mode)


def _settle(fd: int, mode: int) -> None:
    """Give an open file exactly `mode` when this process owns it (a file another user created, in a
    shared folder, is left to them)."""
    st = os.fstat(fd)
    if st.st_uid == os.geteuid() and st.st_mode & 0o7777 != mode:
        os.fchmod(fd, mode)


def opener(mode: int) -> Callable[[str, int], int]:
    """An `open(..., opener=opener(PRIVATE_MODE))` that creates the file with `mode` whatever the umask
    (and sets it on a file of ours that exists with another)."""
    def _open(path: str, flags: int) -> int:
        fd = os.open(path, flags, mode)
        try:
            _settle(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd
    return _open


def create_file(path: Path | str, mode: int) -> Path:
    """Create `path` empty with `mode` if missing, else give it `mode` when it is ours (before SQLite opens
    it: SQLite gives its -wal and -shm the database's mode; an old file created under a loose umask is
    tightened; another user's file, e.g. a reader's view of it, is left alone)."""
    path = Path(path)
    try:
        os.close(opener(mode)(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        st = path.stat()
        if st.st_uid == os.geteuid() and st.st_mode & 0o7777 != mode:
            os.chmod(path, mode)
    return path


def write_atomic(path: Path | str, data: bytes | str, mode: int) -> None:
    """Replace `path` whole: a temporary file beside it, given `mode` before any byte, renamed over it.
    Readers see the old file or the new one, never a part, and never one with another mode."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb", opener=opener(mode)) as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def copy_file(source: Path | str, target: Path | str, mode: int) -> Path:
    """Copy `source` to `target`, `target` having `mode` from its creation on (an existing one of ours is
    given `mode`, then overwritten)."""
    create_file(target, mode)
    shutil.copyfile(source, target)  # keeps the mode of the file it truncates and fills
    return Path(target)
