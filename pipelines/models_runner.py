"""Builds models/: seeds, staging views, mart tables, metrics views, and the metric catalog.

A model is a SQL file; its name is the file name and its layer the folder:
  models/staging/<name>.sql  -> view  staging.<name>
  models/marts/<name>.sql    -> table marts.<name>   (create or replace table ... as)
  models/metrics/<name>.sql  -> view  metrics.<name>
  models/seeds/<name>.csv    -> table seeds.<name>   (column types from the sidecar <name>.yml)
Dependencies are the schema-qualified names a model's SQL mentions (`marts.dim_jobs`); models are
built in dependency order, all in one transaction, so a failure leaves the previous build intact.

A mart whose sidecar says `build: {by_day: <schema>.<table>.<timestamp column>}` is built one UTC
day at a time, for each day on which that column has values: its SQL filters its input on
`getvariable('batch_start_at')` (inclusive) and `getvariable('batch_end_at')` (exclusive), the
first day creates the table and each later day appends to it. A model whose groups never span two
days (per-minute aggregates) then holds one day in memory, not the whole window. With no rows at
all the model runs once with both bounds null, which creates it empty.
"""
from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl
import yaml

from pipelines.catalog import MODEL_LAYERS, Catalog, load_catalog, load_model_doc
from pipelines.paths import MODELS_DIR

Progress = Callable[[str, int, int], None]

_KIND = {"staging": "view", "marts": "table", "metrics": "view"}
_MODEL_SCHEMAS = ("seeds", *MODEL_LAYERS)
_EXTERNAL_SCHEMAS = ("raw", "ops", "governance")
_REFERENCE = re.compile(r"\b(raw|ops|governance|seeds|staging|marts|metrics)\.([a-z_][a-z0-9_]*)\b")
_LINE_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'(?:[^']|'')*'")
_SEED_TYPES = {"VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "BOOLEAN", "DATE", "TIMESTAMP"}
_CATALOG_TABLES = ("metrics.catalog", "metrics.catalog_version")
_BATCH_VARIABLES = ("batch_start_at", "batch_end_at")
_BY_DAY = re.compile(r"^([a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)$")


class ModelBuildError(RuntimeError):
    """A model could not be discovered, ordered or built; the message names the model and file."""


@dataclass(frozen=True)
class Model:
    name: str
    layer: str  # staging | marts | metrics
    path: Path
    sql: str
    refs: frozenset[str]  # schema-qualified names the SQL reads
    by_day: tuple[str, str] | None = None  # (relation, timestamp column) when built one day at a time

    @property
    def qualified(self) -> str:
        return f"{self.layer}.{self.name}"


@dataclass(frozen=True)
class ModelBuild:
    name: str  # schema-qualified
    kind: str  # seed | view | table | catalog
    rows: int | None  # None for staging views: counting them would scan the raw inputs
    seconds: float
    batches: int = 1  # days a by_day model was built in (1 for the others)


def references(sql: str) -> frozenset[str]:
    """Schema-qualified names in the SQL, ignoring comments and string literals."""
    code = _STRING.sub("''", _LINE_COMMENT.sub("", sql))
    return frozenset(f"{schema}.{name}" for schema, name in _REFERENCE.findall(code))


def discover_models(models_dir: Path = MODELS_DIR) -> list[Model]:
    models = []
    for layer in MODEL_LAYERS:
        for path in sorted((models_dir / layer).glob("*.sql")):
            sql = path.read_text().strip().rstrip(";")
            if not sql:
                raise ModelBuildError(f"{path}: empty model")
            refs = references(sql) - {f"{layer}.{path.stem}"}
            by_day = _by_day(path, layer, sql)
            if by_day:
                refs |= {by_day[0]}  # the days come from there: it must exist, and build first
            models.append(Model(name=path.stem, layer=layer, path=path, sql=sql, refs=refs, by_day=by_day))
    return models


def _by_day(path: Path, layer: str, sql: str) -> tuple[str, str] | None:
    """The sidecar's build.by_day as (relation, column), checked against the SQL; None when absent.
    A missing or unreadable sidecar is reported later, by the sidecar check."""
    sidecar = path.with_suffix(".yml")
    if not sidecar.exists():
        return None
    try:
        doc = yaml.safe_load(sidecar.read_text()) or {}
    except yaml.YAMLError:
        return None
    code = _LINE_COMMENT.sub("", sql)
    reads = [v for v in _BATCH_VARIABLES if re.search(rf"getvariable\(\s*'{v}'\s*\)", code)]
    build = doc.get("build") if isinstance(doc, dict) else None
    if build is None:
        if reads:
            raise ModelBuildError(
                f"{path}: reads getvariable({reads[0]!r}) but {sidecar.name} has no build.by_day: "
                "the bounds would be null and the model empty"
            )
        return None
    if not isinstance(build, dict) or set(build) != {"by_day"}:
        raise ModelBuildError(f"{sidecar}: build must be a mapping with one key, by_day")
    match = _BY_DAY.match(str(build["by_day"]))
    if not match:
        raise ModelBuildError(
            f"{sidecar}: build.by_day is {build['by_day']!r}; expected <schema>.<table>.<timestamp column>"
        )
    if layer != "marts":
        raise ModelBuildError(f"{sidecar}: build.by_day applies to marts (tables), not to {layer} views")
    missing = [v for v in _BATCH_VARIABLES if v not in reads]
    if missing:
        raise ModelBuildError(
            f"{path}: built by day, so its SQL must filter its input on "
            f"{' and '.join(f'getvariable({v!r})' for v in missing)}"
        )
    return match.group(1), match.group(2)


def build_order(models: list[Model], seeds: set[str], external: set[str]) -> list[Model]:
    """Topological order (Kahn), taking the first ready model by layer then name, so staging builds
    before marts and marts before metrics wherever dependencies allow. Unknown references and
    cycles raise."""
    by_name = {m.qualified: m for m in models}
    for m in models:
        for ref in sorted(m.refs):
            if ref in by_name or ref in seeds or ref in external or ref in _CATALOG_TABLES:
                continue
            raise ModelBuildError(
                f"{m.path}: references {ref}, which is neither a model, a seed nor an existing "
                f"{ref.split('.', 1)[0]} table"
            )
    layer_rank = {layer: i for i, layer in enumerate(MODEL_LAYERS)}
    pending = {m.qualified: {r for r in m.refs if r in by_name} for m in models}
    ordered: list[Model] = []
    while pending:
        ready = [q for q, deps in pending.items() if not deps]
        if not ready:
            raise ModelBuildError(f"dependency cycle among models: {' -> '.join(_cycle(pending))}")
        nxt = min(ready, key=lambda q: (layer_rank[by_name[q].layer], q))
        ordered.append(by_name[nxt])
        del pending[nxt]
        for deps in pending.values():
            deps.discard(nxt)
    return ordered


def _cycle(pending: dict[str, set[str]]) -> list[str]:
    """One cycle in the remaining graph, for the error message."""
    node = min(pending)
    path: list[str] = []
    while node not in path:
        path.append(node)
        node = min(pending[node])
    return [*path[path.index(node):], node]


def _existing_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("select table_schema, table_name from information_schema.tables").fetchall()
    return {f"{schema}.{name}" for schema, name in rows}


def _load_seed(con: duckdb.DuckDBPyConnection, csv: Path) -> None:
    doc = load_model_doc(csv.with_suffix(".yml"), "seeds")
    types = {}
    for c in doc.columns:
        if (c.type or "").upper() not in _SEED_TYPES:
            raise ModelBuildError(f"{doc.path}: column {c.name} needs a type, one of {sorted(_SEED_TYPES)}")
        types[c.name] = c.type.upper()
    header = csv.read_text().splitlines()[0].split(",")
    if header != list(types):
        raise ModelBuildError(f"{csv}: header {header} differs from the sidecar's columns {list(types)}")
    columns = "{" + ", ".join(f"'{n}': '{t}'" for n, t in types.items()) + "}"
    con.execute(
        f"create or replace table seeds.{csv.stem} as "
        f"select * from read_csv(?, header = true, columns = {columns}, quote = '\"', nullstr = '')",
        [str(csv)],
    )


def _write_catalog(con: duckdb.DuckDBPyConnection, catalog: Catalog) -> int:
    frame = pl.DataFrame(
        {
            "metric_name": [m.name for m in catalog.metrics],
            "metric_group": [m.group for m in catalog.metrics],
            "label_en": [m.label_en for m in catalog.metrics],
            "label_zh": [m.label_zh for m in catalog.metrics],
            "description": [m.description for m in catalog.metrics],
            "metric_type": [m.type for m in catalog.metrics],
            "grain": [m.grain for m in catalog.metrics],
            "unit": [m.unit for m in catalog.metrics],
            "formula": [m.formula for m in catalog.metrics],
            "source_fields": [", ".join(m.source_fields) for m in catalog.metrics],
            "view_name": [m.view for m in catalog.metrics],
            "column_name": [m.column for m in catalog.metrics],
            "also_in": [", ".join(m.also_in) for m in catalog.metrics],
            "metric_version": [m.version for m in catalog.metrics],
        }
    ).with_columns(catalog_version=pl.lit(catalog.version))
    con.register("_gpupool_catalog", frame.to_arrow())
    try:
        con.execute("create or replace table metrics.catalog as select * from _gpupool_catalog")
    finally:
        con.unregister("_gpupool_catalog")
    con.execute(
        "create or replace table metrics.catalog_version as "
        "select ? as catalog_version, cast(? as integer) as metrics, current_timestamp::timestamp as built_at",
        [catalog.version, len(catalog.metrics)],
    )
    return len(catalog.metrics)


def _build(con: duckdb.DuckDBPyConnection, model: Model) -> tuple[int | None, int]:
    """Build one model; returns its row count (None for a view) and the number of batches."""
    kind = _KIND[model.layer]
    try:
        if model.by_day:
            batches = _build_by_day(con, model, *model.by_day)
        else:
            con.execute(f"create or replace {kind} {model.qualified} as\n{model.sql}")
            batches = 1
        if model.layer == "staging":
            return None, batches
        return con.execute(f"select count(*) from {model.qualified}").fetchall()[0][0], batches
    except duckdb.Error as exc:
        raise ModelBuildError(f"{model.path}: building {model.qualified} failed: {exc}") from exc


def batch_days(con: duckdb.DuckDBPyConnection, relation: str, column: str) -> list[dt.date]:
    """The UTC days on which the column has values, in order. Days without data are skipped, so a
    stray timestamp years off costs one batch, not one per day in between."""
    day = f"cast({column} as date)"
    rows = con.execute(f"select distinct {day} from {relation} where {column} is not null order by 1").fetchall()
    return [day for (day,) in rows]


def _build_by_day(con: duckdb.DuckDBPyConnection, model: Model, relation: str, column: str) -> int:
    days = batch_days(con, relation, column)
    for i, day in enumerate(days or [None]):
        start, end = _day_literals(day)
        con.execute(f"set variable batch_start_at = {start}")
        con.execute(f"set variable batch_end_at = {end}")
        if i == 0:
            con.execute(f"create or replace table {model.qualified} as\n{model.sql}")
        else:
            con.execute(f"insert into {model.qualified}\n{model.sql}")
    _reset_batch_variables(con)
    return max(len(days), 1)


def _reset_batch_variables(con: duckdb.DuckDBPyConnection) -> None:
    """Variables outlive transactions; an aborted one refuses statements until rolled back."""
    for name in _BATCH_VARIABLES:
        con.execute(f"reset variable {name}")


def _day_literals(day: dt.date | None) -> tuple[str, str]:
    if day is None:
        return "cast(null as timestamp)", "cast(null as timestamp)"
    return f"timestamp '{day.isoformat()}'", f"timestamp '{(day + dt.timedelta(days=1)).isoformat()}'"


def build_models(
    con: duckdb.DuckDBPyConnection,
    models_dir: Path = MODELS_DIR,
    on_progress: Progress | None = None,
) -> list[ModelBuild]:
    """Load seeds, build every model in dependency order, then write the catalog; one transaction.

    `on_progress(name, i, n)` is called before each step (1-based i of n steps).
    """
    models_dir = Path(models_dir)
    catalog = load_catalog(models_dir / "catalog")
    seeds = sorted((models_dir / "seeds").glob("*.csv"))
    models = discover_models(models_dir)
    for m in models:
        load_model_doc(m.path.with_suffix(".yml"), m.layer)  # a missing or broken sidecar fails early
    for schema in (*_MODEL_SCHEMAS, *_EXTERNAL_SCHEMAS):
        con.execute(f"create schema if not exists {schema}")
    external = {t for t in _existing_tables(con) if t.split(".", 1)[0] in _EXTERNAL_SCHEMAS}
    ordered = build_order(models, {f"seeds.{p.stem}" for p in seeds}, external)

    total = len(seeds) + len(ordered) + 1
    builds: list[ModelBuild] = []
    step = 0

    def progress(name: str) -> None:
        nonlocal step
        step += 1
        if on_progress:
            on_progress(name, step, total)

    con.execute("begin transaction")
    try:
        for csv in seeds:
            progress(f"seeds.{csv.stem}")
            started = time.perf_counter()
            _load_seed(con, csv)
            rows = con.execute(f"select count(*) from seeds.{csv.stem}").fetchall()[0][0]
            builds.append(ModelBuild(f"seeds.{csv.stem}", "seed", rows, time.perf_counter() - started))
        for model in ordered:
            progress(model.qualified)
            started = time.perf_counter()
            rows, batches = _build(con, model)
            builds.append(
                ModelBuild(model.qualified, _KIND[model.layer], rows, time.perf_counter() - started, batches)
            )
        progress("metrics.catalog")
        started = time.perf_counter()
        rows = _write_catalog(con, catalog)
        builds.append(ModelBuild("metrics.catalog", "catalog", rows, time.perf_counter() - started))
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        _reset_batch_variables(con)
        raise
    return builds
