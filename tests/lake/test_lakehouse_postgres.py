"""The lakehouse's own paths with the release registry in a real PostgreSQL (GPUPOOL_CATALOG_URL;
scripts/postgres-up.sh): two concurrent partition writers, a writer killed with -9 mid-publish,
readers during an ingest and a full rebuild, `gpupool pack --as-of`, and a Dagster backfill whose
instance storage is PostgreSQL too. The scenarios are the SQLite-mode tests' own functions, run
with the catalog URL in the environment (their worker processes inherit it); each test then reads
the `releases` table straight from PostgreSQL to show the releases went there and nowhere else."""
from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import dagster as dg
import duckdb
import psycopg
import pytest
from dagster_postgres import PostgresRunStorage

from allocator.sim.simulator import simulate
from pipelines.assets.backfill import JOB_NAME
from pipelines.assets.ingest import asset_name, ingest_assets
from pipelines.contracts import LAKE_TABLES
from pipelines.lake.releases import CATALOG_HOME_ENV, CATALOG_URL_ENV, DEFAULT_FILE
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home
from tests.lake import serving, test_concurrent_writers, test_kill_writer
from tests.pack import test_as_of
from tests.postgres import DAGSTER_YAML

pytest_plugins = ["tests.postgres"]

GPUPOOL = str(Path(sys.executable).parent / "gpupool")


@pytest.fixture
def catalog(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every Warehouse of the test, and every process it starts, keeps its releases in a fresh
    PostgreSQL database, each home under its own lake root's path."""
    monkeypatch.setenv(CATALOG_URL_ENV, postgres_url)
    monkeypatch.delenv(CATALOG_HOME_ENV, raising=False)
    return postgres_url


def pg_releases(url: str, wh: Warehouse) -> list[tuple[int, str, str | None, dict[str, int]]]:
    """The home's rows of the `releases` table, read with psycopg (not through ReleaseRegistry)."""
    with psycopg.connect(url) as con:
        rows = con.execute("select release_id, kind, note, tables from releases where home = %s "
                           "order by release_id", (str(wh.lake),)).fetchall()
    return [(release_id, kind, note, json.loads(tables)) for release_id, kind, note, tables in rows]


def published_release(wh: Warehouse) -> int:
    con = duckdb.connect(str(wh.db_path), read_only=True)
    try:
        return con.execute("select release_id from lake.release").fetchone()[0]
    finally:
        con.close()


def assert_releases_in_postgres(url: str, wh: Warehouse) -> list[tuple[int, str, str | None, dict[str, int]]]:
    """What every home on the PostgreSQL catalog must show: the published release and every kept one
    are rows of PostgreSQL, the published one last and reading the lake's latest Delta version, and no
    SQLite registry was written on the side. Returns the rows."""
    rows = pg_releases(url, wh)
    ids = [release_id for release_id, *_ in rows]
    assert ids, f"no release of {wh.lake} in PostgreSQL"
    assert published_release(wh) == wh.current_release() == ids[-1]
    assert set(wh.kept_releases()) <= set(ids), (wh.kept_releases(), ids)
    versions = {wh.lake_table(name): wh.store.version(wh.lake_table(name)) for name in LAKE_TABLES}
    assert rows[-1][3] == {table: v for table, v in versions.items() if v is not None}  # written tables
    assert not list(wh.lake.glob(f"{DEFAULT_FILE}*")), "a SQLite registry was written besides PostgreSQL"
    return rows


def moved_to_postgres(home: Path, to: Path) -> Warehouse:
    """A copy of a home built on the SQLite registry (the shared demo), moved onto the PostgreSQL
    catalog the environment names: its SQLite registry and release files go (PostgreSQL's ids start
    again at 1, and a kept SQLite-era file of the same id would be taken for a PostgreSQL release),
    and its first writer re-points the lake's views at the copy and publishes its first release."""
    shutil.copytree(home, to)
    shutil.rmtree(to / "releases")
    for path in (to / "lake").glob(f"{DEFAULT_FILE}*"):  # the file and its WAL
        path.unlink()
    wh = Warehouse(to)
    with wh.writer():
        pass
    return wh


@pytest.fixture
def demo_on_postgres(catalog: str, small_demo_home: Path, tmp_path: Path) -> Warehouse:
    return moved_to_postgres(small_demo_home, tmp_path / "demo")


@pytest.mark.parametrize("scenario", [
    test_concurrent_writers.test_two_writers_of_different_days_and_of_the_same_day,
    test_concurrent_writers.test_a_day_written_twice_at_once_is_one_whole_write,
], ids=["different-days-and-same-day", "same-day-at-once"])
def test_two_concurrent_partition_writers_on_postgres(scenario, catalog: str, tmp_path: Path) -> None:
    scenario(tmp_path)  # its assertions: no lost or duplicated row, one whole write per day
    wh = Warehouse(tmp_path / "gpupool")
    rows = assert_releases_in_postgres(catalog, wh)
    # publishes are serialised: a later release never reads an older Delta version than an earlier one
    versions = [tables["raw.dcgm_samples"] for *_, tables in rows]
    assert versions == sorted(versions), rows
    assert {kind for _, kind, *_ in rows} == {"write"}


@pytest.mark.slow
def test_kill_9_mid_publish_on_postgres(catalog: str, tmp_path: Path) -> None:
    """A publish killed after its registry row was inserted leaves a row without a file: the history
    of what was recorded, never what readers open."""
    test_kill_writer.test_kill_9_mid_publish_leaves_the_last_release(tmp_path)
    wh = Warehouse(tmp_path / "gpupool")
    rows = assert_releases_in_postgres(catalog, wh)
    assert len(rows) >= 1 + test_kill_writer.KILLS  # the seed, and at least one publish per killed worker


@pytest.mark.slow
def test_readers_during_an_ingest_and_a_rebuild_on_postgres(demo_on_postgres: Warehouse, tmp_path: Path,
                                                            catalog: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    # its copy of the home publishes under its own lake root: a home of its own in PostgreSQL
    serving.readers_see_whole_releases(copy_home(demo_on_postgres.home, run / "gpupool"), run)
    wh = Warehouse(run / "gpupool")
    rows = assert_releases_in_postgres(catalog, wh)
    assert {"ingest", "build"} <= {kind for _, kind, *_ in rows}
    assert len(pg_releases(catalog, demo_on_postgres)) == 1  # the copied home's releases are not the source's


@pytest.mark.slow
@pytest.mark.usefixtures("pdf_not_rendered")  # test_as_of's packs: the figures are the point, not the PDF
def test_pack_as_of_on_postgres(demo_on_postgres: Warehouse, catalog: str,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPOOL_KEEP_RELEASES", "1")  # as test_as_of's fixture: only the pin keeps the pack's release
    wh = demo_on_postgres
    moved = wh.current_release()
    test_as_of.test_as_of_rebuilds_the_figures_an_earlier_pack_read(wh.home)
    ids = {release_id for release_id, *_ in assert_releases_in_postgres(catalog, wh)}
    with wh.connect() as con:
        read = [r for (r,) in con.execute("select release_id from ops.review_packs order by built_at").fetchall()]
    # the first pack, the latest one, and the first one's release again (--as-of): each pinned, each from PostgreSQL
    assert len(read) == 3 and read[0] == read[2] != read[1] and moved < read[0]
    assert set(read) == wh.pinned_releases() <= ids
    # `gpupool releases` lists the kept ones with their PostgreSQL rows and publishes by hand
    test_as_of.test_releases_lists_the_kept_ones_and_publishes_by_hand(wh.home)
    assert_releases_in_postgres(catalog, wh)


@pytest.mark.slow
def test_dagster_backfill_with_instance_and_catalog_on_postgres(catalog: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`gpupool ingest all LANDING --workers 2` with DAGSTER_HOME's instance on PostgreSQL, then a run of
    the ingest asset for one partition on that instance: the runs and the asset's partition
    materializations are in PostgreSQL, and so are the releases the step processes and the run published."""
    dagster_home = tmp_path / "dagster-home"
    dagster_home.mkdir()
    url = urlsplit(catalog)
    (dagster_home / "dagster.yaml").write_text(DAGSTER_YAML.format(
        username=url.username, hostname=url.hostname, port=url.port, db_name=url.path.lstrip("/")))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("GPUPOOL_DAGSTER_PG_PASSWORD", unquote(url.password or ""))
    days = [dt.date(2026, 11, 1), dt.date(2026, 11, 2)]
    simulate(tmp_path / "landing", days=len(days), gpus=8, seed=7, start=days[0])
    for folder in (tmp_path / "landing").iterdir():  # the GPU telemetry alone: 2 steps
        if folder.name != "dcgm_parquet":
            shutil.rmtree(folder)
    wh = Warehouse(tmp_path / "gpupool")
    done = subprocess.run([GPUPOOL, "ingest", "all", str(tmp_path / "landing"), "--home", str(wh.home),
                           "--workers", "2", "--no-build"], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr

    rows = assert_releases_in_postgres(catalog, wh)
    notes = {note for _, kind, note, _ in rows if kind == "ingest"}
    # a step's publish, from its own process (a step whose writes an earlier publish already carried
    # records none: nothing changed)
    assert notes & {f"dcgm_parquet {day}..{day}" for day in days}, rows  # a run of one day per step
    with wh.connect() as con:
        loaded = dict(con.execute("select partition_date, count(*) from raw.dcgm_samples group by all").fetchall())
    assert sorted(loaded) == days and all(loaded.values())

    key = dg.AssetKey(asset_name("dcgm_parquet"))
    with dg.DagsterInstance.get() as instance:  # the instance DAGSTER_HOME names, on PostgreSQL
        assert isinstance(instance.run_storage, PostgresRunStorage)
        [backfill] = instance.get_runs(dg.RunsFilter(job_name=JOB_NAME))
        # the ingest asset itself (what the ingest_daily schedule runs) re-ingests the last day
        asset = next(a for a in ingest_assets if a.key == key)
        again = dg.materialize([asset], instance=instance, partition_key=days[-1].isoformat(),
                               resources={"warehouse": WarehouseResource(home=str(wh.home))})
        assert again.success
    with psycopg.connect(catalog) as con:
        materialized = {run_id: (con.execute("select status from runs where run_id = %s", (run_id,)).fetchone(),
                                 con.execute("select partition from event_logs where run_id = %s and asset_key = %s "
                                             "and dagster_event_type = 'ASSET_MATERIALIZATION' order by partition",
                                             (run_id, key.to_string())).fetchall())
                        for run_id in (backfill.run_id, again.run_id)}
    assert materialized == {backfill.run_id: (("SUCCESS",), [(day.isoformat(),) for day in days]),
                            again.run_id: (("SUCCESS",), [(days[-1].isoformat(),)])}
    after = assert_releases_in_postgres(catalog, wh)
    assert after[-1][0] > rows[-1][0]  # the asset's run published a new release, in PostgreSQL
    assert not list(dagster_home.rglob("*.db")) and not (wh.home / "dagster").exists()  # no SQLite instance
