"""Analysts' access to the warehouse: a DuckDB connection that reads the warehouse and nothing else,
and the allow-list of statements that SQL typed by a person may contain (issue 11, section 2).

A plain `duckdb.connect(path, read_only=True)` is not a sandbox: it refuses writes to the warehouse
file, but `read_text('/etc/shadow')`, `ATTACH 'other.db'` (writable), `COPY ... TO '<any path>'`,
`EXPORT DATABASE`, `INSTALL`/`LOAD` and `SET` all still work. Two defences, each enough on its own for
the cases the other misses:

1. `connect()` (DuckDB's own controls, verified on DuckDB 2.0.1 by tests/security/):
   - opened read-only; `enable_external_access = false`, so no file outside `allowed_directories`
     and `allowed_paths` can be opened, by any function or statement, read or write;
   - `allowed_directories` = exactly the lake folders the views read with read_parquet (for the
     warehouse, HOME/lake/raw/dcgm_samples/), plus the output folder for the export's internal
     connection. DuckDB adds the database file, its WAL and its spill folder (warehouse.duckdb.tmp/)
     itself. landing/, governance/, the allocator's tokens and everything else stay unreadable;
   - no extensions installed or loaded on demand (`autoinstall/autoload_known_extensions`,
     `allow_community_extensions` off), no persistent secrets, no Python replacement scans;
   - `lock_configuration = true` last, so no `SET`/`RESET`/`PRAGMA` can undo any of it.
   DuckDB refuses `allowed_directories` in the connect-time config ("before the database is
   started"), so it and the two switches after it are SET on the open connection. DuckDB shares one
   database instance between connections of a process opened with the same configuration: a second
   connection finds the first one's locked settings, which are then checked instead of set.

2. `check_read_only(sql)`: the statements of the text, as DuckDB's own parser splits and types them
   (`duckdb.extract_statements`), must all be SELECT statements (which covers WITH ... SELECT,
   FROM-first queries, VALUES, TABLE, DESCRIBE, SHOW, SUMMARIZE and PIVOT ... IN (...)) or an EXPLAIN
   [ANALYZE] of one. Anything else (COPY, EXPORT, ATTACH, DETACH, USE, SET, RESET, INSTALL, LOAD,
   PRAGMA (IMPORT DATABASE is one), CALL, CHECKPOINT, transactions, DDL and DML) is refused, with the
   statement and the reason. It matters because a COPY TO into an allowed folder (the lake, which
   the views read) would pass the first defence.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import duckdb

# Settings DuckDB accepts when the database is opened.
OPEN_CONFIG = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "allow_persistent_secrets": False,
    "python_enable_replacements": False,  # no `select * from some_python_variable`
}

READ_ONLY_KINDS = "SELECT, WITH ... SELECT, FROM ..., VALUES, TABLE, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN SELECT"

_WHY = {
    "COPY": "it reads or writes files",
    "COPY_DATABASE": "it writes another database",
    "EXPORT": "it writes files",
    "ATTACH": "it opens another database file",
    "DETACH": "it changes which databases are open",
    "SET": "it changes settings or the current database",
    "VARIABLE_SET": "it changes session state",
    "LOAD": "it installs or loads extensions",
    "EXTENSION": "it installs or loads extensions",
    "PRAGMA": "pragmas change settings or run other statements (IMPORT DATABASE is one); "
              "read pragma tables with SELECT * FROM pragma_table_info('...')",
    "CALL": "CALL runs procedures such as CHECKPOINT; read table functions with SELECT * FROM fn(...)",
    "TRANSACTION": "transactions are for writers",
    "PREPARE": "prepared statements are not needed here",
    "EXECUTE": "prepared statements are not needed here",
    "MULTI": "it runs several statements (a PIVOT without IN (...) creates a type first); "
             "list the pivot's values with PIVOT ... ON col IN (...)",
    "LOGICAL_PLAN": "it is not a query",
}
_CHANGES = "it would change the warehouse"

_LEADING_NOISE = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)
_EXPLAIN = re.compile(r"\Aexplain\s+(?:\(\s*[^()]*\)\s*)?(?:analy[sz]e\s+)?", re.IGNORECASE)


class QueryRefused(ValueError):
    """SQL text that the read-only allow-list does not run: what was refused, and why."""


def _text(statement_sql: str) -> str:
    return _LEADING_NOISE.sub("", statement_sql).strip().rstrip(";").strip()


def _head(text: str) -> str:
    short = " ".join(text.split())
    return short if len(short) <= 60 else short[:57] + "..."


def _is_select(sql: str) -> bool:
    try:
        statements = duckdb.extract_statements(sql)
        return len(statements) == 1 and statements[0].type == duckdb.StatementType.SELECT
    except Exception:  # noqa: BLE001 - anything the parser cannot type is not a plain SELECT
        return False


def check_read_only(sql: str) -> list[str]:
    """The statements of `sql` if every one is a read-only query; QueryRefused otherwise.

    DuckDB's parser errors (duckdb.ParserException) pass through unchanged: the text is not SQL.
    """
    try:
        statements = [(s.query, s.type.name) for s in duckdb.extract_statements(sql)]
    except duckdb.Error:
        raise
    except Exception as err:  # noqa: BLE001 - e.g. a statement type the Python binding cannot name
        raise QueryRefused(
            f"refused: the text holds a statement this read-only access does not know ({err}); "
            f"only read-only queries run here ({READ_ONLY_KINDS})"
        ) from None
    if not statements:
        raise QueryRefused("refused: no statement to run (the text is empty or only comments)")
    texts = []
    for number, (query, kind) in enumerate(statements, start=1):
        text = _text(query)
        where = f"statement {number} of {len(statements)}, " if len(statements) > 1 else ""
        if kind == "SELECT":
            texts.append(query)
            continue
        if kind == "EXPLAIN":
            inner = _EXPLAIN.sub("", text, count=1)
            if inner != text and _is_select(inner):
                texts.append(query)
                continue
            why = "EXPLAIN is allowed only of a SELECT (explain [analyze] select ...)"
        else:
            why = _WHY.get(kind, _CHANGES)
        raise QueryRefused(
            f"refused {where}`{_head(text)}` ({kind} statement): {why}. This access is read-only on "
            f"the warehouse and runs only queries ({READ_ONLY_KINDS})."
        )
    return texts


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _folder(path: Path) -> str:
    # a trailing slash: '/lake/raw/dcgm_samples/' must not also allow '/lake/raw/dcgm_samples_other/'
    return str(Path(path).resolve()).rstrip("/") + "/"


def connect(db_path: str | Path, readable_dirs: Iterable[str | Path] = (), *, memory_limit: str | None = None,
            writable_dir: str | Path | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the DuckDB file `db_path` that can open no other file than those under
    `readable_dirs` (the lake folders its views read) and, for internal writers such as the export,
    `writable_dir`. Raises FileNotFoundError when there is no database file."""
    db_path = Path(db_path).resolve()
    if not db_path.exists():
        raise FileNotFoundError(f"no warehouse at {db_path}: run `gpupool demo` or `gpupool ingest` first")
    dirs = sorted({_folder(Path(d)) for d in readable_dirs} | ({_folder(Path(writable_dir))} if writable_dir else set()))
    config: dict[str, object] = dict(OPEN_CONFIG)
    if memory_limit:
        config["memory_limit"] = memory_limit
    con = duckdb.connect(str(db_path), read_only=True, config=config)
    try:
        _harden(con, dirs, db_path)
    except BaseException:
        con.close()
        raise
    return con


def _harden(con: duckdb.DuckDBPyConnection, dirs: Sequence[str], db_path: Path) -> None:
    spill = _folder(Path(f"{db_path}.tmp"))  # DuckDB allows the database's own spill folder itself
    if not _setting(con, "lock_configuration"):
        steps = [f"set allowed_directories = [{', '.join(_quote(d) for d in dirs)}]"] if dirs else []
        for step in [*steps, "set enable_external_access = false", "set lock_configuration = true"]:
            try:
                con.execute(step)
            except duckdb.Error:
                pass  # another connection of this process got there first (a shared instance): checked below
    allowed = set(_setting(con, "allowed_directories") or [])
    expected = set(dirs) | {spill}
    problems = []
    if _setting(con, "enable_external_access"):
        problems.append("external access is on")
    if not _setting(con, "lock_configuration"):
        problems.append("the configuration is not locked")
    if not allowed <= expected or not set(dirs) <= allowed:
        problems.append(f"allowed directories are {sorted(allowed)}, not {sorted(expected)}")
    for name in ("autoinstall_known_extensions", "autoload_known_extensions", "allow_community_extensions"):
        if _setting(con, name):
            problems.append(f"{name} is on")
    if problems:
        raise RuntimeError(
            f"cannot open {db_path} sandboxed: {'; '.join(problems)} (another connection of this process "
            "opened it with other settings; close it first)"
        )


def _setting(con: duckdb.DuckDBPyConnection, name: str) -> object:
    return con.execute("select current_setting(?)", [name]).fetchall()[0][0]
