"""The data dictionary (docs/data-dictionary.md) and the metrics views' column snapshot.

Both are generated from files only, so CI can check them without a warehouse:
  - raw tables and ops.quarantine: the contracts (models/contracts/*.yml);
  - seeds, staging, marts, metrics: the models' sidecars (models/<layer>/<name>.yml);
  - metrics views: also the catalog metrics (models/catalog/) each one carries;
  - the ops and governance tables the code creates: their DDL and descriptions (pipelines/contracts.py).
Every schema, table and column comes out in a fixed order. With a built warehouse the column types
come from its information_schema; without one, from the sidecars where they state them.

The snapshot (models/metrics_schema.json: catalog version, view -> columns) freezes the metrics
views' names and columns: they change only with a catalog version bump.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pipelines.catalog import Catalog, load_catalog, load_model_docs
from pipelines.contracts import TABLES, contracts
from pipelines.paths import MODELS_DIR, REPO_ROOT

DICTIONARY_PATH = REPO_ROOT / "docs" / "data-dictionary.md"
SNAPSHOT_PATH = MODELS_DIR / "metrics_schema.json"
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
_LAKE = {"raw.dcgm_samples": "lake/dcgm_samples/date=YYYY-MM-DD/ingest=SOURCE/part-0.parquet under the gpupool home"}


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


# -- the tables the model build writes from the catalog ----------------------------------------------
_CATALOG_TABLES: dict[str, dict] = {
    "metrics.catalog": {
        "grain": "one row per metric of the catalog",
        "description": "The metric catalog (models/catalog/*.yml) as a table (written by the model build).",
        "columns": (
            ("metric_name", "VARCHAR", "metric name"), ("metric_group", "VARCHAR", "resource | task | governance"),
            ("label_en", "VARCHAR", "English label"), ("label_zh", "VARCHAR", "Chinese label"),
            ("description", "VARCHAR", "definition in words"), ("metric_type", "VARCHAR", "simple | ratio | derived"),
            ("grain", "VARCHAR", "grain of the metric"), ("unit", "VARCHAR", "unit"),
            ("formula", "VARCHAR", "formula"), ("source_fields", "VARCHAR", "raw fields it is computed from"),
            ("view_name", "VARCHAR", "metrics view holding it"), ("column_name", "VARCHAR", "column holding it"),
            ("also_in", "VARCHAR", "other view.column places with the same definition"),
            ("metric_version", "VARCHAR", "version of the definition"),
            ("catalog_version", "VARCHAR", "catalog version"),
        ),
    },
    "metrics.catalog_version": {
        "grain": "one row",
        "description": "The catalog version the warehouse was built with.",
        "columns": (
            ("catalog_version", "VARCHAR", "catalog version"), ("metrics", "INTEGER", "metrics in the catalog"),
            ("built_at", "TIMESTAMP", "when the models were built, UTC"),
        ),
    },
}


# -- collecting ------------------------------------------------------------------------------------
def _rel(path: Path, models_dir: Path) -> str:
    return "models/" + path.resolve().relative_to(models_dir.resolve()).as_posix()


def relations(models_dir: Path = MODELS_DIR) -> list[Relation]:
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
            desc += f" Stored as Parquet partitioned by day: {_LAKE[c.table]}."
        out.append(Relation(schema, name, kind, c.grain, desc, tuple(cols), f"models/contracts/{name}.yml"))
    kinds = {"seeds": "table", "staging": "view", "marts": "table", "metrics": "view"}
    for qualified, doc in load_model_docs(models_dir).items():
        schema, name = qualified.split(".", 1)
        cols = tuple(Col(c.name, (c.type or "").upper(), " ".join(c.description.split())) for c in doc.columns)
        out.append(Relation(schema, name, kinds[schema], " ".join(doc.grain.split()),
                            " ".join(doc.description.split()), cols, _rel(doc.path, models_dir)))
    for qualified, spec in _CATALOG_TABLES.items():
        schema, name = qualified.split(".", 1)
        out.append(Relation(schema, name, "table", spec["grain"], spec["description"],
                            tuple(Col(*c) for c in spec["columns"]), "pipelines/models_runner.py"))
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
    rels = relations(models_dir)
    carried: dict[str, list[tuple[str, object]]] = {}
    for m in catalog.metrics:
        for view, column in m.locations:
            carried.setdefault(view, []).append((column, m))
    lines = [
        "# Data dictionary",
        "",
        ("<!-- Generated by `gpupool dictionary` from the catalog (models/catalog/), the models' sidecars "
        "(models/<layer>/<name>.yml), the contracts (models/contracts/*.yml) and pipelines/dictionary.py. "
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
    """metrics.<view> -> its columns in order, from the sidecars (plus the catalog tables)."""
    views = {q: doc.column_names for q, doc in load_model_docs(models_dir).items() if q.startswith("metrics.")}
    for qualified, spec in _CATALOG_TABLES.items():
        views[qualified] = [c[0] for c in spec["columns"]]
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
                "`gpupool dictionary` to regenerate models/metrics_schema.json"), *changes]
    return [(f"models/metrics_schema.json is for catalog {committed.get('catalog_version')}, the catalog is "
            f"{current['catalog_version']}: run `gpupool dictionary` to regenerate it"), *changes]


@dataclass(frozen=True)
class Outputs:
    dictionary: str
    snapshot: str


def generate(models_dir: Path = MODELS_DIR) -> Outputs:
    catalog = load_catalog(models_dir / "catalog")
    return Outputs(render(catalog, None, models_dir), render_snapshot(snapshot(catalog.version, models_dir)))
