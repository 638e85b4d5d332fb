"""The Dagster asset graph shows the dbt project: every metrics view is an asset whose upstream
reaches the assets that write its sources, and the Python assets depend on exactly what they read."""
import json
import re
from pathlib import Path

import dagster as dg
import pytest

from pipelines.assets.marts import dbt_project
from pipelines.definitions import defs
from pipelines.paths import MODELS_DIR, REPO_ROOT
from pipelines.sources.registry import SOURCES

GRAPH = defs.resolve_asset_graph()
MANIFEST = json.loads(dbt_project.manifest_path.read_text())
METRICS_VIEWS = sorted(p.stem for p in (MODELS_DIR / "metrics").iterdir() if p.suffix in (".sql", ".py"))
INGEST = {dg.AssetKey(f"raw_{name}") for name in SOURCES}
CATALOG_VIEWS = {"catalog", "catalog_version"}  # built from models/catalog/*.yml, not from a source
RELATION = re.compile(r"\b(?:from|join)\s+(metrics|marts|staging|raw)\.(\w+)\b", re.IGNORECASE)


def upstream(key: dg.AssetKey) -> set[dg.AssetKey]:
    return set(GRAPH.get_ancestor_asset_keys(key))


def writers(source: str) -> set[dg.AssetKey]:
    """The ingest assets that fill a raw table, or every ingest asset for ops.ingest_log / ops.quarantine."""
    schema, table = source.split(".")
    if schema == "raw":
        return {dg.AssetKey(f"raw_{s.name}") for s in SOURCES.values() if table in s.tables}
    if source in ("ops.ingest_log", "ops.quarantine"):
        return INGEST
    if source == "governance.capacity_recommendations":
        return {dg.AssetKey("capacity_recommendations")}
    return {dg.AssetKey([schema, table])}  # external: written by checks or the scrape sensor


def sources_of(unique_id: str) -> set[str]:
    """The sources ("raw.job_events") a dbt node reads, through every model between."""
    found, todo, seen = set(), [unique_id], set()
    while todo:
        node = todo.pop()
        for parent in MANIFEST["parent_map"].get(node, []):
            if parent.startswith("source."):
                props = MANIFEST["sources"][parent]
                found.add(f"{props['source_name']}.{props['name']}")
            elif parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return found


def model_id(name: str) -> str:
    [unique_id] = [i for i, n in MANIFEST["nodes"].items() if n["resource_type"] == "model" and n["name"] == name]
    return unique_id


def test_the_models_folder_has_metrics_views():
    assert len(METRICS_VIEWS) >= 30


@pytest.mark.parametrize("view", METRICS_VIEWS)
def test_each_metrics_view_is_an_asset_with_a_path_to_its_sources(view):
    key = dg.AssetKey(["metrics", view])
    assert GRAPH.has(key) and GRAPH.get(key).is_materializable, f"{key.to_user_string()} is not a dbt asset"
    sources = sources_of(model_id(view))
    assert bool(sources) != (view in CATALOG_VIEWS), f"metrics.{view}: sources {sources}"
    above = upstream(key)
    for source in sources:
        assert writers(source) <= above, f"metrics.{view}: {source}'s writers are not upstream"


def test_most_metrics_views_reach_an_ingest_asset():
    """Only the catalog's views and the views over checks' and the scrape sensor's own tables start
    outside ingest."""
    without = {v for v in METRICS_VIEWS if not upstream(dg.AssetKey(["metrics", v])) & INGEST}
    assert without == CATALOG_VIEWS | {"check_results", "scrape_gaps"}


def test_every_model_and_seed_is_an_asset_keyed_by_its_relation():
    nodes = [n for n in MANIFEST["nodes"].values() if n["resource_type"] in ("model", "seed")]
    for node in nodes:
        key = dg.AssetKey([node["schema"], node["name"]])
        assert GRAPH.has(key) and GRAPH.get(key).group_name == node["schema"], key


def checked_node(test: dict) -> dict:
    """The model or seed a dbt test checks: its attached node, its one parent, or (a singular test
    reading several relations) the model its `meta.dagster.ref` names."""
    ref = test["config"].get("meta", {}).get("dagster", {}).get("ref", {}).get("name")
    if ref:
        return MANIFEST["nodes"][model_id(ref)]
    parents = test["depends_on"]["nodes"]
    unique_id = test.get("attached_node") or (parents[0] if len(parents) == 1 else None)
    assert unique_id and unique_id.startswith(("model.", "seed.")), f"{test['unique_id']}: which model does it check?"
    return MANIFEST["nodes"][unique_id]


def test_every_dbt_test_is_an_asset_check_of_its_model():
    checks = {(k.asset_key, k.name) for k in GRAPH.asset_check_keys}
    tests = [n for n in MANIFEST["nodes"].values() if n["resource_type"] == "test"]
    assert len(tests) > 100
    for test in tests:
        node = checked_node(test)
        assert (dg.AssetKey([node["schema"], node["name"]]), test["name"]) in checks, test["unique_id"]


def test_the_build_checks_are_on_the_models():
    checks = {(k.asset_key.to_user_string(), k.name) for k in GRAPH.asset_check_keys}
    assert ("metrics/ingest_daily", "ingest_accounting_balanced") in checks
    assert ("metrics/catalog", "catalog_matches_models") in checks


def read_relations(*modules: str) -> set[dg.AssetKey]:
    """The relations the modules' SQL reads (from/join), as the assets behind them."""
    keys: set[dg.AssetKey] = set()
    for module in modules:
        for path in sorted(REPO_ROOT.glob(module)):
            for schema, name in RELATION.findall(Path(path).read_text()):
                keys |= writers(f"raw.{name}") if schema == "raw" else {dg.AssetKey([schema, name])}
    return keys


def deps(asset: str) -> set[dg.AssetKey]:
    return set(GRAPH.get(dg.AssetKey(asset)).parent_keys)


def test_policy_findings_depends_on_the_models_its_inputs_read():
    assert deps("policy_findings") == read_relations("pipelines/policies/inputs.py")


def test_capacity_recommendations_depend_on_the_relations_they_read():
    assert deps("capacity_recommendations") == read_relations("pipelines/capacity/*.py")


def test_the_review_pack_depends_on_the_views_of_its_figures_and_tables():
    from pipelines.pack.figures import FIGURES, TABLES

    views = {dg.AssetKey(["metrics", x.view]) for x in (*FIGURES, *TABLES)}
    assert deps("review_pack") == views | read_relations("pipelines/pack/*.py")
    assert dg.AssetKey("capacity_recommendations") in upstream(dg.AssetKey("review_pack"))


def test_the_dbt_run_of_a_day_range_is_one_run_with_that_window():
    spec = GRAPH.get(dg.AssetKey(["marts", "fct_gpu_activity"]))
    assert spec.partitions_def == GRAPH.get(dg.AssetKey("raw_dcgm_parquet")).partitions_def
    assert spec.backfill_policy == dg.BackfillPolicy.single_run()
