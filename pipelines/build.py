"""Builds the dbt project in models/ (seeds, staging, marts, metrics, the metric catalog) into a
gpupool home's warehouse, in process with dbt's dbtRunner.

The project's manifest is the one `dbt parse` wrote at set-up (models/target/manifest.json) while no
file of the project changed after it, else parsed once per process (again when a file changed), and
reused by every later build. A build holds
the warehouse's writer lock and runs dbt on a copy of warehouse.duckdb in <home>/dbt/build/; the
copy replaces the file (an atomic rename) only when every model built, so a failed build leaves
the previous warehouse intact, as the old single-transaction runner did. dbt's target folder is
<home>/dbt/target, so homes built at the same time share nothing.

A build's window is a range of UTC days [start, end): on a full refresh or a first build, every day of
the telemetry's sampled_at (raw.dcgm_samples and raw.host_samples); otherwise every day whose rows the
partitions loaded since the last successful build began can change (ops.ingest_log, any source, and
the raw rows written since; pipelines/build_window.py: the allocations alive across those days, the
day after for host counter deltas, ...), or the last day of data when none was. Microbatch models get
it as --event-time-start/--event-time-end (never dbt's default of every day from their `begin`); the
other incremental models as the vars window_start/window_end, from which they merge the rows of the
days, jobs and allocations the window reaches (models/macros/build_window.sql; docs/dbt.md).

An incremental build runs every table and incremental model; views and seeds are left as they are (a
view reads its tables when queried). The build is a full refresh, re-creating everything, when asked
(--full-refresh), on the first build, without telemetry, when a model or seed is missing, or when the
project or dbt changed since the last successful build (a changed model's rows were built by its old
definition): the fingerprint kept in <home>/dbt/state/. A site's own GPU models table (gpupool.yml's
`gpu_models`, pipelines/site.py) is seeded from a copy of the project in <home>/dbt/project/ that holds
it; a change of that table is a change of the project.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from allocator.filemodes import PRIVATE_DIR_MODE, PRIVATE_MODE, copy_file, make_dirs, write_atomic
from pipelines.build_window import rebuild_window, telemetry_days
from pipelines.duckdb_limits import writer_limits
from pipelines.lake.mart_files import settle_modes
from pipelines.lake.reader import search_config
from pipelines.paths import MODELS_DIR
from pipelines.policies.catalog import load_catalog
from pipelines.policies.idle import idle_rule_rows
from pipelines.site import SEED_NAME, site_gpu_models
from pipelines.sources.registry import sources_filling
from pipelines.warehouse import Warehouse

if TYPE_CHECKING:
    from dbt.contracts.graph.manifest import Manifest
# dbt itself is imported where a build runs: importing it takes two seconds, which every `gpupool`
# command that never builds (sql, summary, pack, ...) would otherwise pay at start.

Step = Callable[[str], None]

_MANIFESTS: dict[Path, tuple[int, Manifest]] = {}  # project -> (its latest file change, manifest)
_LAST_BUILD = "last-build"  # under <home>/dbt/: its mtime is when the last successful build started
_STATE = "state"  # under <home>/dbt/: the fingerprint of the project the last successful build built


class BuildError(RuntimeError):
    """The dbt build failed; the message names the failing model and carries DuckDB's error."""


@dataclass(frozen=True)
class ModelBuild:
    name: str  # schema.relation
    kind: str  # seed | view | table | incremental
    seconds: float


def build(
    warehouse: Warehouse,
    full_refresh: bool = False,
    on_step: Step = lambda _msg: None,
    project_dir: Path = MODELS_DIR,
    only: Sequence[str] = (),
) -> list[ModelBuild]:
    """Build seeds and models into the warehouse; `on_step` gets one line per model as it finishes.
    `only`: build just these models (by name) and what they read, not the whole project. Raises
    BuildError naming the model when one fails (the warehouse is then left as it was), ConfigError
    when the site's GPU models table (pipelines/site.py) is bad."""
    project_dir = Path(project_dir).resolve()
    dbt_dir = warehouse.home / "dbt"
    staging = dbt_dir / "build"
    started = time.time()
    copy = staging / warehouse.writer_path.name  # same file name: dbt-duckdb names the database after it
    changed = latest_change(project_dir)
    gpu_models = site_gpu_models()  # first: a bad site file fails before the parse
    manifest = _manifest(project_dir, dbt_dir, copy, changed)
    # a site table's change re-seeds and rebuilds everything priced by it; without one the
    # fingerprint stays what it always was (no full refresh on upgrading to this)
    fingerprint = _fingerprint(project_dir, changed) + (_digest_line(gpu_models) if gpu_models else "")
    with warehouse.writer_lock():
        with warehouse.connect(read_only=False) as con:
            warehouse.ensure_schema(con)
            present = set(con.execute("select table_schema, table_name from information_schema.tables").fetchall())
            project_changed = _project_changed(manifest, dbt_dir / _STATE, fingerprint, present)
            window, full_refresh = _event_time_window(con, warehouse, full_refresh or project_changed)
        shutil.rmtree(staging, ignore_errors=True)
        make_dirs(staging, PRIVATE_DIR_MODE)
        copy_file(warehouse.writer_path, copy, PRIVATE_MODE)  # it becomes the writers' file: 0600 from the start
        run_dir = project_dir
        if gpu_models:
            run_dir = site_project(project_dir, site_project_dir(warehouse.home), gpu_models)
            manifest = _seeded_from(manifest, run_dir)
        args = [
            "build", "--resource-type", "seed", "--resource-type", "model",
            *_project_args(run_dir, dbt_dir, copy, window),
        ]
        if full_refresh:
            args.append("--full-refresh")
        if only:  # these models and everything they read, views and seeds too
            args += ["--select", *(f"+{name}" for name in only)]
        elif not project_changed:
            # the views and seeds built from this very project are in place (views read their tables
            # when queried): only the tables and incrementals, rebuilt whole on a full refresh
            args += ["--select", "config.materialized:table", "config.materialized:incremental"]
        args += ["--event-time-start", window[0].isoformat(), "--event-time-end", window[1].isoformat()]
        from dbt.cli.main import dbtRunner

        try:
            try:
                result = dbtRunner(manifest=manifest, callbacks=[_progress(on_step)]).invoke(args)
            finally:
                _close_dbt_connection()
            _raise_on_failure(result, dbt_dir)
            settle_modes(warehouse.home)
            os.replace(copy, warehouse.writer_path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _keep_state(dbt_dir / _STATE, fingerprint)
        stamp = dbt_dir / _LAST_BUILD
        stamp.touch()
        os.utime(stamp, (started, started))
    warehouse.publish_unless_deferred("build", "full refresh" if full_refresh else None)
    return [
        ModelBuild(_relation(r.node), "seed" if r.node.resource_type == "seed" else r.node.config.materialized,
                   r.execution_time)
        for r in result.result.results
    ]


def raw_tables_read(warehouse: Warehouse, models: Sequence[str], project_dir: Path = MODELS_DIR) -> set[str]:
    """The raw tables (dbt sources) that `models` (by name) read, directly or through other models."""
    project_dir = Path(project_dir).resolve()
    dbt_dir = warehouse.home / "dbt"
    manifest = _manifest(project_dir, dbt_dir, dbt_dir / "build" / warehouse.writer_path.name,
                         latest_change(project_dir))
    wanted = {uid for uid, node in manifest.nodes.items() if node.resource_type == "model" and node.name in models}
    if missing := set(models) - {manifest.nodes[uid].name for uid in wanted}:
        raise BuildError(f"no model named {', '.join(sorted(missing))} in {project_dir}")
    tables: set[str] = set()
    seen: set[str] = set()
    while wanted:
        uid = wanted.pop()
        seen.add(uid)
        if uid in manifest.sources:
            tables.add(manifest.sources[uid].name)
        elif uid in manifest.nodes:
            wanted.update(set(getattr(manifest.nodes[uid].depends_on, "nodes", ())) - seen)  # a seed reads none
    return tables


def site_project_dir(home: Path) -> Path:
    """Where a home's builds keep the project with the site's GPU models table (site_project)."""
    return home / "dbt" / "project"


def site_project(project_dir: Path, folder: Path, gpu_models: str) -> Path:
    """The project dbt runs in when the site has its own GPU models table: `folder` links to every file
    of `project_dir` but that seed, which it holds (dbt reads a seed's rows from the project it runs in;
    the models and macros stay the packaged ones, and the installed tree is never written)."""
    shutil.rmtree(folder, ignore_errors=True)
    make_dirs(folder / "seeds", PRIVATE_DIR_MODE)
    for entry in project_dir.iterdir():
        if entry.name not in ("seeds", "target", "logs"):
            (folder / entry.name).symlink_to(entry)
    seed = f"{SEED_NAME}.csv"
    for entry in (project_dir / "seeds").iterdir():
        if entry.name != seed:
            (folder / "seeds" / entry.name).symlink_to(entry)
    write_atomic(folder / "seeds" / seed, gpu_models, PRIVATE_MODE)
    return folder


def _seeded_from(manifest: Manifest, project: Path) -> Manifest:
    """`manifest` with the GPU models seed read from `project`: dbt-duckdb loads a seed's rows from its
    node's root_path, not from the project dbt runs in. The cached manifest is left as it is."""
    nodes = {uid: dataclasses.replace(node, root_path=str(project))
             if node.resource_type == "seed" and node.name == SEED_NAME else node
             for uid, node in manifest.nodes.items()}
    return dataclasses.replace(manifest, nodes=nodes)


def _digest_line(gpu_models: str) -> str:
    return f"site {SEED_NAME} {hashlib.sha256(gpu_models.encode()).hexdigest()}\n"


def _relation(node) -> str:
    """schema.name of a built node (its relation_name is "database"."schema"."name")."""
    return node.relation_name.replace('"', "").split(".", 1)[-1]


def _project_args(project_dir: Path, dbt_dir: Path, db_path: Path,
                  window: tuple[dt.date, dt.date] | None = None) -> list[str]:
    """dbt's arguments for the project and the home (`dbt_vars`; `window`: the build's [start, end) days)."""
    return [
        "--project-dir", str(project_dir), "--profiles-dir", str(project_dir),
        "--target-path", str(dbt_dir / "target"), "--log-path", str(dbt_dir / "logs"),
        "--vars", json.dumps(dbt_vars(db_path, dbt_dir.parent, window)),
        # nothing on the console (progress and errors go through on_step and BuildError); the log file
        # keeps info, not every SQL statement; target/*.json is not rewritten on every build
        "--log-level", "none", "--log-level-file", "info", "--no-write-json",
        "--no-use-colors", "--no-send-anonymous-usage-stats", "--no-version-check",
    ]


def dbt_vars(db_path: Path, home: Path, window: tuple[dt.date, dt.date] | None = None) -> dict:
    """The vars every dbt invocation on a home passes: the database file, DuckDB's limits for the build
    and the home as its file search path (the lake views' files are relative to it; models/profiles.yml
    gives both to duckdb.connect), the idle rule of the policy catalog
    (marts.dim_idle_rules: one definition for the warehouse and the live policy) and, for a build, its
    [start, end) days, which the incremental models read as window_start and window_end
    (models/macros/build_window.sql)."""
    variables = {"warehouse_path": db_path.as_posix(),
                 "duckdb_config": writer_limits(home).config() | search_config(home),
                 "idle_rules": idle_rule_rows(load_catalog())}
    if window is not None:
        variables |= {"window_start": window[0].isoformat(), "window_end": window[1].isoformat()}
    return variables


def _manifest(project_dir: Path, dbt_dir: Path, db_path: Path, changed: int) -> Manifest:
    """The project's manifest (`changed`: its latest file change): the set-up's target/manifest.json when
    it is current (loading it takes a tenth of a parse), else parsed; kept for the process until a
    file changes."""
    from dbt.cli.main import dbtRunner
    from dbt.contracts.graph.manifest import Manifest, WritableManifest

    if project_dir in _MANIFESTS and _MANIFESTS[project_dir][0] == changed:
        return _MANIFESTS[project_dir][1]
    if prepared_manifest_is_current(project_dir, changed):
        prepared = prepared_manifest_path(project_dir)
        manifest = Manifest.from_writable_manifest(WritableManifest.read_and_check_versions(str(prepared)))
    else:
        result = dbtRunner().invoke(["parse", *_project_args(project_dir, dbt_dir, db_path)])
        if not result.success:
            raise BuildError(f"dbt could not parse {project_dir}: {result.exception}")
        manifest = result.result
    _MANIFESTS[project_dir] = (changed, manifest)
    return manifest


def prepared_manifest_path(project_dir: Path) -> Path:
    """Where `dbt parse` at set-up writes the project's manifest (the one Dagster loads)."""
    return project_dir / "target" / "manifest.json"


def prepared_manifest_is_current(project_dir: Path, changed: int | None = None) -> bool:
    """The set-up's manifest exists and no file of the project changed after it (`changed`: the
    project's latest file change, when the caller has it)."""
    path = prepared_manifest_path(project_dir)
    if not path.is_file():
        return False
    return path.stat().st_mtime_ns >= (latest_change(project_dir) if changed is None else changed)


def _project_changed(manifest: Manifest, state: Path, fingerprint: str, present: set[tuple[str, str]]) -> bool:
    """Whether the next build must be a full refresh: no state was kept (no successful build), the
    project or dbt changed since the last successful build (a changed model's incremental rows were
    built by its old definition; a new model has no history), or a model or seed is missing from the
    warehouse (`present`: its (schema, relation) pairs)."""
    stamp = state / "fingerprint"
    if not stamp.is_file() or stamp.read_text() != fingerprint:
        return True
    return any(
        node.resource_type in ("model", "seed") and (node.schema, node.alias) not in present
        for node in manifest.nodes.values()
    )


def _keep_state(state: Path, fingerprint: str) -> None:
    """Keep the fingerprint of the project just built, which the next build compares with."""
    stamp = state / "fingerprint"
    if stamp.is_file() and stamp.read_text() == fingerprint:
        return
    make_dirs(state)
    scratch = state / "fingerprint.new"
    scratch.write_text(fingerprint)
    os.replace(scratch, stamp)


def _fingerprint(project_dir: Path, changed: int) -> str:
    """The project as built: its folder, the time of its latest file change, and the dbt that built it
    (an upgrade may change how a view is created)."""
    from dbt.adapters.duckdb.__version__ import version as duckdb_adapter_version
    from dbt.version import __version__ as dbt_version

    return f"{project_dir}\n{changed}\ndbt-core {dbt_version}, dbt-duckdb {duckdb_adapter_version}\n"


def latest_change(project_dir: Path) -> int:
    """The newest modification time (ns) of a file of the project, outside target/ and logs/."""
    latest = 0
    for folder, dirs, files in os.walk(project_dir):
        if folder == str(project_dir):
            dirs[:] = [d for d in dirs if d not in ("target", "logs")]
        for name in files:
            latest = max(latest, os.stat(os.path.join(folder, name)).st_mtime_ns)
    return latest


def _progress(on_step: Step) -> Callable:
    def callback(event) -> None:
        name = event.info.name
        if name not in ("LogModelResult", "LogSeedResult"):
            return
        data = event.data
        relation = f"{data.node_info.node_relation.schema}.{data.node_info.node_relation.alias}"
        status = "error" if data.status == "error" else "ok"
        on_step(f"[{data.index}/{data.total}] {relation} {status} in {data.execution_time:.2f}s")

    return callback


def _raise_on_failure(result, dbt_dir: Path) -> None:
    if result.success:
        return
    if result.exception is not None:
        raise BuildError(f"dbt failed: {result.exception}")
    failed = [r for r in result.result.results if r.status in ("error", "fail")]
    if not failed:
        raise BuildError(f"dbt failed; see {dbt_dir / 'logs' / 'dbt.log'}")
    r = failed[0]
    message = " ".join((r.message or "").split())
    raise BuildError(f"models/{r.node.original_file_path}: building {_relation(r.node)} failed: {message}")


def _close_dbt_connection() -> None:
    """dbt-duckdb keeps its DuckDB connection open for the process (keep_open); close it so the file
    is checkpointed and free for the rename and for other connections."""
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager

    try:
        env = DuckDBConnectionManager.env()
    except Exception:  # noqa: BLE001 - dbt-duckdb raises a bare Exception when no build opened one
        return
    env.close()
    DuckDBConnectionManager.close_all_connections()


def _event_time_window(con: duckdb.DuckDBPyConnection, warehouse: Warehouse,
                       full_refresh: bool) -> tuple[tuple[dt.date, dt.date], bool]:
    """[start, end) of the days the build rebuilds, and whether it must be a full refresh. Without
    samples, today alone, as a full refresh: the microbatch models are created empty rather than
    iterated day by day from their `begin`, and the other models, which read no telemetry then, are
    rebuilt whole. On a full refresh or a first build: every day of telemetry. Otherwise the days
    whose rows the partitions loaded since the last successful build began can change
    (pipelines.build_window), or the last day of data when nothing was loaded."""
    first, last = telemetry_days(con)
    if first is None:
        today = dt.datetime.now(dt.UTC).date()
        return (today, today + dt.timedelta(days=1)), True
    stamp = warehouse.home / "dbt" / _LAST_BUILD
    if full_refresh or not stamp.exists():
        return (first, last + dt.timedelta(days=1)), True
    since = dt.datetime.fromtimestamp(stamp.stat().st_mtime, dt.UTC).replace(tzinfo=None)
    changed, host_changed = _changed_days(con, since)
    return rebuild_window(con, changed, host_changed) or (last, last + dt.timedelta(days=1)), False


def _changed_days(con: duckdb.DuckDBPyConnection, since: dt.datetime) -> tuple[list[dt.date], list[dt.date]]:
    """The partitions loaded (or re-loaded) since `since`, any source, and those of them with host
    samples: ops.ingest_log's runs, and the raw rows the day-by-day models and the governance marts read
    that were written since (a landing file's records on another day are merged into that day without a
    log row)."""
    host_sources = sources_filling(["host_samples"])
    rows = con.execute(
        "select partition_date, bool_or(is_host) from ("
        " select partition_date, ingest_source in (select unnest(?::varchar[])) as is_host"
        " from ops.ingest_log where finished_at >= ?"
        " union all select distinct partition_date, false from raw.job_events where ingested_at >= ?"
        " union all select distinct partition_date, false from raw.job_gpus where ingested_at >= ?"
        " union all select distinct partition_date, false from raw.dcgm_samples where ingested_at >= ?"
        " union all select distinct partition_date, true from raw.host_samples where ingested_at >= ?"
        # the governance marts' records (an audit record or a decision-log line filed under its own day)
        " union all select distinct partition_date, false from raw.audit_events where ingested_at >= ?"
        " union all select distinct partition_date, false from raw.governance_actions where ingested_at >= ?)"
        " where partition_date is not null group by partition_date order by partition_date",
        [host_sources, since, since, since, since, since, since, since],
    ).fetchall()
    return [d for d, _ in rows], [d for d, is_host in rows if is_host]
