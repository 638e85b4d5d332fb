"""The catalog and the dbt properties are complete: every metric resolves, every column is described,
every metric column is linked to the catalog, and dbt's manifest reads the properties as we do."""
from __future__ import annotations

import re
import shutil

import pytest
import yaml

from pipelines.catalog import (
    GROUPS,
    CatalogError,
    catalog_link_problems,
    catalog_mismatches,
    documentation_gaps,
    load_catalog,
    load_model_docs,
    missing_metric_columns,
)
from pipelines.paths import MODELS_DIR
from tests.models.builders import build, gpu, load, write_catalog

pytestmark = pytest.mark.slow  # dbt parses and builds

CJK = re.compile(r"[\u4e00-\u9fff]")

# PRODUCT.md "One set of metric definitions": the metrics each group must carry (catalog names)
REQUIRED = {
    "resource": {
        "capacity_gpu_hours", "allocated_gpu_hours", "active_gpu_hours", "allocation_rate",
        "utilisation_of_allocated", "pool_utilisation", "idle_allocated_gpu_hours", "memory_watermark",
        "pcie_tx_bytes", "nvlink_tx_bytes", "queue_wait", "admission_wait_p50",
    },
    "task": {
        "submissions", "run_time", "failure_rate", "failures_by_reason", "retries", "retry_gpu_hours",
        "preemptions", "checkpoint_policy_coverage", "task_type_mix",
    },
    "governance": {
        "quota_usage", "borrowed_gpu_hours", "permission_changes", "audit_records", "enforcement_actions",
        "recovered_gpu_hours", "total_cost", "capacity_recommendations",
    },
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from pipelines.warehouse import Warehouse

    wh = Warehouse(tmp_path_factory.mktemp("catalog") / "gpupool")
    load(wh, gpu_inventory=[gpu("a100-01", 0)])
    return build(wh)


def test_every_metric_view_and_column_exists(built):
    assert missing_metric_columns(built, load_catalog()) == []


def test_every_model_and_column_is_documented(built):
    assert documentation_gaps(built) == []
    assert catalog_mismatches(built) == []


def test_an_undocumented_or_unbuilt_column_is_a_gap(built, tmp_path):
    models = _models_copy(tmp_path)
    _in_model(models / "metrics" / "_pool.yml", "pool_daily", "  - name: day\n", "  - name: the_day\n")
    gaps = documentation_gaps(built, models)
    assert "metrics.pool_daily.day: undocumented in metrics/_pool.yml" in gaps
    assert "metrics.pool_daily.the_day: documented in metrics/_pool.yml but not produced" in gaps


def test_metric_columns_are_described_by_the_catalogs_docs_blocks():
    docs = load_model_docs()
    assert catalog_link_problems(load_catalog(), docs) == []
    column = next(c for c in docs["metrics.pool_daily"].columns if c.name == "allocated_gpu_hours")
    assert column.doc == "metric_allocated_gpu_hours"
    assert "已分配GPU小时" in column.description and "formula:" in column.description
    assert "allocated_gpu_hours" in docs["metrics.pool_daily"].metrics


def test_an_unlinked_metric_column_or_a_stale_meta_is_a_problem(tmp_path):
    models = _models_copy(tmp_path)
    path = models / "metrics" / "_pool.yml"
    text = path.read_text()
    start = text.index("- name: pool_daily\n")
    head, tail = text[:start], text[start:]
    tail = tail.replace('''description: "{{ doc('metric_allocated_gpu_hours') }}"''', "description: held", 1)
    tail = tail.replace("      - allocated_gpu_hours\n", "", 1)
    path.write_text(head + tail)
    problems = catalog_link_problems(load_catalog(models / "catalog"), load_model_docs(models))
    assert any(p.startswith("metrics.pool_daily.allocated_gpu_hours: carries metric allocated_gpu_hours; "
                            "its description must be") for p in problems)
    assert any(p.startswith("metrics.pool_daily: meta.metrics is") for p in problems)


def test_malformed_properties_are_rejected(tmp_path):
    models = _models_copy(tmp_path)
    path = models / "metrics" / "_pool.yml"
    original = path.read_text()
    path.write_text(original.replace("metric_allocated_gpu_hours') }}", "metric_nowhere') }}", 1))
    with pytest.raises(CatalogError, match="docs block 'metric_nowhere', which no .md file defines"):
        load_model_docs(models)
    path.write_text(original)
    (models / "metrics" / "orphan.sql").write_text("select 1 as x\n")
    with pytest.raises(CatalogError, match=r"no properties for \['orphan'\]"):
        load_model_docs(models)


@pytest.fixture(scope="module")
def dbt_nodes(tmp_path_factory):
    """The models and seeds as `dbt parse` reads the project, by schema-qualified name."""
    from dbt.cli.main import dbtRunner

    tmp = tmp_path_factory.mktemp("parse")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUPOOL_HOME", str(tmp / "home"))
        result = dbtRunner().invoke(["parse", "--project-dir", str(MODELS_DIR), "--profiles-dir", str(MODELS_DIR),
                                     "--target-path", str(tmp / "target"), "--log-path", str(tmp / "logs"),
                                     "--quiet", "--no-partial-parse", "--no-send-anonymous-usage-stats"])
    assert result.success, result.exception
    return {f"{n.schema}.{n.name}": n for n in result.result.nodes.values() if n.resource_type in ("model", "seed")}


def test_dbt_reads_the_properties_as_load_model_docs_does(dbt_nodes):
    docs = load_model_docs()
    assert sorted(dbt_nodes) == sorted(docs)
    for qualified, doc in docs.items():
        node = dbt_nodes[qualified]
        assert (node.description, node.config.meta.get("grain")) == (doc.description, doc.grain), qualified
        assert list(node.config.meta.get("metrics", [])) == list(doc.metrics), qualified
        assert {c: col.description for c, col in node.columns.items()} == {
            c.name: c.description for c in doc.columns}, qualified


def test_marts_are_tables_and_staging_and_metrics_are_views(dbt_nodes):
    """dbt_project.yml materialises per folder (a model's fqn has its folder below the layer, not the
    layer): a marts folder it misses, or a staging folder named like a marts one, shows here."""
    own_tables = {"metrics.catalog", "metrics.catalog_version"}  # rebuilt with the catalog: their own config()
    own_views = {"marts.fct_pool_hourly"}  # its weeks move with the data's end: computed when read
    wrong = {q: n.config.materialized for q, n in dbt_nodes.items() if n.resource_type == "model"
             and n.config.materialized not in (("table", "incremental") if (n.schema == "marts" or q in own_tables)
                                               and q not in own_views else ("view",))}
    assert wrong == {}


def test_every_source_and_source_table_is_described():
    sources = yaml.safe_load((MODELS_DIR / "staging" / "_sources.yml").read_text())["sources"]
    undescribed = [s["name"] for s in sources if not s.get("description")]
    undescribed += [f"{s['name']}.{t['name']}" for s in sources for t in s["tables"] if not t.get("description")]
    assert undescribed == []


def test_labels_and_groups():
    catalog = load_catalog()
    for m in catalog.metrics:
        assert CJK.search(m.label_zh), f"{m.name}: label_zh {m.label_zh!r} has no Chinese"
        assert CJK.search(m.description_zh), f"{m.name}: description_zh {m.description_zh!r} has no Chinese"
        assert m.group in GROUPS
    for u in catalog.unavailable:
        assert CJK.search(u.label_zh), f"{u.name}: label_zh has no Chinese"


def test_product_metrics_are_all_in_the_catalog():
    catalog = load_catalog()
    for group, names in REQUIRED.items():
        present = {m.name for m in catalog.by_group(group)}
        assert names <= present, f"{group}: missing {sorted(names - present)}"


ENTRY = (
    "  - {name: n, group: GROUP, label_en: N, label_zh: 数量, description: d, description_zh: 定义, type: simple,"
    " grain: g, unit: u, formula: f, source_fields: [x], view: metrics.m, column: n, version: 1.0.0}\n"
)


def test_malformed_catalog_entries_are_rejected(tmp_path):
    from pipelines.catalog import CatalogError

    folder = tmp_path / "catalog"
    with pytest.raises(CatalogError, match="group 'money'"):
        load_catalog(write_catalog(folder, ENTRY.replace("GROUP", "money")))
    with pytest.raises(CatalogError, match="label_zh is missing or empty"):
        load_catalog(write_catalog(folder, ENTRY.replace("GROUP", "task").replace("label_zh: 数量", "label_zh: ''")))
    with pytest.raises(CatalogError, match="description_zh is missing or empty"):
        load_catalog(write_catalog(folder, ENTRY.replace("GROUP", "task").replace(", description_zh: 定义", "")))
    with pytest.raises(CatalogError, match=r"\(n\): description_zh has no Chinese characters"):
        load_catalog(write_catalog(folder, ENTRY.replace("GROUP", "task").replace("_zh: 定义", "_zh: d")))
    with pytest.raises(CatalogError, match=r"task\.yml: metric #1 \(n\): group 'resource' belongs in resource\.yml"):
        load_catalog(write_catalog(folder, ENTRY.replace("GROUP", "resource")))


def test_the_catalog_is_its_version_file_and_one_file_per_group(tmp_path):
    from pipelines.catalog import CatalogError

    folder = write_catalog(tmp_path / "catalog", ENTRY.replace("GROUP", "task"), version="2.1.0")
    catalog = load_catalog(folder)
    assert (catalog.version, [m.name for m in catalog.by_group("task")]) == ("2.1.0", ["n"])
    (folder / "money.yml").write_text("metrics: []\n")
    with pytest.raises(CatalogError, match=r"\['money\.yml'\] are not catalog files"):
        load_catalog(folder)
    (folder / "money.yml").unlink()
    (folder / "governance.yml").unlink()
    with pytest.raises(CatalogError, match=r"governance\.yml: catalog file missing"):
        load_catalog(folder)


def test_idle_rules_have_exactly_one_default_row(built):
    # without it, allocations matching no queue or template row would never be evaluated
    default = "select count(*) from marts.dim_idle_rules where queue is null and template is null"
    assert built.execute(default).fetchall() == [(1,)]


def _models_copy(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(MODELS_DIR, models, ignore=shutil.ignore_patterns("target", "logs"))
    return models


def _in_model(path, model, old, new):
    """Replace the first `old` after `- name: <model>` in a properties file."""
    text = path.read_text()
    at = text.index(old, text.index(f"- name: {model}\n"))
    path.write_text(text[:at] + new + text[at + len(old):])
