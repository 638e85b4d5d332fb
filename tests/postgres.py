"""A real PostgreSQL server (scripts/postgres-up.sh) for the catalog tests, as pytest fixtures.

`postgres_server` (session): the server's URL. If a server answers at GPUPOOL_TEST_POSTGRES_URL
(default: the one postgres-up.sh prints, from GPUPOOL_PG_PORT and GPUPOOL_PG_PASSWORD), it is used
as it is. Otherwise the fixture runs scripts/postgres-up.sh (root only; it installs Debian's
postgresql when missing) and scripts/postgres-down.sh at the end of the session. When that cannot
be done the tests are skipped with the reason, or fail where GPUPOOL_REQUIRE_COMPONENTS=1 (CI).

`postgres_url` (per test): the URL of a fresh database, dropped after the test, so tests never see
each other's tables. The server's role may create databases (postgres-up.sh grants it).

Use them from a test module with `pytest_plugins = ["tests.postgres"]`.
"""
from __future__ import annotations

import glob
import os
import subprocess
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from pipelines.paths import REPO_ROOT
from tests.components import REQUIRE_COMPONENTS_ENV, component_missing

# dagster.yaml for an instance whose storage is the test server (the password from the environment)
DAGSTER_YAML = """\
storage:
  postgres:
    postgres_db:
      scheme: postgresql+psycopg2
      username: {username}
      password:
        env: GPUPOOL_DAGSTER_PG_PASSWORD
      hostname: {hostname}
      port: {port}
      db_name: {db_name}
"""

SERVER_URL = os.environ.get("GPUPOOL_TEST_POSTGRES_URL") or (
    f"postgresql://gpupool:{os.environ.get('GPUPOOL_PG_PASSWORD', 'gpupool')}"
    f"@127.0.0.1:{os.environ.get('GPUPOOL_PG_PORT', '5433')}/gpupool")
UP = REPO_ROOT / "scripts" / "postgres-up.sh"
DOWN = REPO_ROOT / "scripts" / "postgres-down.sh"


def _answers(url: str) -> str | None:
    """None when a server accepts `url`, else why not."""
    try:
        with psycopg.connect(url, connect_timeout=3) as con:
            con.execute("select 1")
    except psycopg.Error as error:
        return str(error).strip()
    return None


def with_database(url: str, database: str) -> str:
    """`url` pointing at another database of the same server."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    why = _answers(SERVER_URL)
    started_here = False
    if why is not None:
        installed = bool(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
        if not installed and os.environ.get(REQUIRE_COMPONENTS_ENV) != "1":
            component_missing("PostgreSQL is not installed (`sudo bash scripts/postgres-up.sh` installs Debian's postgresql "
                     "and starts the test server)")
        if os.geteuid() != 0:
            component_missing(f"no PostgreSQL server answers at {urlsplit(SERVER_URL).netloc.rpartition('@')[2]} ({why}) "
                     "and starting one needs root: run `sudo bash scripts/postgres-up.sh`")
        up = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=600, check=False)
        if up.returncode != 0:
            component_missing(f"scripts/postgres-up.sh failed (exit {up.returncode}): {(up.stdout + up.stderr)[-1500:]}")
        started_here = True
        why = _answers(SERVER_URL)
        if why is not None:
            component_missing(f"scripts/postgres-up.sh ran, but the server does not accept {SERVER_URL!r}: {why} "
                     "(GPUPOOL_TEST_POSTGRES_URL or GPUPOOL_PG_PASSWORD differ from the server's?)")
    try:
        yield SERVER_URL
    finally:
        if started_here:
            subprocess.run(["bash", str(DOWN)], capture_output=True, timeout=120, check=False)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server, owned by the test role; dropped afterwards."""
    database = f"gpupool_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as con:  # create/drop database refuse a transaction
        con.execute(sql.SQL("create database {}").format(sql.Identifier(database)))
    try:
        yield with_database(postgres_server, database)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as con:
            # `with (force)`: a connection a failed test left open must not keep the database alive
            con.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(database)))
