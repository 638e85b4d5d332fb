"""The data dictionary (docs/data-dictionary.md) and the metrics views' column snapshot.

Both are generated from files only, so CI can check them without a warehouse:
  - raw tables and ops.quarantine: the contracts (models/contracts/*.yml);
  - seeds, staging, marts, metrics: the models' sidecars (models/<layer>/<name>.yml);
  - metrics views: also the catalog metrics (models/metrics.yml) each one carries;
  - the ops and governance tables the code creates: their DDL, described here.
Every schema, table and column comes out in a fixed order. With a built warehouse the column types
come from its information_schema; without one, from the sidecars where they state them.

The snapshot (models/metrics_schema.json: catalog version, view -> columns) freezes the metrics
views' names and columns: they change only with a catalog version bump.
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from pipelines.catalog import Catalog, load_catalog, load_model_docs
from pipelines.contracts import contracts
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
    "ops": "Ingestion bookkeeping and data quality.",
    "governance": "What the pipelines decide and keep: policy findings, capacity recommendations.",
}
UNDESCRIBED = "(undescribed)"

# Columns the warehouse adds to every raw table (pipelines.warehouse.PARTITION_COLUMNS).
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


# -- the tables the code creates (not models, not contracts) -------------------------------------
_CODE_TABLES: dict[str, dict] = {
    "ops.ingest_log": {
        "source": "pipelines/warehouse.py", "grain": "one row per ingest run of a source for a day",
        "description": "Every ingest: files and records read, loaded and quarantined (read = loaded + quarantined).",
        "columns": {
            "run_id": "ingest run id", "ingest_source": "ingest source", "partition_date": "UTC day ingested",
            "files_read": "files read", "records_read": "input records read", "records_loaded": "records loaded",
            "records_quarantined": "input records quarantined (ops.quarantine)",
            "rows_by_table": "JSON object: rows written per raw table", "started_at": "run start, UTC",
            "finished_at": "run end, UTC",
            "notes": "JSON array: what the parsers noted, each as 'file: note' (e.g. 'empty file', "
                     "'19 step rows ignored'); null when none",
        },
    },
    "ops.check_results": {
        "source": "pipelines/warehouse.py", "grain": "one row per check per asset per day (the latest result)",
        "description": "Asset checks (Great Expectations suites, SQL checks) as last run.",
        "columns": {
            "check_name": "check", "asset": "asset checked", "partition_date": "UTC day checked (null: not partitioned)",
            "passed": "whether it passed", "severity": "ERROR | WARN", "unexpected_count": "rows that failed",
            "metadata_json": "JSON: the check's metadata (examples, counts)", "checked_at": "when it ran, UTC",
        },
    },
    "ops.scrape_gaps": {
        "source": "pipelines/connectors/scrape.py", "grain": "one row per failed scrape of a target in a round",
        "description": "DCGM exporter scrapes that failed after their retries: the gaps in live telemetry.",
        "columns": {
            "target": "exporter URL", "round_at": "scrape round time, UTC", "round_id": "scrape round id",
            "error_kind": "timeout | http | connection | parse", "error": "the error, in words",
            "duration_s": "seconds spent on the target", "attempts": "attempts made",
        },
    },
    "governance.capacity_recommendations": {
        "source": "pipelines/capacity/store.py", "grain": "one row per recommendation per month",
        "description": "Capacity recommendations of each month with their evidence (`gpupool recommend`).",
        "columns": {
            "recommendation_id": "recommendation id", "period_month": "first day of the month advised on",
            "recommended_at": "when it was made, UTC", "rank": "rank in the month (1 = most impact)",
            "kind": "rule kind (add capacity, move quota, rightsize, ...)", "gpu_model": "GPU model concerned",
            "tenant": "tenant concerned", "queue": "queue concerned", "target": "what the change applies to",
            "recommendation": "the advice, English", "recommendation_zh": "the advice, Chinese",
            "quantity": "how much to change", "unit": "unit of quantity", "wait_cause": "wait cause it answers",
            "confidence": "low | medium | high", "confidence_score": "confidence, 0..1",
            "impact_gpu_hours": "GPU-hours of waiting or idling it addresses",
            "evidence_json": "JSON: the metric values behind it", "whatif_json": "JSON: what-if replay result, if run",
            "rules_version": "version of models/capacity/rules.yml used",
        },
    },
    "governance.policy_findings": {
        "source": "pipelines/assets/reclaim.py", "grain": "one row per finding per day (a job attempt caught by "
        "one policy version over one evidence window)",
        "description": "Daily idle-reclaim policy findings (oversized, retry storm, template breach).",
        "columns": {
            "partition_date": "UTC day evaluated", "finding_id": "deterministic finding key", "policy": "policy name",
            "policy_version": "policy version", "kind": "policy kind", "scope": "rule scope the parameters came from",
            "source": "engine holding the work: allocator | slurm | kueue", "job_id": "job id", "attempt": "attempt",
            "tenant": "tenant", "queue": "queue", "template": "job template", "user_name": "user",
            "gpu_model": "GPU model", "window_start_at": "evidence window start, UTC",
            "window_end_at": "evidence window end, UTC", "detected_at": "when the threshold was crossed, UTC",
            "gpus_flagged": "GPUs (allocations) the finding covers", "gpus_held": "GPUs the attempt holds",
            "gpu_hours": "wasted GPU-hours in the evidence window", "metric": "what was measured",
            "observed": "its value over the window", "threshold": "the rule's threshold",
            "is_ongoing": "the attempt still runs and the condition holds at the data's end",
            "recommendation": "suggested request, if any", "evidence": "JSON: the numbers behind the finding",
            "catalog_version": "policy catalog version", "evaluated_at": "when evaluated, UTC",
        },
    },
}
_CATALOG_TABLES: dict[str, dict] = {
    "metrics.catalog": {
        "grain": "one row per metric of the catalog",
        "description": "models/metrics.yml as a table (written by the model build).",
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
_DDL_COLUMN = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s+([A-Za-z]+)", re.MULTILINE)


def _ddl_columns(ddl: str) -> list[tuple[str, str]]:
    body = ddl[ddl.index("(") + 1: ddl.rindex(")")]
    return [(m.group(1), m.group(2).upper()) for m in _DDL_COLUMN.finditer(body)]


def _code_table_ddls() -> dict[str, list[tuple[str, str]]]:
    from pipelines.capacity.store import DDL as RECOMMENDATIONS_DDL
    from pipelines.contracts import SCRAPE_GAPS_DDL
    from pipelines.policies.model import FINDING_SCHEMA
    from pipelines.warehouse import CHECK_RESULTS_DDL, INGEST_LOG_DDL

    def duck(dtype: pl.DataType) -> str:
        if isinstance(dtype, pl.Datetime):
            return "TIMESTAMP"
        return {pl.String: "VARCHAR", pl.Int64: "BIGINT", pl.Float64: "DOUBLE", pl.Boolean: "BOOLEAN"}[dtype]

    findings = [("partition_date", "DATE"), *((n, duck(t)) for n, t in FINDING_SCHEMA.items()),
                ("catalog_version", "VARCHAR"), ("evaluated_at", "TIMESTAMP")]
    return {
        "ops.ingest_log": _ddl_columns(INGEST_LOG_DDL),
        "ops.check_results": _ddl_columns(CHECK_RESULTS_DDL),
        "ops.scrape_gaps": _ddl_columns(SCRAPE_GAPS_DDL),
        "governance.capacity_recommendations": _ddl_columns(RECOMMENDATIONS_DDL),
        "governance.policy_findings": findings,
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
    for qualified, cols in _code_table_ddls().items():
        schema, name = qualified.split(".", 1)
        spec = _CODE_TABLES[qualified]
        described = spec["columns"]
        out.append(Relation(schema, name, "table", spec["grain"], spec["description"],
                            tuple(Col(n, t, described.get(n, UNDESCRIBED)) for n, t in cols), spec["source"]))
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
    catalog = catalog or load_catalog(models_dir / "metrics.yml")
    rels = relations(models_dir)
    carried: dict[str, list[tuple[str, object]]] = {}
    for m in catalog.metrics:
        for view, column in m.locations:
            carried.setdefault(view, []).append((column, m))
    lines = [
        "# Data dictionary",
        "",
        ("<!-- Generated by `gpupool dictionary` from models/metrics.yml, the models' sidecars "
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
                "bump `version` in models/metrics.yml (and say why in its header), then run "
                "`gpupool dictionary` to regenerate models/metrics_schema.json"), *changes]
    return [(f"models/metrics_schema.json is for catalog {committed.get('catalog_version')}, the catalog is "
            f"{current['catalog_version']}: run `gpupool dictionary` to regenerate it"), *changes]


@dataclass(frozen=True)
class Outputs:
    dictionary: str
    snapshot: str


def generate(models_dir: Path = MODELS_DIR) -> Outputs:
    catalog = load_catalog(models_dir / "metrics.yml")
    return Outputs(render(catalog, None, models_dir), render_snapshot(snapshot(catalog.version, models_dir)))
