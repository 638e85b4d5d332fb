"""The metric catalog (models/catalog/) and the models' sidecar documentation, as dataclasses.

The catalog names every metric once: its group, labels in English and Chinese, formula, unit,
grain and the metrics view column that holds it. It is one catalog in several files: version.yml
(the catalog version) and one `<group>.yml` per group, read in GROUPS order. Each SQL model has a sidecar `<name>.yml` that
states its grain and describes every column; `documentation_gaps` compares them with the built
warehouse so an undocumented column fails a test or an asset check.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import yaml

from pipelines.paths import MODELS_DIR

CATALOG_DIR = MODELS_DIR / "catalog"
GROUPS = ("resource", "task", "governance")  # also the catalog's files, <group>.yml, in this order
METRIC_TYPES = ("simple", "ratio", "derived")
MODEL_LAYERS = ("staging", "marts", "metrics")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_METRIC_FIELDS = (
    "name", "group", "label_en", "label_zh", "description", "type", "grain", "unit",
    "formula", "source_fields", "view", "column", "version",
)


class CatalogError(ValueError):
    """The catalog or a sidecar is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class Metric:
    name: str
    group: str
    label_en: str
    label_zh: str
    description: str
    type: str
    grain: str
    unit: str
    formula: str
    source_fields: tuple[str, ...]
    view: str  # schema-qualified, e.g. metrics.pool_daily
    column: str
    version: str
    also_in: tuple[str, ...] = ()  # other "view.column" places carrying the same definition

    @property
    def locations(self) -> tuple[tuple[str, str], ...]:
        """Every (view, column) that carries this metric, the primary one first."""
        others = tuple(tuple(ref.rsplit(".", 1)) for ref in self.also_in)
        return ((self.view, self.column), *others)  # type: ignore[return-value]


@dataclass(frozen=True)
class Unavailable:
    """A metric the brief asks for that the inputs cannot give, and why."""

    name: str
    group: str
    label_en: str
    label_zh: str
    reason: str


@dataclass(frozen=True)
class Catalog:
    version: str
    metrics: tuple[Metric, ...]
    unavailable: tuple[Unavailable, ...]

    def metric(self, name: str) -> Metric:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(f"metric {name!r} is not in the catalog (version {self.version})")

    def by_group(self, group: str) -> tuple[Metric, ...]:
        return tuple(m for m in self.metrics if m.group == group)


@dataclass(frozen=True)
class ColumnDoc:
    name: str
    description: str
    type: str | None = None  # seeds declare types; SQL models take them from the SQL


@dataclass(frozen=True)
class ModelDoc:
    name: str
    layer: str  # seeds | staging | marts | metrics
    grain: str
    description: str
    columns: tuple[ColumnDoc, ...]
    path: Path

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


def _text(where: str, entry: dict, key: str) -> str:
    value = entry.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise CatalogError(f"{where}: {key} is missing or empty")
    return str(value).strip()


def _metric(where: str, entry: dict) -> Metric:
    unknown = sorted(set(entry) - set(_METRIC_FIELDS) - {"also_in"})
    if unknown:
        raise CatalogError(f"{where}: unknown keys {unknown}")
    fields = {k: _text(where, entry, k) for k in _METRIC_FIELDS if k != "source_fields"}
    if fields["group"] not in GROUPS:
        raise CatalogError(f"{where}: group {fields['group']!r} is not one of {GROUPS}")
    if fields["type"] not in METRIC_TYPES:
        raise CatalogError(f"{where}: type {fields['type']!r} is not one of {METRIC_TYPES}")
    if not fields["view"].startswith("metrics."):
        raise CatalogError(f"{where}: view {fields['view']!r} is not in the metrics schema")
    if not _VERSION.match(fields["version"]):
        raise CatalogError(f"{where}: version {fields['version']!r} is not MAJOR.MINOR.PATCH")
    source_fields = entry.get("source_fields")
    if not isinstance(source_fields, list) or not source_fields:
        raise CatalogError(f"{where}: source_fields must be a non-empty list")
    also_in = entry.get("also_in") or []
    for ref in also_in:
        if not str(ref).startswith("metrics.") or str(ref).count(".") != 2:
            raise CatalogError(f"{where}: also_in entry {ref!r} is not metrics.<view>.<column>")
    return Metric(
        **fields,
        source_fields=tuple(str(s) for s in source_fields),
        also_in=tuple(str(r) for r in also_in),
    )


def _catalog_file(path: Path, keys: set[str]) -> dict:
    if not path.exists():
        raise CatalogError(f"{path}: catalog file missing")
    doc = yaml.safe_load(path.read_text()) or {}
    if not isinstance(doc, dict):
        raise CatalogError(f"{path}: expected a mapping")
    unknown = sorted(set(doc) - keys)
    if unknown:
        raise CatalogError(f"{path}: unknown keys {unknown}")
    return doc


def load_catalog(catalog_dir: Path = CATALOG_DIR) -> Catalog:
    """Read and validate the metric catalog: version.yml, then each group's file."""
    catalog_dir = Path(catalog_dir)
    expected = {"version.yml", *(f"{g}.yml" for g in GROUPS)}
    stray = sorted(p.name for p in catalog_dir.glob("*.yml") if p.name not in expected)
    if stray:
        raise CatalogError(f"{catalog_dir}: {stray} are not catalog files (version.yml and one <group>.yml "
                           f"per group of {GROUPS})")
    version_path = catalog_dir / "version.yml"
    version = str(_catalog_file(version_path, {"version"}).get("version", ""))
    if not _VERSION.match(version):
        raise CatalogError(f"{version_path}: version {version!r} is not MAJOR.MINOR.PATCH")
    metrics: list[Metric] = []
    unavailable: list[Unavailable] = []
    for group in GROUPS:
        path = catalog_dir / f"{group}.yml"
        doc = _catalog_file(path, {"metrics", "unavailable"})
        for i, entry in enumerate(doc.get("metrics") or []):
            where = f"{path.name}: metric #{i + 1} ({entry.get('name', '?')})"
            metrics.append(_metric(where, entry))
            if metrics[-1].group != group:
                raise CatalogError(f"{where}: group {metrics[-1].group!r} belongs in {metrics[-1].group}.yml")
        for i, entry in enumerate(doc.get("unavailable") or []):
            where = f"{path.name}: unavailable #{i + 1}"
            unavailable.append(Unavailable(
                **{k: _text(where, entry, k) for k in ("name", "group", "label_en", "label_zh", "reason")}
            ))
            if unavailable[-1].group != group:
                raise CatalogError(f"{where}: group {unavailable[-1].group!r} belongs in {unavailable[-1].group}.yml")
    if not metrics:
        raise CatalogError(f"{catalog_dir}: no metrics")
    seen: set[str] = set()
    for m in metrics:
        if m.name in seen:
            raise CatalogError(f"{catalog_dir}: metric {m.name!r} is defined twice")
        seen.add(m.name)
    return Catalog(version=version, metrics=tuple(metrics), unavailable=tuple(unavailable))


def load_model_doc(sidecar: Path, layer: str) -> ModelDoc:
    """Read one sidecar: grain, description and every column's description."""
    if not sidecar.exists():
        raise CatalogError(f"{sidecar}: sidecar missing; every model documents its grain and columns")
    doc = yaml.safe_load(sidecar.read_text()) or {}
    where = str(sidecar)
    columns = doc.get("columns")
    if not isinstance(columns, list) or not columns:
        raise CatalogError(f"{where}: columns must be a non-empty list")
    parsed = tuple(
        ColumnDoc(
            name=_text(f"{where}: column #{i + 1}", c, "name"),
            description=_text(f"{where}: column {c.get('name', i + 1)}", c, "description"),
            type=c.get("type"),
        )
        for i, c in enumerate(columns)
    )
    names = [c.name for c in parsed]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise CatalogError(f"{where}: columns described twice: {duplicated}")
    return ModelDoc(
        name=sidecar.stem,
        layer=layer,
        grain=_text(where, doc, "grain"),
        description=_text(where, doc, "description"),
        columns=parsed,
        path=sidecar,
    )


def load_model_docs(models_dir: Path = MODELS_DIR) -> dict[str, ModelDoc]:
    """Sidecars of every seed and SQL model, keyed by schema-qualified name (e.g. marts.dim_jobs)."""
    docs: dict[str, ModelDoc] = {}
    for csv in sorted((models_dir / "seeds").glob("*.csv")):
        docs[f"seeds.{csv.stem}"] = load_model_doc(csv.with_suffix(".yml"), "seeds")
    for layer in MODEL_LAYERS:
        for sql in sorted((models_dir / layer).glob("*.sql")):
            docs[f"{layer}.{sql.stem}"] = load_model_doc(sql.with_suffix(".yml"), layer)
    return docs


def documentation_gaps(con: duckdb.DuckDBPyConnection, models_dir: Path = MODELS_DIR) -> list[str]:
    """Columns built but not described, or described but not built, for every model ('' list = none)."""
    gaps: list[str] = []
    for qualified, doc in load_model_docs(models_dir).items():
        schema, name = qualified.split(".", 1)
        built = [
            r[0]
            for r in con.execute(
                "select column_name from information_schema.columns "
                "where table_schema = ? and table_name = ? order by ordinal_position",
                [schema, name],
            ).fetchall()
        ]
        if not built:
            gaps.append(f"{qualified}: not built")
            continue
        for col in built:
            if col not in doc.column_names:
                gaps.append(f"{qualified}.{col}: undocumented in {doc.path.name}")
        for col in doc.column_names:
            if col not in built:
                gaps.append(f"{qualified}.{col}: documented in {doc.path.name} but not produced")
    return gaps


def missing_metric_columns(con: duckdb.DuckDBPyConnection, catalog: Catalog) -> list[str]:
    """Catalog entries whose view or column does not exist in the warehouse."""
    present = {
        (f"{s}.{t}", c)
        for s, t, c in con.execute(
            "select table_schema, table_name, column_name from information_schema.columns "
            "where table_schema = 'metrics'"
        ).fetchall()
    }
    return [
        f"{m.name}: {view}.{column} does not exist"
        for m in catalog.metrics
        for view, column in m.locations
        if (view, column) not in present
    ]
