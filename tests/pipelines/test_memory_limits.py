"""DuckDB's limits for the connections that build or ingest: sized from the machine (or its container),
overridden by GPUPOOL_DUCKDB_MEMORY_LIMIT, and really in force in a writer's connection and in the dbt build."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest
from dbt.cli.main import dbtRunner

from pipelines.build import _close_dbt_connection, build
from pipelines.duckdb_limits import (
    MEMORY_LIMIT_ENV,
    machine_cpus,
    machine_memory_bytes,
    memory_limit,
    writer_limits,
)
from pipelines.paths import MODELS_DIR
from pipelines.warehouse import DEFAULT_MEMORY_LIMIT

GIB = 2**30


def _as_duckdb_shows(limit: str) -> str:
    """current_setting('memory_limit') of a connection given `limit` ("1GB" shows as "953.6 MiB")."""
    with duckdb.connect(config={"memory_limit": limit}) as con:
        return con.sql("select current_setting('memory_limit')").fetchall()[0][0]


@pytest.fixture
def machine(monkeypatch):
    """A machine of 16 GiB and 8 CPUs, whatever this one is."""
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 16 * GIB // 4096}
    monkeypatch.setattr(os, "sysconf", pages.__getitem__)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))


# -- sizing -------------------------------------------------------------------------------------
def test_an_eighth_of_the_machine_without_the_variable():
    assert memory_limit(16 * GIB, env={}) == "2048MiB"
    assert memory_limit(16 * GIB, env={MEMORY_LIMIT_ENV: "  "}) == "2048MiB"  # blank is unset


def test_a_tiny_machine_gets_the_floor():
    assert memory_limit(512 * 2**20, env={}) == "256MiB"
    assert memory_limit(0, env={}) == "256MiB"


def test_the_variable_overrides_the_machine():
    assert memory_limit(16 * GIB, env={MEMORY_LIMIT_ENV: "3GB"}) == "3GB"
    assert memory_limit(256 * 2**20, env={MEMORY_LIMIT_ENV: "50%"}) == "50%"


def test_a_variable_duckdb_cannot_read_is_refused_by_name():
    with pytest.raises(ValueError, match=r"GPUPOOL_DUCKDB_MEMORY_LIMIT='three gigs'.*like 3GB"):
        memory_limit(16 * GIB, env={MEMORY_LIMIT_ENV: "three gigs"})


def test_outside_a_container_the_physical_memory(machine, tmp_path):
    assert machine_memory_bytes(tmp_path) == 16 * GIB  # no cgroup files at all
    (tmp_path / "memory.max").write_text("max\n")
    assert machine_memory_bytes(tmp_path) == 16 * GIB


def test_a_container_limit_below_the_machine_wins(machine, tmp_path):
    (tmp_path / "memory.max").write_text(f"{3 * GIB}\n")
    assert machine_memory_bytes(tmp_path) == 3 * GIB
    assert writer_limits(tmp_path / "home", env={}, cgroup_root=tmp_path).memory_limit == "384MiB"


def test_a_container_limit_above_the_machine_is_ignored(machine, tmp_path):
    (tmp_path / "memory.max").write_text(f"{64 * GIB}\n")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # cgroup v1: none
    assert machine_memory_bytes(tmp_path) == 16 * GIB


def test_threads_follow_the_cpu_quota(machine, tmp_path):
    assert machine_cpus(tmp_path) == 8
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert machine_cpus(tmp_path) == 8
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert machine_cpus(tmp_path) == 2  # 1.5 CPUs: DuckDB gets 2 threads
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert machine_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("1600000 100000\n")
    assert machine_cpus(tmp_path) == 8  # a quota above the CPUs it may run on


def test_writers_spill_under_the_home(tmp_path):
    assert writer_limits(tmp_path, env={}).temp_directory == str(tmp_path / "tmp")


# -- in force -----------------------------------------------------------------------------------
def test_a_writer_connection_runs_with_the_limit_and_spills_under_the_home(warehouse, monkeypatch):
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "1GB")
    with warehouse.connect(read_only=False) as con:
        limit, temp, threads = con.sql("select current_setting('memory_limit'), current_setting('temp_directory'), "
                                       "current_setting('threads')").fetchall()[0]
    assert (limit, temp, threads) == (_as_duckdb_shows("1GB"), str(warehouse.home / "tmp"), machine_cpus())


def test_a_writer_without_the_variable_gets_its_share_and_readers_keep_theirs(warehouse, monkeypatch):
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    with warehouse.writer():
        pass
    warehouse.publish()
    with warehouse.connect(read_only=False) as con:
        assert con.sql("select current_setting('memory_limit')").fetchall()[0][0] == _as_duckdb_shows(
            memory_limit(machine_memory_bytes(), env={}))
    with warehouse.connect(read_only=True) as con:
        assert con.sql("select current_setting('memory_limit')").fetchall()[0][0] == _as_duckdb_shows(
            DEFAULT_MEMORY_LIMIT)


@pytest.fixture
def settings_project(tmp_path) -> Path:
    """A dbt project with the real profile whose models record the DuckDB settings they were built under,
    and sort more rows than a tight limit holds (DuckDB must spill, and the next model must still open)."""
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    shutil.copy(MODELS_DIR / "profiles.yml", project / "profiles.yml")
    (project / "dbt_project.yml").write_text(
        "name: limits\nversion: '1.0.0'\nconfig-version: 2\nprofile: gpupool\nmodel-paths: ['models']\n"
        "models:\n  limits:\n    +materialized: table\n")
    (project / "models" / "sorted_rows.sql").write_text(
        "select range as i, random() as r from range(4000000) order by r\n")
    (project / "models" / "build_settings.sql").write_text(
        "select current_setting('memory_limit') as memory_limit, current_setting('temp_directory') as temp_directory, "
        "current_setting('threads') as threads, (select count(*) from {{ ref('sorted_rows') }}) as sorted_rows\n")
    return project


def test_the_dbt_build_runs_with_the_limit_and_spills_under_the_home(settings_project, warehouse, monkeypatch):
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "64MB")  # 4 M rows of (bigint, double) sorted: ~64 MB before spilling
    build(warehouse, project_dir=settings_project)
    with duckdb.connect(str(warehouse.writer_path), read_only=True) as con:
        row = con.sql("select memory_limit, temp_directory, threads, sorted_rows from main.build_settings").fetchall()[0]
    assert row == (_as_duckdb_shows("64MB"), str(warehouse.home / "tmp"), machine_cpus(), 4_000_000)


def test_a_plain_dbt_run_takes_the_variable(settings_project, tmp_path, monkeypatch):
    """`dbt build` without gpupool's --vars (as Dagster runs it) takes GPUPOOL_DUCKDB_MEMORY_LIMIT."""
    home = tmp_path / "home"
    (home / "writer").mkdir(parents=True)
    monkeypatch.setenv("GPUPOOL_HOME", str(home))
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "1GB")
    args = ["build", "--project-dir", str(settings_project), "--profiles-dir", str(settings_project),
            "--target-path", str(tmp_path / "target"), "--log-path", str(tmp_path / "logs"),
            "--select", "build_settings", "sorted_rows", "--no-send-anonymous-usage-stats"]
    try:
        assert dbtRunner().invoke(args).success
    finally:
        _close_dbt_connection()
    with duckdb.connect(str(home / "writer" / "warehouse.duckdb"), read_only=True) as con:
        assert con.sql("select memory_limit from main.build_settings").fetchall()[0][0] == _as_duckdb_shows("1GB")

