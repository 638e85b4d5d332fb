"""Analysts' access to the warehouse: a DuckDB connection that reads the warehouse and nothing else,
and the allow-list of statements that SQL typed by a person may contain (issue 11, section 2).

A plain `duckdb.connect(path, read_only=True)` is not a sandbox: it refuses writes to the warehouse
file, but `read_text('/etc/shadow')`, `ATTACH 'other.db'` (writable), `COPY ... TO '<any path>'`,
`EXPORT DATABASE`, `INSTALL`/`LOAD` and `SET` all still work. Two defences, each enough on its own for
the cases the other misses:

1. `connect()` (DuckDB's own controls, verified on the pinned DuckDB by tests/security/):
   - opened read-only; `enable_external_access = false`, so no file outside `allowed_directories`
     and `allowed_paths` can be opened, by any function or statement, read or write;
   - `allowed_directories` = exactly the lake folders the views read with read_parquet (for the
     warehouse, HOME/lake/raw/dcgm_samples/; the views name it lake/raw/dcgm_samples/, relative to the
     home, which `file_search_path` is set to, and DuckDB checks such a name from the working folder,
     so that folder's lake/raw/dcgm_samples/ is allowed too), plus the output folder for the export's
     internal connection. DuckDB adds the database file, its WAL and its spill folder (`temp_directory`, 3. below)
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

3. Resources (issue 26): what one query may take.
   - temporary disk: DuckDB spills what does not fit in `memory_limit` to `temp_directory`, by
     default `warehouse.duckdb.tmp/` beside the release, on the disk the lake and landing share, up
     to 90% of its free space. Here each process spills under a folder of its own,
     `<base>/gpupool-sql-<pid>@<host>-<random>/<release>/`, capped at `max_temp_directory_size`
     (GPUPOOL_SQL_TEMP_LIMIT, default DEFAULT_TEMP_LIMIT, per open release). The base is
     GPUPOOL_SQL_TEMP_DIR, else the system temp folder ($TMPDIR, /tmp): off the lake's disk, and
     local to the machine, so that a PID in a folder's name can be checked (a home on a volume
     shared by containers cannot). Where /tmp is a RAM-backed tmpfs, point GPUPOOL_SQL_TEMP_DIR at
     a disk folder. DuckDB deletes a release's spill folder when its last connection closes; the
     process's folder goes at exit (atexit; `gpupool sql` turns SIGTERM, SIGHUP and SIGINT into an exit);
     folders of processes that are gone (kill -9) are swept at the next open.
   - time: DuckDB has no statement timeout; `guarded()` interrupts the connection from a timer
     after GPUPOOL_SQL_TIMEOUT_S (default DEFAULT_TIMEOUT_S) seconds.
   - rows: callers fetch in batches from a streaming reader (`con.sql(q).to_arrow_reader(n)`: DuckDB
     runs the query as the batches are read; `con.execute(q).to_arrow_reader()` copies the whole
     result first, as bench/README.md notes for the pinned DuckDB), never the whole result at once, so a caller's row limit holds and
     DuckDB's memory limit bounds the query.
   Running out of one of them raises QueryLimitExceeded: the limit, its value, the variable that
   sets it and how to go on.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import duckdb

from pipelines.duckdb_limits import MEMORY_LIMIT_ENV
from pipelines.lake.reader import search_config

# The analysts' limits (issue 26), each overridable by its variable (.env.example).
TEMP_DIR_ENV = "GPUPOOL_SQL_TEMP_DIR"  # where the per-process spill folders go (default: the system temp folder)
TEMP_LIMIT_ENV = "GPUPOOL_SQL_TEMP_LIMIT"  # the most temporary disk one open release may fill
DEFAULT_TEMP_LIMIT = "4GB"
TIMEOUT_ENV = "GPUPOOL_SQL_TIMEOUT_S"  # seconds a query may run, fetching included
DEFAULT_TIMEOUT_S = 300.0
SPILL_PREFIX = "gpupool-sql-"  # <base>/gpupool-sql-<pid>@<host>-<random>/

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


class QueryLimitExceeded(RuntimeError):
    """A query stopped at one of the sandbox's limits (time, memory, temporary disk): which limit, its
    value, the variable that sets it, and what to do."""


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
            writable_dir: str | Path | None = None, home: Path | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the DuckDB file `db_path` that can open no other file than those under
    `readable_dirs` (the lake folders its views read) and, for internal writers such as the export,
    `writable_dir`. `home`: the gpupool home, whose views name their lake files relative to it
    (pipelines/lake/reader.py): it is searched for them, and each readable folder inside it is also
    allowed by that relative name taken from the working folder, where DuckDB checks a relative path
    before it searches (tests/lake/test_moved_home.py holds DuckDB to it). Raises FileNotFoundError
    when there is no database file."""
    db_path = Path(db_path).resolve()
    if not db_path.exists():
        raise FileNotFoundError(f"no warehouse at {db_path}: run `gpupool demo` or `gpupool ingest` first")
    folders = {_folder(Path(d)) for d in readable_dirs}
    relative = set()
    if home is not None:
        root = _folder(Path(home))
        relative = {_folder(Path(d.removeprefix(root))) for d in folders if d.startswith(root) and d != root}
    dirs = sorted(folders | relative | ({_folder(Path(writable_dir))} if writable_dir else set()))
    spill = spill_folder(db_path)
    config: dict[str, object] = dict(OPEN_CONFIG, temp_directory=str(spill), max_temp_directory_size=temp_limit())
    if home is not None:
        config |= search_config(home)
    if memory_limit:
        config["memory_limit"] = memory_limit
    try:
        con = duckdb.connect(str(db_path), read_only=True, config=config)
    except duckdb.ConnectionException as err:
        if "different configuration" not in str(err):
            raise
        raise RuntimeError(f"cannot open {db_path} sandboxed: another connection of this process has it open with "
                           "other settings (close it first)") from None
    try:
        _harden(con, dirs, db_path, spill)
    except BaseException:
        con.close()
        raise
    return con


def _harden(con: duckdb.DuckDBPyConnection, dirs: Sequence[str], db_path: Path, spill_dir: Path) -> None:
    spill = _folder(spill_dir)  # DuckDB allows the database's own spill folder itself
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
    if _folder(Path(str(_setting(con, "temp_directory")))) != spill:
        problems.append(f"it spills to {_setting(con, 'temp_directory')}, not {spill}")
    if problems:
        raise RuntimeError(
            f"cannot open {db_path} sandboxed: {'; '.join(problems)} (another connection of this process "
            "opened it with other settings; close it first)"
        )


def _setting(con: duckdb.DuckDBPyConnection, name: str) -> object:
    return con.execute("select current_setting(?)", [name]).fetchall()[0][0]


# -- resources: temporary disk, time (issue 26) ------------------------------------------------------
def temp_limit(env: Mapping[str, str] = os.environ) -> str:
    """The most temporary disk one open release may fill: GPUPOOL_SQL_TEMP_LIMIT, else DEFAULT_TEMP_LIMIT.
    Raises ValueError when the variable is not a size DuckDB reads."""
    return _checked_size(env.get(TEMP_LIMIT_ENV, "").strip() or DEFAULT_TEMP_LIMIT)


@lru_cache(maxsize=16)
def _checked_size(value: str) -> str:
    try:  # DuckDB's own parser, as pipelines/duckdb_limits.py does for the memory limit
        duckdb.connect(config={"max_temp_directory_size": value}).close()
    except duckdb.Error as err:
        raise ValueError(f"{TEMP_LIMIT_ENV}={value!r} is not a size DuckDB reads ({err}); give one like 4GB or "
                         f"500MB, or unset it for {DEFAULT_TEMP_LIMIT}") from None
    return value


def timeout_s(env: Mapping[str, str] = os.environ) -> float:
    """Seconds a query may run: GPUPOOL_SQL_TIMEOUT_S, else DEFAULT_TIMEOUT_S. Raises ValueError when the
    variable is not a positive number."""
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds above 0; give one like 600, or unset "
                         f"it for {DEFAULT_TIMEOUT_S:g}")
    return value


def spill_base(env: Mapping[str, str] = os.environ) -> Path:
    """The folder the processes' spill folders go under: GPUPOOL_SQL_TEMP_DIR, else the system temp folder."""
    configured = env.get(TEMP_DIR_ENV, "").strip()
    return Path(configured).resolve() if configured else Path(tempfile.gettempdir()).resolve()


_process_lock = threading.Lock()
_process_dirs: dict[tuple[int, Path], Path] = {}  # (pid, base) -> this process's folder there


def spill_folder(db_path: Path) -> Path:
    """Where connections of this process to the database file `db_path` spill: a folder per release under
    this process's own folder (created, with the sweep of dead processes' folders, on first use). Every
    connection of a process to one file must name the same folder: DuckDB shares one instance for them."""
    base = spill_base()
    with _process_lock:
        key = (os.getpid(), base)  # a forked child gets its own folder
        folder = _process_dirs.get(key)
        sweep_stale(base)  # every open: a listing of the base, and what a kill -9 left is gone by the next query
        if folder is None or not folder.is_dir():
            base.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{os.getpid()}@{_host()}-", dir=base))  # mode 0700
            if not _process_dirs:
                atexit.register(remove_spill_folders)
            _process_dirs[key] = folder
    # DuckDB creates this one when it first spills, and deletes it when the release's last connection closes
    return folder / hashlib.sha256(str(db_path).encode()).hexdigest()[:16]


def remove_spill_folders() -> None:
    """Remove this process's spill folders (at exit; DuckDB has closed or is closing its instances)."""
    with _process_lock:
        for (pid, _base), folder in list(_process_dirs.items()):
            if pid == os.getpid():
                shutil.rmtree(folder, ignore_errors=True)
                del _process_dirs[(pid, _base)]


def sweep_stale(base: Path) -> list[Path]:
    """Remove the spill folders under `base` of this user's processes on this machine that are gone (a
    kill -9 leaves them behind); the folders removed."""
    removed = []
    try:
        entries = list(base.glob(f"{SPILL_PREFIX}*"))
    except OSError:
        return removed
    for entry in entries:
        owner, _, _random = entry.name[len(SPILL_PREFIX):].rpartition("-")
        pid_text, _, host = owner.partition("@")
        if not pid_text.isdigit() or host != _host():
            continue
        try:
            st = entry.lstat()
        except OSError:
            continue
        if not entry.is_dir() or entry.is_symlink() or st.st_uid != os.getuid() or _alive(int(pid_text)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _host() -> str:
    return socket.gethostname().replace("/", "_").replace("-", "_") or "localhost"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:  # a killed process its parent has not reaped yet is a zombie: gone all the same
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@contextmanager
def guarded(con: duckdb.DuckDBPyConnection, timeout: float | None = None,
            memory_knob: str = MEMORY_LIMIT_ENV) -> Iterator[None]:
    """Run and fetch queries on `con` (a sandboxed connection) within the statement timeout (`timeout`
    seconds, default GPUPOOL_SQL_TIMEOUT_S): past it the connection is interrupted. DuckDB's errors at a
    limit (time, memory, temporary disk) become QueryLimitExceeded, naming the limit and how to raise it;
    `memory_knob` is what sets this connection's memory limit. Fetch inside the block: with a streaming
    result the query runs while rows are fetched."""
    seconds = timeout_s() if timeout is None else timeout
    fired = threading.Event()

    def interrupt() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(seconds, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    except duckdb.InterruptException:
        if not fired.is_set():
            raise  # Ctrl-C, not the timeout
        raise QueryLimitExceeded(
            f"the query ran past {seconds:g} s ({TIMEOUT_ENV}={seconds:g}); narrow it (a filter on day, fewer "
            f"columns, a LIMIT) or raise the limit, e.g. {TIMEOUT_ENV}={seconds * 4:g}") from None
    except duckdb.OutOfMemoryException as err:
        raise QueryLimitExceeded(_memory_message(con, str(err), memory_knob)) from None
    except duckdb.IOException as err:
        if "No space left" not in str(err):
            raise
        raise QueryLimitExceeded(
            f"the query filled the disk it spills to ({_setting_or(con, 'temp_directory')}) before its cap of "
            f"{temp_limit()}; point {TEMP_DIR_ENV} at a folder on a disk with room, lower {TEMP_LIMIT_ENV}, or "
            "narrow the query") from None
    finally:
        timer.cancel()


def _memory_message(con: duckdb.DuckDBPyConnection, error: str, memory_knob: str) -> str:
    memory = _setting_or(con, "memory_limit")
    if "max_temp_directory_size" in error:
        cap = temp_limit()
        return (f"the query needed more than its {memory} of memory ({memory_knob}) plus {cap} of temporary disk "
                f"({TEMP_LIMIT_ENV}={cap}, spilled under {spill_base()}); narrow it (a filter on day, fewer "
                f"columns, an aggregate) or raise the limit, e.g. {TEMP_LIMIT_ENV}=20GB")
    return (f"the query needed more than its memory limit of {memory} ({memory_knob}) and could not spill the rest "
            f"to disk; narrow it (a filter on day, fewer columns, an aggregate) or raise {memory_knob} "
            f"(DuckDB: {error.splitlines()[0]})")


def _setting_or(con: duckdb.DuckDBPyConnection, name: str) -> str:
    try:
        return str(_setting(con, name))
    except duckdb.Error:
        return "?"
