"""The metric catalog (models/catalog/) and the models' documentation (dbt properties), as dataclasses.

The catalog names every metric once: its group, labels and definition in English and Chinese,
formula, unit, grain and the metrics view column that holds it. It is one catalog in several files: version.yml
(the catalog version) and one `<group>.yml` per group, read in GROUPS order.

The models are documented in dbt's properties files, beside the models they describe: one per
folder of staging (by source system) and marts (by entity), `_<folder>__models.yml` (e.g.
marts/health/_health__models.yml), one per subject among the flat metrics views (`_<subject>.yml`,
e.g. metrics/_pool.yml), and models/seeds/_seeds.yml: each model's description,
`config.meta.grain` and every column. They are read here as YAML, not through `dbt parse`: the same files dbt reads, in milliseconds, with no
profile, packages or warehouse (tests/models/test_catalog.py checks that dbt's manifest agrees).
A column carrying a catalog metric is described by the docs block `metric_<name>`, which `gpupool
dictionary` writes from the catalog (models/metrics/_catalog_docs.md), and its view lists the
metrics it carries in `config.meta.metrics`: dbt docs then show each metric's definition and labels
on its view. `catalog_mismatches` compares all of it with a built warehouse, so an undocumented
column fails a test or the asset check catalog_matches_models.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pipelines.paths import MODELS_DIR
from pipelines.yamlfile import load_yaml

CATALOG_DIR = MODELS_DIR / "catalog"
GROUPS = ("resource", "task", "governance")  # also the catalog's files, <group>.yml, in this order
METRIC_TYPES = ("simple", "ratio", "derived")
MODEL_LAYERS = ("staging", "marts", "metrics")
# dbt files in a layer's folders that describe no model: sources and unit tests
NOT_PROPERTIES = frozenset({"_sources.yml", "_unit_tests.yml"})
_DOCS_BLOCK = re.compile(r"{%-?\s*docs\s+(\w+)\s*-?%}(.*?){%-?\s*enddocs\s*-?%}", re.DOTALL)
_DOC_REF = re.compile(r"^{{\s*doc\(\s*['\"](\w+)['\"]\s*\)\s*}}$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_HAN = re.compile(r"[\u4e00-\u9fff]")  # CJK unified ideographs: a Chinese text has some
_METRIC_FIELDS = (
    "name", "group", "label_en", "label_zh", "description", "description_zh", "type", "grain", "unit",
    "formula", "source_fields", "view", "column", "version",
)


class CatalogError(ValueError):
    """The catalog or a properties file is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class Metric:
    name: str
    group: str
    label_en: str
    label_zh: str
    description: str
    description_zh: str  # the definition in Chinese (the Chinese packs' glossary, the catalog page in Chinese)
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
    type: str | None = None  # seeds declare types (config.column_types); SQL models take them from the SQL
    doc: str | None = None  # the docs block its description is, e.g. metric_allocated_gpu_hours


@dataclass(frozen=True)
class ModelDoc:
    name: str
    layer: str  # seeds | staging | marts | metrics
    grain: str
    description: str
    columns: tuple[ColumnDoc, ...]
    path: Path  # its properties file
    metrics: tuple[str, ...] = ()  # config.meta.metrics: the catalog metrics a metrics view carries

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
    if not _HAN.search(fields["description_zh"]):
        raise CatalogError(f"{where}: description_zh has no Chinese characters")
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
    doc = load_yaml(path.read_text()) or {}
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


def doc_blocks(models_dir: Path = MODELS_DIR) -> dict[str, str]:
    """dbt docs blocks (`{% docs name %}...{% enddocs %}` in the layers' .md files), name -> text."""
    blocks: dict[str, str] = {}
    for layer in ("seeds", *MODEL_LAYERS):
        for md in sorted((models_dir / layer).rglob("*.md")):
            for name, body in _DOCS_BLOCK.findall(md.read_text()):
                if name in blocks:
                    raise CatalogError(f"{md}: docs block {name!r} is defined twice")
                blocks[name] = body.strip()
    return blocks


def _described(where: str, entry: dict, blocks: dict[str, str]) -> tuple[str, str | None]:
    """(description, docs block name): a description that is `{{ doc('name') }}` reads the block."""
    text = _text(where, entry, "description")
    ref = _DOC_REF.match(text)
    if ref:
        if ref[1] not in blocks:
            raise CatalogError(f"{where}: description refers to docs block {ref[1]!r}, which no .md file defines")
        return blocks[ref[1]], ref[1]
    if "{{" in text or "{%" in text:
        raise CatalogError(f"{where}: a description is plain text or exactly {{{{ doc('<block>') }}}}")
    return text, None


def load_properties(path: Path, layer: str, blocks: dict[str, str]) -> list[ModelDoc]:
    """The models (or seeds) of one dbt properties file: description, meta.grain, meta.metrics, columns."""
    entries = (load_yaml(path.read_text()) or {}).get("seeds" if layer == "seeds" else "models")
    if not isinstance(entries, list):
        raise CatalogError(f"{path}: expected a list under {'seeds' if layer == 'seeds' else 'models'}")
    out = []
    for entry in entries:
        where = f"{path}: {entry.get('name', '?')}"
        config = entry.get("config") or {}
        meta = config.get("meta") or {}
        columns = entry.get("columns")
        if not isinstance(columns, list) or not columns:
            raise CatalogError(f"{where}: columns must be a non-empty list")
        types = config.get("column_types") or {}
        parsed = []
        for i, c in enumerate(columns):
            name = _text(f"{where}: column #{i + 1}", c, "name")
            description, block = _described(f"{where}: column {name}", c, blocks)
            parsed.append(ColumnDoc(name=name, description=description, type=types.get(name), doc=block))
        names = [c.name for c in parsed]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise CatalogError(f"{where}: columns described twice: {duplicated}")
        metrics = meta.get("metrics") or []
        if not isinstance(metrics, list):
            raise CatalogError(f"{where}: meta.metrics must be a list of catalog metric names")
        out.append(ModelDoc(
            name=_text(where, entry, "name"),
            layer=layer,
            grain=_text(f"{where}: config.meta", meta, "grain"),
            description=_described(where, entry, blocks)[0],
            columns=tuple(parsed),
            path=path,
            metrics=tuple(str(m) for m in metrics),
        ))
    return out


def model_files(folder: Path, layer: str) -> list[Path]:
    """A layer's seeds (*.csv) or models (*.sql, and dbt Python models *.py), in its folder and below."""
    patterns = ("*.csv",) if layer == "seeds" else ("*.sql", "*.py")
    return sorted(f for pattern in patterns for f in folder.rglob(pattern))


def properties_files(models_dir: Path, layer: str) -> list[Path]:
    """The layer's properties files (`_*.yml`, in its folder and below), by path."""
    return sorted(p for p in (models_dir / layer).rglob("_*.yml") if p.name not in NOT_PROPERTIES)


def load_model_docs(models_dir: Path = MODELS_DIR) -> dict[str, ModelDoc]:
    """Every seed and SQL model as its properties files document it, keyed by schema-qualified name
    (e.g. marts.dim_jobs). A model without properties, properties without a model, or a model
    described twice fails."""
    blocks = doc_blocks(models_dir)
    docs: dict[str, ModelDoc] = {}
    for layer in ("seeds", *MODEL_LAYERS):
        folder = models_dir / layer
        found: dict[str, ModelDoc] = {}
        for props in properties_files(models_dir, layer):
            for doc in load_properties(props, layer, blocks):
                if doc.name in found:
                    first = found[doc.name].path.relative_to(folder)
                    raise CatalogError(f"{props}: {doc.name} is described again (first in {first})")
                found[doc.name] = doc
        files = {f.stem for f in model_files(folder, layer)}
        if files - set(found):
            raise CatalogError(f"{folder}: no properties for {sorted(files - set(found))}")
        if set(found) - files:
            raise CatalogError(f"{folder}: properties for {sorted(set(found) - files)}, which it does not hold")
        docs.update({f"{layer}.{name}": found[name] for name in sorted(found)})
    return docs


def catalog_link_problems(catalog: Catalog, docs: dict[str, ModelDoc]) -> list[str]:
    """Where the metrics views' properties and the catalog disagree ([] = none): a column carrying a
    metric has the description `{{ doc('metric_<name>') }}` (the block `gpupool dictionary` writes
    from the catalog), and each view's `meta.metrics` lists the metrics it carries."""
    carried: dict[tuple[str, str], str] = {}
    for m in catalog.metrics:
        for view, column in m.locations:
            carried[(view, column)] = m.name
    problems = []
    for (view, column), name in sorted(carried.items()):
        doc = docs.get(view)
        col = next((c for c in doc.columns if c.name == column), None) if doc else None
        if col is None:
            problems.append(f"{view}.{column}: carries metric {name} but is not in metrics' properties files")
        elif col.doc != metric_doc_name(name):
            problems.append(f"{view}.{column}: carries metric {name}; its description must be "
                            f"\"{{{{ doc('{metric_doc_name(name)}') }}}}\"")
    for qualified, doc in docs.items():
        for c in doc.columns:
            if c.doc and c.doc.startswith("metric_") and carried.get((qualified, c.name)) != c.doc[len("metric_"):]:
                problems.append(f"{qualified}.{c.name}: describes itself as {c.doc} but the catalog does not "
                                "place that metric here")
        expected = sorted({name for (view, _), name in carried.items() if view == qualified})
        if doc.layer == "metrics" and sorted(doc.metrics) != expected:
            problems.append(f"{qualified}: meta.metrics is {sorted(doc.metrics)}, the catalog places {expected} here")
        elif doc.layer != "metrics" and doc.metrics:
            problems.append(f"{qualified}: meta.metrics is for the metrics views only")
    return problems


def metric_doc_name(metric: str) -> str:
    """The dbt docs block that holds a catalog metric's definition."""
    return f"metric_{metric}"


def documentation_gaps(con: duckdb.DuckDBPyConnection, models_dir: Path = MODELS_DIR,
                       docs: dict[str, ModelDoc] | None = None) -> list[str]:
    """Columns built but not described, or described but not built, for every model ('' list = none).
    `docs`: the model docs when the caller has read them already."""
    built: dict[str, list[str]] = {}
    for schema, name, column in con.execute(
        "select table_schema, table_name, column_name from information_schema.columns "
        "order by table_schema, table_name, ordinal_position"
    ).fetchall():
        built.setdefault(f"{schema}.{name}", []).append(column)
    gaps: list[str] = []
    for qualified, doc in (load_model_docs(models_dir) if docs is None else docs).items():
        columns = built.get(qualified)
        if not columns:
            gaps.append(f"{qualified}: not built")
            continue
        for col in columns:
            if col not in doc.column_names:
                gaps.append(f"{qualified}.{col}: undocumented in {doc.path.relative_to(models_dir)}")
        for col in doc.column_names:
            if col not in columns:
                gaps.append(f"{qualified}.{col}: documented in {doc.path.relative_to(models_dir)} but not produced")
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


def catalog_mismatches(con: duckdb.DuckDBPyConnection, models_dir: Path = MODELS_DIR) -> list[str]:
    """What the asset check catalog_matches_models fails on ([] = none): documentation gaps against
    the built warehouse, catalog metrics missing from their views, and catalog links the metrics
    views' properties lack."""
    catalog, docs = load_catalog(models_dir / "catalog"), load_model_docs(models_dir)
    return (documentation_gaps(con, models_dir, docs) + missing_metric_columns(con, catalog)
            + catalog_link_problems(catalog, docs))
