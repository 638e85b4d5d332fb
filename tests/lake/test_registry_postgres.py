"""The release registry on a real PostgreSQL server (scripts/postgres-up.sh): the behaviours of
test_releases.py, plus what a shared server adds: concurrent writer processes and homes sharing it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pipelines.lake.releases import ReleaseNotFound, ReleaseRegistry, registry_for
from pipelines.lake.tables import LakeError
from pipelines.paths import REPO_ROOT
from tests.lake.helpers import record_latest_get_list

pytest_plugins = ["tests.postgres"]

# a writer process: records COUNT releases in its home, one line per id
WRITER = """
import sys
from pipelines.lake.releases import ReleaseRegistry
url, home, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
registry = ReleaseRegistry.from_url(url, home)
for n in range(count):
    print(registry.record("ingest", f"{home} {n}", {"raw.samples": n}), flush=True)
"""


def test_record_latest_get_list_on_postgres(postgres_url: str) -> None:
    registry = ReleaseRegistry.from_url(postgres_url)
    assert registry.dialect == "postgresql" and registry.paramstyle == "%s"
    record_latest_get_list(registry, reopen=lambda: ReleaseRegistry.from_url(postgres_url))
    # stored as PostgreSQL types, not text: an identity id and a timestamp
    with psycopg.connect(postgres_url) as con:
        types = dict(con.execute("select column_name, data_type from information_schema.columns "
                                 "where table_name = 'releases'").fetchall())
        identity = con.execute("select is_identity from information_schema.columns "
                               "where table_name = 'releases' and column_name = 'release_id'").fetchone()
    assert (types["release_id"], types["created_at"], identity) == ("bigint", "timestamp without time zone",
                                                                   ("YES",))


def test_a_missing_release_names_its_id_and_hides_the_password(postgres_url: str) -> None:
    registry = ReleaseRegistry.from_url(postgres_url, "home-a")
    registry.record("ingest", None, {"raw.samples": 0})
    with pytest.raises(ReleaseNotFound, match="release 42 not found in postgresql://gpupool:\\*\\*\\*@") as error:
        registry.get(42)
    password = postgres_url.split("://", 1)[1].split("@", 1)[0].partition(":")[2]
    assert "(home 'home-a')" in str(error.value) and f":{password}@" not in str(error.value)


def test_bad_versions_are_refused_on_postgres(postgres_url: str) -> None:
    registry = ReleaseRegistry.from_url(postgres_url)
    with pytest.raises(LakeError, match="samples"):
        registry.record("ingest", None, {"samples": 1})
    with pytest.raises(LakeError, match="-1"):
        registry.record("ingest", None, {"raw.samples": -1})
    assert registry.latest() is None


def test_two_processes_recording_at_once_on_postgres(postgres_url: str) -> None:
    """Both start on an empty database (so both create the table at once), then record 40 releases each:
    every id distinct, none lost."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, postgres_url, "shared", "40"], cwd=REPO_ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [writer.communicate(timeout=120) for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], [err for _, err in outputs]
    ids = [int(line) for out, _ in outputs for line in out.split()]
    assert len(ids) == 80 and len(set(ids)) == 80
    registry = ReleaseRegistry.from_url(postgres_url, "shared")
    assert sorted(r.release_id for r in registry.list(limit=1000)) == sorted(ids)
    assert registry.latest().release_id == max(ids)


def test_homes_sharing_a_database_do_not_mix_on_postgres(postgres_url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    a = ReleaseRegistry.from_url(postgres_url, "a")
    b = ReleaseRegistry.from_url(postgres_url, "b")
    in_a = a.record("build", "a", {"mart.a": 1})
    assert b.latest() is None and b.list() == []
    with pytest.raises(ReleaseNotFound, match=f"release {in_a} not found"):
        b.get(in_a)
    in_b = b.record("build", "b", {"mart.a": 7})
    assert (a.latest().release_id, b.latest().release_id) == (in_a, in_b)
    assert [r.tables for r in a.list()] == [{"mart.a": 1}]

    # registry_for: GPUPOOL_CATALOG_URL selects the server for a whole home, each lake root its own namespace
    monkeypatch.setenv("GPUPOOL_CATALOG_URL", postgres_url)
    monkeypatch.delenv("GPUPOOL_CATALOG_HOME", raising=False)
    home_one, home_two = registry_for(tmp_path / "one" / "lake"), registry_for(tmp_path / "two" / "lake")
    assert home_one.dialect == "postgresql" and home_one.home == str((tmp_path / "one" / "lake").resolve())
    one = home_one.record("ingest", None, {"raw.samples": 0})
    assert home_two.latest() is None and registry_for(tmp_path / "one" / "lake").latest().release_id == one
    assert not (tmp_path / "one" / "lake").exists()  # no SQLite file on the side
    monkeypatch.setenv("GPUPOOL_CATALOG_HOME", "prod")
    assert registry_for(tmp_path / "moved" / "lake").home == "prod"
    monkeypatch.delenv("GPUPOOL_CATALOG_URL")
    assert registry_for(tmp_path / "lake").dialect == "sqlite" and (tmp_path / "lake" / "releases.sqlite3").exists()


def test_catalog_urls_are_parsed_or_refused(tmp_path: Path) -> None:
    relative = ReleaseRegistry.from_url(f"sqlite:///{os.path.relpath(tmp_path / 'rel.sqlite3')}")
    absolute = ReleaseRegistry.from_url(f"sqlite:///{tmp_path / 'abs.sqlite3'}")  # sqlite:////abs/...
    plain = ReleaseRegistry.from_url(str(tmp_path / "plain.sqlite3"))
    assert {relative.dialect, absolute.dialect, plain.dialect} == {"sqlite"}
    assert all((tmp_path / name).exists() for name in ("rel.sqlite3", "abs.sqlite3", "plain.sqlite3"))
    with pytest.raises(LakeError, match=r"mysql://u:\*\*\*@db/x': expected a file path, sqlite:///path or postgresql"):
        ReleaseRegistry.from_url("mysql://u:secret@db/x")
    with pytest.raises(LakeError, match="cannot connect to the release catalog postgresql://gpupool:\\*\\*\\*@"
                                        "127.0.0.1:1/gpupool \\(.+\\): is the server up"):
        ReleaseRegistry.from_url("postgresql://gpupool:secret@127.0.0.1:1/gpupool")
