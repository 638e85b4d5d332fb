"""Time travel for review packs: a pack records and pins the warehouse release it read, `gpupool pack
--as-of RELEASE` rebuilds the same figures after the data changed, a release no longer kept is a clear
error, and `gpupool releases` lists what is kept and publishes the writers' state by hand."""
from __future__ import annotations

import json
import subprocess
import sys
import traceback
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner, Result
from polars.testing import assert_frame_equal

from pipelines.cli.pack import pack as pack_command
from pipelines.cli.releases import releases as releases_command
from pipelines.contracts import SCHEMA_STAMP
from pipelines.lake.reader import search_config
from pipelines.pack.figures import TABLES
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home

pytestmark = pytest.mark.slow  # the shared 3-day demo, then packs (WeasyPrint)
MONTH = "2026-11"


def _gpupool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "gpupool"), *args], capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture
def home(tmp_path: Path, small_demo_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # one unpinned release kept: only the pin keeps the release a pack read (the env reaches the CLI too)
    monkeypatch.setenv("GPUPOOL_KEEP_RELEASES", "1")
    return copy_home(small_demo_home, tmp_path / "gpupool")


def _pack(home: Path, *extra: str) -> tuple[dict, Path, str]:
    """Build a pack with `gpupool pack`, in this process (three packs: their processes' start is not the
    point here, and pdf_not_rendered applies); its ops.review_packs row, its folder and what it printed."""
    done = CliRunner().invoke(pack_command, ["--month", MONTH, "--home", str(home), *extra])
    assert done.exit_code == 0, _said(done)
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home))
    try:
        row = con.sql("select * from ops.review_packs order by built_at desc, version desc limit 1").pl().to_dicts()[0]
    finally:
        con.close()
    return row, (home / row["html_path"]).parent, done.stdout


def _said(done: Result) -> str:
    """What an in-process command printed, and the exception it ended with."""
    return done.output + "".join(traceback.format_exception(*done.exc_info))


def _releases(home: Path, *extra: str) -> Result:
    """`gpupool releases`, in this process (three runs: their processes' start is not the point here)."""
    return CliRunner().invoke(releases_command, ["--home", str(home), *extra])


def _numbers(folder: Path) -> tuple[dict, dict[str, pl.DataFrame]]:
    """A pack's numbers: its headline figures (this month and the previous) and its appendix tables."""
    stored = json.loads((folder / "figures.json").read_text())
    figures = {k: (f["value"], f["previous"]) for k, f in stored["figures"].items()}
    return figures, {t.key: pl.read_parquet(folder / "appendix" / f"{t.key}.parquet") for t in TABLES}


def _assert_same_numbers(a: Path, b: Path) -> None:
    (figs_a, tables_a), (figs_b, tables_b) = _numbers(a), _numbers(b)
    assert figs_a.keys() == figs_b.keys()
    for key, (value, previous) in figs_a.items():
        assert figs_b[key] == (pytest.approx(value), pytest.approx(previous)), key
    for key, frame in tables_a.items():
        # float sums may differ in the last bits between runs (parallel aggregation)
        assert_frame_equal(frame, tables_b[key], check_exact=False)


def _listed(stdout: str) -> dict[int, str]:
    """`gpupool releases`' rows by release id (a row: a 2-character current mark, then the id)."""
    return {int(line[2:].split()[0]): line for line in stdout.splitlines()
            if line[2:].split()[:1] and line[2:].split()[0].isdigit()}


@pytest.mark.usefixtures("pdf_not_rendered")  # the figures are the point, not the PDF
def test_as_of_rebuilds_the_figures_an_earlier_pack_read(home: Path) -> None:
    with Warehouse(home).writer() as con:  # a warehouse from before releases: the next write adds the column
        con.execute("alter table ops.review_packs drop column release_id")
        con.execute(f"drop table {SCHEMA_STAMP}")  # and before the schema stamp, which that code did not write
    first, first_dir, said = _pack(home)
    release = first["release_id"]
    assert release is not None and f"reading release {release}" in said
    assert json.loads((first_dir / "figures.json").read_text())["release_id"] == release
    assert "pack 2026-11" in (home / "releases" / f"{release}.pin").read_text()

    wh = Warehouse(home)
    with wh.writer() as con:  # the data change: the pool's capacity doubles in the marts
        con.execute("update marts.fct_capacity_daily set capacity_gpu_hours = 2 * capacity_gpu_hours")
    assert wh.current_release() != release

    latest, latest_dir, _ = _pack(home)
    assert latest["release_id"] != release
    (first_figs, _), (latest_figs, _) = _numbers(first_dir), _numbers(latest_dir)
    assert latest_figs["capacity_gpu_hours"][0] == pytest.approx(2 * first_figs["capacity_gpu_hours"][0])

    # three publishes since (the change, two packs' rows) and one unpinned release kept: the pin keeps it
    again, again_dir, said = _pack(home, "--as-of", str(release))
    assert again["release_id"] == release and f"reading release {release}" in said
    assert again_dir != first_dir
    _assert_same_numbers(first_dir, again_dir)
    assert json.loads((again_dir / "figures.json").read_text())["release_id"] == release


def test_as_of_a_release_not_kept_is_a_clear_error(home: Path) -> None:
    kept = Warehouse(home).kept_releases()
    done = _gpupool("pack", "--month", MONTH, "--home", str(home), "--as-of", "999999")
    assert done.returncode != 0
    assert "release 999999 is not kept" in done.stderr and str(kept[-1]) in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (home / "packs").exists()


def test_releases_lists_the_kept_ones_and_publishes_by_hand(home: Path) -> None:
    wh = Warehouse(home)
    current = wh.current_release()
    wh.pin_release(current, "pack 2026-11")
    done = _releases(home)
    assert done.exit_code == 0, _said(done)
    line = _listed(done.stdout)[current]
    assert line.startswith("*") and "pinned: pack 2026-11" in line and "MiB" in line

    # the data team's plain `dbt build` writes the writers' file and publishes nothing
    con = duckdb.connect(str(wh.writer_path))
    try:
        con.execute("update marts.fct_capacity_daily set capacity_gpu_hours = 2 * capacity_gpu_hours")
    finally:
        con.close()
    assert wh.current_release() == current
    done = _releases(home, "--publish", "--note", "dbt build by hand")
    assert done.exit_code == 0, _said(done)
    published = wh.current_release()
    assert published != current and f"published release {published}" in done.stdout
    rows = _listed(done.stdout)
    assert rows[published].startswith("*") and " publish " in rows[published]
    assert "dbt build by hand" in rows[published]
    assert "pinned: pack 2026-11" in rows[current]  # the pinned one stays, though only 1 is kept

    done = _releases(home, "--publish")
    assert done.exit_code == 0 and f"nothing changed since release {published}" in done.stdout


def test_a_month_without_data_is_refused_and_pins_nothing(home: Path):
    """`gpupool pack` of a month the release holds no day of (issue 32): a non-zero exit that names the
    days it does hold, no pack folder, no ops.review_packs row, no release pinned."""
    done = CliRunner().invoke(pack_command, ["--month", "2026-09", "--home", str(home), "--all-tenants"])
    assert done.exit_code == 1, _said(done)
    assert "no data for 2026-09 in release" in done.output and "its data run from 2026-11-01 to 2026-11-03" in done.output
    assert not (home / "packs").exists() or not any((home / "packs").rglob("pack.html"))
    assert list((home / "releases").glob("*.pin")) == []
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home)) as con:
        assert con.execute("select count(*) from ops.review_packs").fetchone()[0] == 0


@pytest.mark.usefixtures("pdf_not_rendered")
def test_without_a_month_the_pack_is_of_the_latest_month_with_data(home: Path):
    """--month is optional on `pack` as on `recommend`: the latest month of the release read."""
    done = CliRunner().invoke(pack_command, ["--home", str(home)])
    assert done.exit_code == 0, _said(done)
    assert f"review pack {MONTH} (en)" in done.output
    assert list((home / "packs" / MONTH).rglob("pack.html"))
    bad = CliRunner().invoke(pack_command, ["--month", "11/2026", "--home", str(home)])
    assert bad.exit_code == 2 and "expected YYYY-MM" in bad.output
