"""A home moved to another folder (or restored from a backup elsewhere) reads every kept release, its
raw telemetry included, and builds on: the releases' lake views name their files relative to the
home they are opened in (pipelines/lake/reader.py), never by the folder they were written in."""
from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from pipelines.build import build
from pipelines.cli import main
from pipelines.lake.mend import RELATIVE_MARK
from pipelines.lake.reader import search_config
from pipelines.warehouse import Warehouse
from tests.models.builders import load, series

DAYS = [dt.date(2026, 11, 1) + dt.timedelta(days=n) for n in range(3)]
ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def load_day(wh: Warehouse, day: dt.date, gpus: int) -> None:
    start = dt.datetime.combine(day, dt.time(10))
    load(wh, "dcgm_text", day, dcgm_samples=[
        row for g in range(gpus) for row in series("h1", g, ACTIVE, start, 30, 0.25 * g, model_name="NVIDIA H100")])


def counts(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """The raw samples (a lake view) and the per-minute mart (day files the release lists)."""
    return (con.execute("select count(*) from raw.dcgm_samples").fetchone()[0],
            con.execute("select count(*) from marts.fct_gpu_activity").fetchone()[0])


def home_with_a_pinned_day(home: Path, built_empty_home: Path) -> tuple[Warehouse, int]:
    """A home with a day of two GPUs built, its release pinned as a pack's."""
    shutil.copytree(built_empty_home, home, ignore=shutil.ignore_patterns("last-build", "logs", "target"))
    wh = Warehouse(home)
    load_day(wh, DAYS[0], gpus=2)
    build(wh)
    pinned = wh.current_release()
    wh.pin_release(pinned, "pack 2026-11")
    return wh, pinned


def read_every_release(wh: Warehouse) -> dict[int, tuple[int, int]]:
    out = {}
    for release in wh.kept_releases():
        with wh.analyst_connect(release=release) as con:  # the analysts' sandbox, pinned releases' way
            out[release] = counts(con)
    return out


def test_a_moved_home_reads_every_kept_release_and_builds_on(tmp_path: Path, built_empty_home: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPOOL_KEEP_RELEASES", "2")
    monkeypatch.chdir(tmp_path)  # no reader finds the lake through the working folder
    old_home = tmp_path / "old" / "gpupool"
    wh, pinned = home_with_a_pinned_day(old_home, built_empty_home)
    load_day(wh, DAYS[1], gpus=3)
    build(wh)
    before = read_every_release(wh)
    assert before[pinned] == (60, 60) and before[wh.current_release()] == (150, 150)
    assert len(before) >= 3  # the pinned one, and the newest two

    new_home = tmp_path / "restored" / "elsewhere" / "gpupool"
    new_home.parent.mkdir(parents=True)
    shutil.move(old_home, new_home)
    moved = Warehouse(new_home)
    assert read_every_release(moved) == before
    with moved.connect(read_only=True) as con:  # the pipeline's own readers
        assert counts(con) == before[moved.current_release()]
    # another DuckDB client: from the home's folder, or with the home as its file search path
    with duckdb.connect(str(moved.release_path(pinned)), read_only=True, config=search_config(new_home)) as con:
        assert counts(con) == before[pinned]
    monkeypatch.chdir(new_home)
    with duckdb.connect(str(moved.release_path(pinned)), read_only=True) as con:
        assert counts(con) == before[pinned]
    monkeypatch.chdir(tmp_path)

    load_day(moved, DAYS[2], gpus=1)  # ingest and build go on in the new folder
    build(moved)
    with moved.connect(read_only=True) as con:
        assert counts(con) == (180, 180)
    with moved.analyst_connect(release=pinned) as con:
        assert counts(con) == before[pinned]
    assert not old_home.exists()


def absolute_as_before(wh: Warehouse, release: int) -> None:
    """Make a release's lake views name their files by absolute path, as gpupool did before it named
    them relative to the home."""
    path = wh.release_path(release)
    path.chmod(0o600)
    with duckdb.connect(str(path), config=search_config(wh.home)) as con:
        for (sql,) in con.execute("select sql from duckdb_views() where not internal and schema_name = 'raw'").fetchall():
            con.execute(sql.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1).replace("'lake/", f"'{wh.home}/lake/"))
    path.chmod(0o644)


def test_releases_published_with_absolute_paths_are_mended_by_the_next_publish_of_the_moved_home(
        tmp_path: Path, built_empty_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    old_home = tmp_path / "old" / "gpupool"
    wh, pinned = home_with_a_pinned_day(old_home, built_empty_home)
    before = read_every_release(wh)
    assert pinned in before  # a pack's pinned release is mended too
    for release in wh.kept_releases():
        absolute_as_before(wh, release)
    (wh.releases / RELATIVE_MARK).unlink()  # as a home from before the mend has none
    assert read_every_release(wh) == before

    new_home = tmp_path / "restored" / "gpupool"
    new_home.parent.mkdir(parents=True)
    shutil.move(old_home, new_home)
    moved = Warehouse(new_home)
    with pytest.raises(duckdb.Error, match="old/gpupool/lake"):
        read_every_release(moved)
    result = CliRunner().invoke(main, ["releases", "--publish", "--home", str(new_home)])
    assert result.exit_code == 0, result.output
    assert (moved.releases / RELATIVE_MARK).exists()
    assert {r: c for r, c in read_every_release(moved).items() if r in before} == before
    with moved.connect(read_only=True) as con:  # warehouse.duckdb follows its release's mend
        assert counts(con) == before[max(before)]
