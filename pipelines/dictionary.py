"""The data dictionary (docs/data-dictionary.md), the metrics views' column snapshot and the
catalog's dbt docs blocks (models/metrics/_catalog_docs.md).

All three are generated from files only, so CI can check them without a warehouse:
  - raw tables and ops.quarantine: the contracts (models/contracts/*.yml);
  - seeds, staging, marts, metrics: the dbt properties files (models/<layer>/**/_*.yml), read as
    pipelines.catalog.load_model_docs reads them;
  - metrics views: also the catalog metrics (models/catalog/) each one carries;
  - the ops and governance tables the code creates: their DDL and descriptions (pipelines/contracts.py).
Every schema, table and column comes out in a fixed order. With a built warehouse the column types
come from its information_schema; without one, from the properties where they state them (seeds).

The snapshot (models/metrics_schema.json: catalog version, view -> columns) freezes the metrics
views' names and columns: they change only with a catalog version bump.

The docs blocks hold each catalog metric's definition (`metric_<name>`: labels, the definition in
English and Chinese, formula, unit, grain, version); the metrics views' columns that carry a metric are described by its block, so
`dbt docs` shows the catalog's definition on every view without it being written twice.
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pipelines.catalog import (
    MODEL_LAYERS,
    Catalog,
    CatalogError,
    Metric,
    ModelDoc,
    load_catalog,
    load_model_docs,
    metric_doc_name,
    model_files,
    properties_files,
)
from pipelines.contracts import TABLES, contracts
from pipelines.paths import MODELS_DIR, REPO_ROOT
from pipelines.yamlfile import load_yaml

DICTIONARY_PATH = REPO_ROOT / "docs" / "data-dictionary.md"
SNAPSHOT_PATH = MODELS_DIR / "metrics_schema.json"
CATALOG_DOCS_PATH = MODELS_DIR / "metrics" / "_catalog_docs.md"
SCHEMA_ORDER = ("metrics", "marts", "staging", "seeds", "raw", "ops", "governance")
SCHEMA_PURPOSE = {
    "metrics": "The views every dashboard, review pack and SQL user reads; stable between catalog versions.",
    "marts": "Facts and dimensions the metrics views are built from, where every definition lives.",
    "staging": "One view per raw table: re-deliveries deduplicated, values normalised.",
    "seeds": "Reference data an operator edits (models/seeds/*.csv).",
    "raw": "What ingestion loaded, per the contracts in models/contracts/.",
    "ops": "Ingestion bookkeeping, data quality, scrape gaps and the review packs built.",
    "governance": "What the pipelines decide and keep: policy findings, capacity recommendations, the exemptions in force.",
}
UNDESCRIBED = "(undescribed)"

# Columns the warehouse adds to every raw table (pipelines.contracts.PARTITION_COLUMNS).
_PARTITION_COLUMNS = (
    ("partition_date", "DATE", "UTC day of the ingest partition the row was loaded into"),
    ("ingest_source", "VARCHAR", "ingest source that loaded the row (e.g. allocator_log, dcgm_text)"),
    ("ingested_at", "TIMESTAMP", "when the row was loaded, UTC"),
)
_LAKE = {
    "raw.dcgm_samples": "lake/raw/dcgm_samples/ under the gpupool home, with the day and the ingest source as columns",
    "raw.host_samples": "lake/raw/host_samples/ under the gpupool home, with the day and the ingest source as columns",
}


@dataclass(frozen=True)
class Col:
    name: str
    type: str
    description: str


@dataclass(frozen=True)
class Relation:
    schema: str
    name: str
    kind: str  # table | view | lake view
    grain: str
    description: str
    columns: tuple[Col, ...]
    source: str  # the file that documents it

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


# -- collecting ------------------------------------------------------------------------------------
def _rel(path: Path, models_dir: Path) -> str:
    return "models/" + path.resolve().relative_to(models_dir.resolve()).as_posix()


_MATERIALIZED = re.compile(r"materialized\s*=\s*['\"](\w+)['\"]")
_KIND = {"view": "view", "table": "table", "incremental": "table", "seed": "table"}


def _folder_materialized(models_dir: Path, layer: str, model: Path) -> str:
    """dbt_project.yml's +materialized for a model's folder. The model paths are the layers, so a
    model's fqn is [project, <folders below its layer>, name]: the deepest folder that sets it wins."""
    project = load_yaml((models_dir / "dbt_project.yml").read_text())
    level = (project.get("models") or {}).get(project["name"]) or {}
    materialized = level.get("+materialized", "view")  # dbt's own default is view
    for folder in model.parent.relative_to(models_dir / layer).parts:
        level = level.get(folder) or {}
        materialized = level.get("+materialized", materialized)
    return materialized


def _kind(doc: ModelDoc, config: dict, models_dir: Path) -> str:
    """table or view, by dbt's precedence: the model's own config() call, else its properties'
    config, else its folder's in dbt_project.yml."""
    if doc.layer == "seeds":
        return "table"
    source = next(f for f in model_files(models_dir / doc.layer, doc.layer) if f.stem == doc.name)
    found = _MATERIALIZED.search(source.read_text())
    materialized = (found[1] if found else config.get("materialized")
                    or _folder_materialized(models_dir, doc.layer, source))
    return _KIND[materialized]


def _configs(models_dir: Path) -> dict[str, dict]:
    """schema.model -> its properties' config (for the materialization)."""
    out = {}
    for layer in MODEL_LAYERS:
        for path in properties_files(models_dir, layer):
            doc = load_yaml(path.read_text()) or {}
            out.update({f"{layer}.{m['name']}": m.get("config") or {} for m in doc.get("models") or []})
    return out


def _column_text(description: str, doc: str | None, metrics: dict[str, Metric]) -> str:
    """One line: a metric's column reads as the catalog's definition in words."""
    for m in metrics.values():
        if doc == metric_doc_name(m.name):
            return m.description
    return " ".join(description.split())


def relations(models_dir: Path = MODELS_DIR, catalog: Catalog | None = None) -> list[Relation]:
    """Every documented table and view, in dictionary order (schema order, then name)."""
    out: list[Relation] = []
    for c in contracts().values():
        schema, name = c.table.split(".", 1)
        cols = [Col(col.name, col.type, col.description) for col in c.columns]
        if schema == "raw":
            cols += [Col(*pc) for pc in _PARTITION_COLUMNS]
        kind = "view over Parquet" if c.table in _LAKE else "table"
        desc = " ".join(c.description.split())
        if c.table in _LAKE:
            desc += f" Stored as a Delta table (Parquet) partitioned by day: {_LAKE[c.table]}."
        out.append(Relation(schema, name, kind, c.grain, desc, tuple(cols), f"models/contracts/{name}.yml"))
    catalog = catalog or load_catalog(models_dir / "catalog")
    metrics = {m.name: m for m in catalog.metrics}
    configs = _configs(models_dir)
    for qualified, doc in load_model_docs(models_dir).items():
        schema, name = qualified.split(".", 1)
        cols = tuple(Col(c.name, (c.type or "").upper(), _column_text(c.description, c.doc, metrics))
                     for c in doc.columns)
        out.append(Relation(schema, name, _kind(doc, configs.get(qualified, {}), models_dir), " ".join(doc.grain.split()),
                            " ".join(doc.description.split()), cols, _rel(doc.path, models_dir)))
    for t in TABLES.values():
        schema, name = t.table.split(".", 1)
        out.append(Relation(schema, name, "table", t.grain, t.description,
                            tuple(Col(n, typ, t.descriptions.get(n, UNDESCRIBED)) for n, typ in t.columns),
                            "pipelines/contracts.py"))
    order = {s: i for i, s in enumerate(SCHEMA_ORDER)}
    return sorted(out, key=lambda r: (order.get(r.schema, len(order)), r.schema, r.name))


def warehouse_types(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str, str], str]:
    """(schema, table, column) -> data type, from a built warehouse."""
    rows = con.sql("select table_schema, table_name, column_name, data_type from information_schema.columns").fetchall()
    return {(s, t, c): d for s, t, c, d in rows}


# -- rendering -------------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(catalog: Catalog | None = None, types: dict[tuple[str, str, str], str] | None = None,
           models_dir: Path = MODELS_DIR) -> str:
    """The dictionary as Markdown. Deterministic: the same files give the same text."""
    catalog = catalog or load_catalog(models_dir / "catalog")
    rels = relations(models_dir, catalog)
    carried: dict[str, list[tuple[str, object]]] = {}
    for m in catalog.metrics:
        for view, column in m.locations:
            carried.setdefault(view, []).append((column, m))
    lines = [
        "# Data dictionary",
        "",
        ("<!-- Generated by `gpupool dictionary` from the catalog (models/catalog/), the models' dbt properties "
        "(models/<layer>/**/_*.yml, models/seeds/_seeds.yml), the contracts (models/contracts/*.yml) and pipelines/dictionary.py. "
        "Do not edit: change those and regenerate; `gpupool dictionary --check` (run in the tests) fails "
        "when this file is stale. -->"),
        "",
        (f"Catalog version **{catalog.version}** ({len(catalog.metrics)} metrics). "
        "Read the `metrics` views: their names and columns change only with a catalog version bump "
        "(frozen in `models/metrics_schema.json`). How to connect: [data-team.md](data-team.md)."),
        "",
        "Types: " + ("from a built warehouse's information_schema." if types else
                     "stated for contracts, seeds and the tables the code creates; the SQL models' types "
                     "come from their SQL (see `information_schema.columns` in a built warehouse, or "
                     "`gpupool dictionary --home DIR --out FILE`)."),
        "",
        "## Contents",
        "",
    ]
    for schema in SCHEMA_ORDER:
        names = [r for r in rels if r.schema == schema]
        if names:
            lines.append(f"- **{schema}** ({len(names)}): {SCHEMA_PURPOSE[schema]} "
                         + ", ".join(f"[{r.name}](#{r.schema}{r.name})" for r in names))
    for schema in SCHEMA_ORDER:
        schema_rels = [r for r in rels if r.schema == schema]
        if not schema_rels:
            continue
        lines += ["", f"## Schema `{schema}`", "", SCHEMA_PURPOSE[schema]]
        for r in schema_rels:
            lines += ["", f"### {r.qualified}", "",
                      f"*{r.kind}*, documented in `{r.source}`. **Grain:** {_cell(r.grain)}.", "",
                      _cell(r.description), ""]
            metrics_here = sorted(carried.get(r.qualified, []), key=lambda cm: (cm[0], cm[1].name))
            if metrics_here:
                lines += ["Catalog metrics in this view:", "",
                          "| column | metric | label (en) | label (zh) | unit | version |",
                          "|---|---|---|---|---|---|"]
                lines += [f"| `{col}` | `{m.name}` | {_cell(m.label_en)} | {_cell(m.label_zh)} | {m.unit} | {m.version} |"
                          for col, m in metrics_here]
                lines.append("")
            lines += ["| column | type | description |", "|---|---|---|"]
            for c in r.columns:
                typ = (types or {}).get((r.schema, r.name, c.name)) or c.type or "—"
                lines.append(f"| `{c.name}` | {typ} | {_cell(c.description)} |")
    unavailable = sorted(catalog.unavailable, key=lambda u: u.name)
    if unavailable:
        lines += ["", "## Metrics the inputs cannot give", "", "| metric | label (en) | label (zh) | why |",
                  "|---|---|---|---|"]
        lines += [f"| `{u.name}` | {_cell(u.label_en)} | {_cell(u.label_zh)} | {_cell(u.reason)} |" for u in unavailable]
    return "\n".join(lines) + "\n"


def undescribed(models_dir: Path = MODELS_DIR) -> list[str]:
    return [f"{r.qualified}.{c.name}" for r in relations(models_dir) for c in r.columns
            if not c.description.strip() or c.description == UNDESCRIBED]


def diff_summary(committed: str, generated: str, path: str, limit: int = 40) -> str:
    """A short unified diff of the committed file against what the generator writes now."""
    diff = list(difflib.unified_diff(committed.splitlines(), generated.splitlines(),
                                     f"{path} (committed)", f"{path} (generated)", lineterm="", n=0))
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    shown = diff[:limit] + ([f"... {len(diff) - limit} more diff lines"] if len(diff) > limit else [])
    return f"{path} is stale: {added} line(s) to add, {removed} to remove\n" + "\n".join(shown)


# -- the metrics views' column snapshot -----------------------------------------------------------
def metrics_columns(models_dir: Path = MODELS_DIR) -> dict[str, list[str]]:
    """metrics.<view> -> its columns in order, from the properties."""
    views = {q: doc.column_names for q, doc in load_model_docs(models_dir).items() if q.startswith("metrics.")}
    return dict(sorted(views.items()))


def snapshot(catalog_version: str, models_dir: Path = MODELS_DIR) -> dict:
    return {"catalog_version": catalog_version, "views": metrics_columns(models_dir)}


def render_snapshot(snap: dict) -> str:
    return json.dumps(snap, indent=2, ensure_ascii=False) + "\n"


def snapshot_problems(committed: dict, current: dict) -> list[str]:
    """Why the committed snapshot and the current views disagree ([] when they agree).

    Views or columns changed under the same catalog version: bump the version. Version bumped but
    the snapshot not regenerated: regenerate it."""
    if committed == current:
        return []
    changes = []
    old, new = committed.get("views", {}), current["views"]
    for view in sorted(set(old) | set(new)):
        if view not in new:
            changes.append(f"{view}: removed")
        elif view not in old:
            changes.append(f"{view}: added")
        elif old[view] != new[view]:
            gone = [c for c in old[view] if c not in new[view]]
            added = [c for c in new[view] if c not in old[view]]
            changes.append(f"{view}: columns changed (removed {gone}, added {added}"
                           + (", order changed" if not gone and not added else "") + ")")
    if changes and committed.get("catalog_version") == current["catalog_version"]:
        return [(f"the metrics views changed but the catalog version is still {current['catalog_version']}: "
                "bump `version` in models/catalog/version.yml (and say why in its header), then run "
                "`gpupool dictionary --in-tree` to regenerate models/metrics_schema.json"), *changes]
    return [(f"models/metrics_schema.json is for catalog {committed.get('catalog_version')}, the catalog is "
            f"{current['catalog_version']}: run `gpupool dictionary --in-tree` to regenerate it"), *changes]


# -- the catalog's dbt docs blocks -----------------------------------------------------------------
_JINJA = re.compile(r"{[{%#]")


def _metric_block(m: Metric) -> str:
    fields = (m.label_en, m.label_zh, m.description, m.description_zh, m.formula, m.grain, m.unit, *m.source_fields, *m.also_in)
    if any(_JINJA.search(f) for f in fields):
        raise CatalogError(f"metric {m.name}: dbt renders docs blocks as Jinja; no '{{{{', '{{%' or '{{#' in its text")
    places = ", ".join(f"`{view}.{column}`" for view, column in m.locations)
    return "\n".join([
        f"{{% docs {metric_doc_name(m.name)} %}}",
        f"**{m.label_en}** · {m.label_zh} — catalog metric `{m.name}` ({m.group}, {m.type}), version {m.version}",
        "",
        m.description,
        "",
        m.description_zh,
        "",
        f"- formula: `{m.formula}`",
        f"- unit: {m.unit}",
        f"- grain: {m.grain}",
        f"- source fields: {', '.join(f'`{f}`' for f in m.source_fields)}",
        f"- carried in: {places}",
        "{% enddocs %}",
    ])


def render_catalog_docs(catalog: Catalog) -> str:
    """models/metrics/_catalog_docs.md: one dbt docs block per catalog metric, in catalog order."""
    header = ("{# Generated by `gpupool dictionary` from the catalog (models/catalog/, version "
              f"{catalog.version}). Do not edit: change the catalog and regenerate; `gpupool dictionary "
              "--check` fails when this file is stale. The metrics views' columns that carry a metric are "
              "described by its block (\"{{ doc('metric_<name>') }}\" in models/metrics/_<subject>.yml). #}")
    return "\n\n".join([header, *(_metric_block(m) for m in catalog.metrics)]) + "\n"


@dataclass(frozen=True)
class Outputs:
    dictionary: str
    snapshot: str
    catalog_docs: str


def generate(models_dir: Path = MODELS_DIR) -> Outputs:
    catalog = load_catalog(models_dir / "catalog")
    return Outputs(render(catalog, None, models_dir), render_snapshot(snapshot(catalog.version, models_dir)),
                   render_catalog_docs(catalog))
