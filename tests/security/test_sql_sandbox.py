"""Analysts' SQL reads the warehouse and nothing else (issue 11, section 2).

`gpupool sql`, the dashboards' data module, the review packs, the export and the dictionary open the
warehouse through one factory, Warehouse.analyst_connect (pipelines/sandbox.py): DuckDB's own
controls (no external access but the lake the views read, no extensions, configuration locked), and
for typed SQL an allow-list of read-only statements. Each attack below worked on a plain read-only
connection: reading /etc/passwd, the allocator's tokens, the landing zone or the governance outbox;
ATTACH writable; COPY into the landing zone (the next ingest would load it) or the lake; EXPORT
DATABASE; SET/RESET; INSTALL/LOAD; PRAGMA; a second statement smuggled after a SELECT.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipelines.cli import main
from pipelines.sandbox import QueryRefused, check_read_only
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home

pytestmark = pytest.mark.slow  # gpupool sql processes against a demo home

SECRET = "tok-SECRET-7c1e"  # in every planted file: it must never come back in an answer
PASSWD = "root:x:0:"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, small_demo_home: Path) -> Path:
    """A copy of the small demo month, with a tokens file, a landing file and a governance outbox planted."""
    home = copy_home(small_demo_home, tmp_path_factory.mktemp("sandbox") / "gpupool")
    (home / "allocator-tokens.json").write_text(f'{{"{SECRET}": {{"name": "admin", "role": "admin"}}}}\n')
    landing = home / "landing" / "allocator_events" / "2026-11-02"
    landing.mkdir(parents=True, exist_ok=True)
    (landing / "planted.jsonl").write_text(f'{{"token": "{SECRET}"}}\n')
    (home / "governance").mkdir(exist_ok=True)
    with sqlite3.connect(home / "governance" / "outbox.db") as db:
        db.execute("create table if not exists outbox (token text)")
        db.execute("insert into outbox values (?)", [SECRET])
    return home


def _targets(home: Path) -> dict[str, Path]:
    return {
        "tokens": home / "allocator-tokens.json",
        "landing": home / "landing" / "allocator_events" / "2026-11-02" / "planted.jsonl",
        "outbox": home / "governance" / "outbox.db",
        "lock": home / ".writer.lock",
    }


def _writes(home: Path, scratch: Path) -> dict[str, Path]:
    """Where the attacks try to write: the landing zone, the lake, elsewhere."""
    return {
        "landing": home / "landing" / "allocator_events" / "2026-11-03" / "evil.jsonl",
        "lake": home / "lake" / "raw" / "dcgm_samples" / "partition_date=2026-11-03" / "part-0.parquet",
        "lake_flat": home / "lake" / "raw" / "dcgm_samples" / "evil.parquet",
        "scratch": scratch / "out.csv",
        "attached": scratch / "other.duckdb",
        "export": scratch / "export",
    }


def sql(home: Path, query: str, *args: str):
    return CliRunner().invoke(main, ["sql", "--home", str(home), "--format", "csv", *args, "--", query])


def _refused_cleanly(result) -> None:
    assert result.exit_code == 1, (result.exit_code, result.output, repr(result.exception))
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # a message, not a traceback
    assert SECRET not in result.output and PASSWD not in result.output


# -- reading beyond the warehouse ------------------------------------------------------------------
READERS = ("read_text('{path}')", "read_blob('{path}')", "read_csv('{path}', header = false, columns = {{'a': 'varchar'}})",
           "read_json_auto('{path}')")


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("target", ["/etc/passwd", "tokens", "landing", "outbox", "lock", "traversal"])
def test_sql_cannot_read_files_beyond_the_warehouse(home: Path, reader: str, target: str) -> None:
    paths = _targets(home)
    if target == "traversal":
        path = str(home / "lake" / "raw" / "dcgm_samples") + "/../../../allocator-tokens.json"
    else:
        path = paths.get(target, target)
    result = sql(home, f"select * from {reader.format(path=path)}")
    _refused_cleanly(result)
    assert "Permission Error" in result.output


def test_sql_cannot_list_the_home(home: Path) -> None:
    result = sql(home, f"select * from glob('{home}/**')")
    _refused_cleanly(result)
    assert "allocator-tokens" not in result.output


# -- writing, attaching, settings, extensions --------------------------------------------------------
def _attacks(home: Path, scratch: Path) -> list[str]:
    w = _writes(home, scratch)
    return [
        f"attach '{w['attached']}' as other",
        f"attach '{w['attached']}' as other; create table other.t as select * from metrics.pool_daily",
        f"copy (select 'planted' as token) to '{w['landing']}' (format json)",
        f"copy (select * from raw.dcgm_samples limit 5) to '{w['lake']}' (format parquet)",
        f"copy (select * from raw.dcgm_samples limit 5) to '{w['lake_flat']}' (format parquet)",
        f"copy metrics.pool_daily to '{w['scratch']}'",
        f"export database '{w['export']}'",
        f"select 1; copy (select 1) to '{w['landing']}'",
        f"select count(*) from metrics.pool_daily;\ncopy (select 1 as x) to '{w['lake_flat']}' (format parquet);",
        f"explain analyze copy (select 1) to '{w['scratch']}'",
        "set enable_external_access = true",
        "set allowed_directories = ['/']",
        "set memory_limit = '100GB'",
        "reset memory_limit",
        "set lock_configuration = false",
        "install httpfs",
        "load httpfs",
        "load json",
        "pragma enable_profiling",
        "pragma database_list",
        f"import database '{scratch}'",
        "call pragma_version()",
        "checkpoint",
        "use system",
        "detach warehouse",
        "create temp table t as select 1",
        "insert into metrics.catalog_version values ('9.9.9', 0, now()::timestamp)",
        "begin transaction",
    ]


def test_sql_refuses_everything_but_queries(home: Path, tmp_path: Path) -> None:
    for attack in _attacks(home, tmp_path):
        result = sql(home, attack)
        _refused_cleanly(result)
        assert "refused" in result.output and "read-only" in result.output, (attack, result.output)
    assert not [p for p in _writes(home, tmp_path).values() if p.exists()]


def test_refusal_names_the_statement_and_why(home: Path, tmp_path: Path) -> None:
    result = sql(home, f"select 1; copy (select 1) to '{tmp_path}/x.csv'")
    assert result.exit_code == 1
    assert "statement 2 of 2" in result.output and "COPY" in result.output and "writes files" in result.output
    assert "statement 1" not in result.output


# -- legitimate queries still work ---------------------------------------------------------------------
def test_queries_over_metrics_and_the_lake_still_work(home: Path) -> None:
    lake = Warehouse(home).store.files("raw.dcgm_samples")  # the Delta table's current files
    assert lake, "the demo wrote no DCGM Parquet"
    direct = duckdb.connect().sql(f"select count(*) from read_parquet({lake})").fetchall()[0][0]
    cases = {
        "select count(*) as n from raw.dcgm_samples": str(direct),  # a view over the lake's Parquet
        "select count(*) > 0 as ok from staging.stg_dcgm__samples": "true",
        "with d as (select * from metrics.pool_daily) select count(*) > 0 as ok from d": "true",
        "from metrics.pool_period select count(*) > 0 as ok": "true",
        f"select count(*) as n from read_parquet({lake})": str(direct),
        "select count(*) > 0 as ok from (describe metrics.pool_daily)": "true",
    }
    for query, expected in cases.items():
        result = sql(home, query)
        assert result.exit_code == 0, (query, result.output)
        assert result.output.splitlines()[1] == expected, (query, result.output)
    for query in ("describe metrics.pool_daily", "summarize metrics.pool_daily", "show tables",
                  "explain select * from metrics.pool_daily", "-- a comment\nselect 1 as x;",
                  "select day from metrics.pool_daily; select count(*) from metrics.pool_daily"):
        result = sql(home, query)
        assert result.exit_code == 0, (query, result.output)


def test_sql_errors_are_messages(home: Path) -> None:
    for query in ("selec 1", "select * from metrics.no_such_view", "", "-- nothing", "update extensions"):
        result = sql(home, query)
        _refused_cleanly(result)


# -- the factory itself --------------------------------------------------------------------------------
@pytest.fixture
def con(home: Path):
    con = Warehouse(home).analyst_connect()
    yield con
    con.close()


def test_factory_reads_the_warehouse_and_the_lake(con: duckdb.DuckDBPyConnection) -> None:
    assert con.sql("select count(*) from raw.dcgm_samples").fetchall()[0][0] > 0
    assert con.sql("select count(*) from metrics.pool_daily").fetchall()[0][0] > 0


@pytest.mark.parametrize("target", ["/etc/passwd", "tokens", "landing", "outbox"])
def test_factory_cannot_read_other_files(home: Path, con: duckdb.DuckDBPyConnection, target: str) -> None:
    path = _targets(home).get(target, target)
    for reader in ("read_text", "read_blob", "read_csv"):
        with pytest.raises(duckdb.PermissionException):
            con.sql(f"select * from {reader}('{path}')").fetchall()


def test_factory_cannot_write_attach_or_change_settings(home: Path, con: duckdb.DuckDBPyConnection,
                                                        tmp_path: Path) -> None:
    w = _writes(home, tmp_path)
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"copy (select 1) to '{w['landing']}'")
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"copy (select 1) to '{w['scratch']}'")
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"attach '{w['attached']}' as other")
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"export database '{w['export']}'")
    for statement in ("set enable_external_access = true", "set allowed_directories = ['/']", "reset memory_limit",
                      "set lock_configuration = false", "pragma enable_profiling", "set profiling_output = '/tmp/p'"):
        with pytest.raises(duckdb.InvalidInputException, match="locked"):
            con.execute(statement)
    with pytest.raises(duckdb.Error):
        con.execute("install httpfs")
    with pytest.raises(duckdb.Error):
        con.execute("load httpfs")
    assert not [p for k, p in w.items() if k != "lake" and k != "lake_flat" and p.exists()]
    settings_now = dict(con.sql("select name, value from duckdb_settings() where name in ('enable_external_access', "
                                "'lock_configuration', 'autoload_known_extensions', 'autoinstall_known_extensions')"
                                ).fetchall())
    assert settings_now == {"enable_external_access": "false", "lock_configuration": "true",
                            "autoload_known_extensions": "false", "autoinstall_known_extensions": "false"}


def test_two_factory_connections_share_the_locked_settings(home: Path) -> None:
    wh = Warehouse(home)
    first = wh.analyst_connect()
    try:
        second = wh.analyst_connect()  # the same DuckDB instance, already locked: checked, not set again
        try:
            assert second.sql("select count(*) from raw.dcgm_samples").fetchall()[0][0] > 0
            with pytest.raises(duckdb.PermissionException):
                second.sql("select * from read_text('/etc/passwd')").fetchall()
        finally:
            second.close()
    finally:
        first.close()


def test_factory_refuses_an_instance_left_open_with_other_settings(home: Path) -> None:
    """Connections of one process share DuckDB's instance: one left with other folders allowed is refused."""
    from pipelines import sandbox

    wh = Warehouse(home)
    other = duckdb.connect(str(wh.db_path), read_only=True, config=dict(sandbox.OPEN_CONFIG, memory_limit="1GB"))
    try:
        other.execute("set allowed_directories = ['/etc/']")
        other.execute("set enable_external_access = false")
        with pytest.raises(RuntimeError, match="cannot open .* sandboxed"):
            wh.analyst_connect(memory_limit="1GB")
    finally:
        other.close()


# -- the dashboards and the export ---------------------------------------------------------------------
def test_dashboards_query_is_sandboxed(home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dashboards import data

    monkeypatch.setenv("GPUPOOL_HOME", str(home))
    assert data.query("select count(*) as n from metrics.pool_daily").item() > 0
    with pytest.raises(QueryRefused):
        data.query(f"select 1; copy (select 1) to '{tmp_path}/x.csv'")
    with pytest.raises(duckdb.PermissionException):
        data.query("select * from read_text('/etc/passwd')")
    assert not (tmp_path / "x.csv").exists()


def test_export_writes_its_folder_only(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = CliRunner().invoke(main, ["export", "--home", str(home), "--out", str(out), "--views", "pool_daily"])
    assert result.exit_code == 0, result.output
    assert list((out / "pool_daily").glob("day=*/part-0.parquet"))
    for inbound in (home / "landing" / "x", home / "lake", home / "governance" / "y"):
        result = CliRunner().invoke(main, ["export", "--home", str(home), "--out", str(inbound), "--views", "pool_daily"])
        assert result.exit_code == 1 and "cannot export into" in result.output, result.output
        assert not (inbound / "pool_daily").exists()


# -- no SQL text crashes the allow-list or the command ------------------------------------------------
FRAGMENTS = ["select", "1", ";", "copy", "(", ")", "to", "'x.csv'", "from", "metrics.pool_daily", "attach",
             "set", "pragma", "explain", "analyze", "with", "a", "as", "describe", "install", "load", "--", "/*",
             "*/", "'", '"', "read_text('/etc/passwd')", "pivot", "on", "using", "count(*)", "export", "database",
             "call", "use", "values", "update", "extensions", "\n", "$$", "?", "$1"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), st.lists(st.sampled_from(FRAGMENTS), max_size=12).map(" ".join)))
def test_allow_list_never_crashes(text: str) -> None:
    try:
        statements = check_read_only(text)
    except (QueryRefused, duckdb.ParserException):
        return
    assert statements and all(isinstance(s, str) for s in statements)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=10).map(" ".join))
@example("describe")  # nested columns in CSV: once a Polars traceback
@example("update extensions")  # a statement type the Python binding cannot name
def test_sql_command_never_crashes(home: Path, text: str) -> None:
    result = sql(home, text)
    assert result.exit_code in (0, 1), (text, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (text, repr(result.exception))
    assert PASSWD not in result.output
    assert not (home / "x.csv").exists() and not Path("x.csv").exists()
