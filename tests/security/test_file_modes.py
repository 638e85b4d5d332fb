"""Issue 26, finding 7: what gpupool writes takes no loose umask. Under `umask 000` a published
release, a pinned one, latest.json or the writers' database used to be mode 666, so any local user
could rewrite what readers and `pack --as-of` trust. Every file and folder here is checked on real
files, written under umask 000."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from allocator.auth import TokenError, load_tokens
from allocator.filemodes import PRIVATE_DIR_MODE, PRIVATE_MODE, READER_DIR_MODE, READER_MODE
from allocator.store import Store
from pipelines.governance.outbox import Outbox
from pipelines.lake.tables import DeltaStore
from pipelines.policies.planner import plan
from pipelines.warehouse import Warehouse
from tests.allocator.conftest import small_pool
from tests.governance.conftest import T0, catalog, finding, findings
from tests.lake.frames import day, day_frame

GPUPOOL = Path(sys.executable).parent / "gpupool"
DCGM_SAMPLE = Path(__file__).parents[1] / "fixtures" / "real-data" / "dcgm-exporter" / \
    "metrics_sample_a100_mig_nvidia_docs.prom"
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


@contextmanager
def loose_umask() -> Iterator[None]:
    """umask 000 for the block (this process only; restored after)."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def writable_by_others(root: Path) -> list[str]:
    """Every file or folder under `root` (itself included) that group or others may write, with its mode."""
    paths = [root, *root.rglob("*")]
    return [f"{oct(mode(p))} {p.relative_to(root.parent)}" for p in paths
            if not p.is_symlink() and mode(p) & OTHERS_WRITE]


def modes(paths) -> dict[str, str]:
    return {p.name: oct(mode(p)) for p in paths}


@pytest.mark.slow
def test_published_releases_are_not_writable_by_other_users_whatever_the_umask(tmp_path: Path) -> None:
    """`gpupool ingest` started under umask 000, of a file anyone may write: the home it writes
    (warehouse, releases, latest.json, the writers' file, the lake, landing, locks) has no file or
    folder another user may write; what readers open and the landed copy are 0644, the writers'
    state 0600."""
    home = tmp_path / "home"
    planted = tmp_path / DCGM_SAMPLE.name  # an input anyone may write: its landed copy must not be
    planted.write_bytes(DCGM_SAMPLE.read_bytes())
    planted.chmod(0o666)
    done = subprocess.run(
        [str(GPUPOOL), "ingest", "dcgm_text", str(planted), "--home", str(home), "--date", "2026-01-05",
         "--no-build"],
        check=False, preexec_fn=lambda: os.umask(0), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    wh = Warehouse(home)
    assert writable_by_others(home) == []
    readers = [wh.db_path, wh.releases / "latest.json", *wh.releases.glob("*.duckdb"),
               *(wh.lake / "raw").rglob("*.parquet"), *wh.landing.rglob("*.prom")]
    assert len(readers) >= 5
    assert {oct(READER_MODE)} == set(modes(readers).values()), modes(readers)
    private = [wh.writer_path, home / ".writer.lock", home / ".publish.lock", *(home / "locks").rglob("*.lock"),
               wh.lake / "releases.sqlite3"]
    assert {oct(PRIVATE_MODE)} == set(modes(private).values()), modes(private)
    assert mode(wh.writer_path.parent) == PRIVATE_DIR_MODE
    assert mode(wh.releases) == READER_DIR_MODE


def test_the_warehouse_sets_its_modes_itself_whatever_the_umask(tmp_path: Path) -> None:
    """A library caller (no entry point to tighten the umask) still gets 0644 releases and a 0600
    writers' file; a pinned release keeps 0644 after later publishes; the lake's data files are 0644."""
    home = tmp_path / "home"
    with loose_umask():
        wh = Warehouse(home)
        with wh.writer() as con:
            con.execute("create table if not exists ops.marker as select 1 as one")
        first = wh.current_release()
        with wh.writer() as con:
            con.execute("insert into ops.marker values (2)")
        DeltaStore(tmp_path / "lake").replace_partition("raw.samples", day(0), day_frame(day(0)), "partition_date")
    assert first is not None and wh.current_release() != first
    assert mode(wh.db_path) == READER_MODE
    assert mode(wh.release_path(first)) == READER_MODE
    assert mode(wh.releases / "latest.json") == READER_MODE
    assert mode(wh.writer_path) == PRIVATE_MODE
    assert mode(wh.writer_path.parent) == PRIVATE_DIR_MODE
    assert {oct(READER_MODE)} == set(modes((tmp_path / "lake").rglob("*.parquet")).values())
    assert writable_by_others(home) == []


def test_the_governance_outbox_and_its_log_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """The outbox's SQLite file (and its -wal, -shm) and its lock are the owner's only; the decision log
    it lands, which the next ingest loads, is not writable by anyone else."""
    with loose_umask():
        box = Outbox(tmp_path / "governance" / "outbox.db", tmp_path / "landing")
        try:
            box.record(plan(findings(finding()), catalog(), box, T0), T0)
            box.flush_log()
            state = sorted((tmp_path / "governance").iterdir())
            assert {p.name for p in state} >= {"outbox.db", "outbox.db-wal", "outbox.db-shm", "outbox.db.log.lock"}
            assert {oct(PRIVATE_MODE)} == set(modes(state).values()), modes(state)
        finally:
            box.close()
    assert mode(tmp_path / "governance") == PRIVATE_DIR_MODE
    assert writable_by_others(tmp_path / "landing") == []
    [log] = (tmp_path / "landing").rglob("*.jsonl")
    assert mode(log) == READER_MODE


def test_the_allocator_store_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """The allocator's state (SQLite, -wal, -shm) and its owner lock: 0600 under umask 000."""
    with loose_umask():
        store = Store(tmp_path / "state" / "a.db", small_pool())
        try:
            files = sorted((tmp_path / "state").iterdir())
            assert {p.name for p in files} >= {"a.db", "a.db-wal", "a.db-shm", "a.db.lock"}
            assert {oct(PRIVATE_MODE)} == set(modes(files).values()), modes(files)
        finally:
            store.close()
    assert writable_by_others(tmp_path / "state") == []


def test_a_tokens_file_other_users_may_write_is_refused(tmp_path: Path) -> None:
    """Anyone who can write the tokens file can add an admin token: the allocator will not start on it."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"a-token-of-16-chars": {"role": "admin", "name": "ops"}}))
    for loose in (0o666, 0o620, 0o602):
        tokens.chmod(loose)
        with pytest.raises(TokenError, match=rf"{tokens}.*writable by.*chmod 600"):
            load_tokens(tokens)
    for tight in (PRIVATE_MODE, 0o640, READER_MODE):
        tokens.chmod(tight)
        assert len(load_tokens(tokens)) == 1


def test_every_entry_point_keeps_group_and_others_from_writing() -> None:
    """`gpupool` (and the allocator's own CLI) tighten a loose umask before anything is written:
    files created by libraries (delta-rs' log, dbt's logs, DuckDB's spill) are safe too."""
    probe = ("import os; from click.testing import CliRunner; from {module} import {group} as g; "
             "CliRunner().invoke(g, [{command!r}, '--help']); print(oct(os.umask(0)))")
    for module, group, command in (("pipelines.cli", "main", "releases"), ("allocator.cli", "allocator", "serve")):
        done = subprocess.run([sys.executable, "-c", probe.format(module=module, group=group, command=command)],
                              preexec_fn=lambda: os.umask(0), capture_output=True, text=True, timeout=120,
                              check=True)
        assert int(done.stdout.strip(), 8) & OTHERS_WRITE == OTHERS_WRITE, (module, done.stdout)

