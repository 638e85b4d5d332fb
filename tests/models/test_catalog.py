"""The catalog and the sidecars are complete: every metric resolves, every column is described."""
from __future__ import annotations

import re

import pytest

from pipelines.catalog import GROUPS, documentation_gaps, load_catalog, missing_metric_columns
from tests.models.builders import build, gpu, load, write_catalog

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


def test_labels_and_groups():
    catalog = load_catalog()
    for m in catalog.metrics:
        assert CJK.search(m.label_zh), f"{m.name}: label_zh {m.label_zh!r} has no Chinese"
        assert m.group in GROUPS
    for u in catalog.unavailable:
        assert CJK.search(u.label_zh), f"{u.name}: label_zh has no Chinese"


def test_product_metrics_are_all_in_the_catalog():
    catalog = load_catalog()
    for group, names in REQUIRED.items():
        present = {m.name for m in catalog.by_group(group)}
        assert names <= present, f"{group}: missing {sorted(names - present)}"


ENTRY = (
    "  - {name: n, group: GROUP, label_en: N, label_zh: 数量, description: d, type: simple, grain: g,"
    " unit: u, formula: f, source_fields: [x], view: metrics.m, column: n, version: 1.0.0}\n"
)


def test_malformed_catalog_entries_are_rejected(tmp_path):
    from pipelines.catalog import CatalogError

    folder = tmp_path / "catalog"
    with pytest.raises(CatalogError, match="group 'money'"):
        load_catalog(write_catalog(folder, ENTRY.replace("GROUP", "money")))
    with pytest.raises(CatalogError, match="label_zh is missing or empty"):
        load_catalog(write_catalog(folder, ENTRY.replace("GROUP", "task").replace("label_zh: 数量", "label_zh: ''")))
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


def test_idle_policy_seed_has_exactly_one_default_row(built):
    # without it, allocations matching no queue or template row would never be evaluated
    assert built.execute("select count(*) from seeds.idle_policy where scope = 'default'").fetchall() == [(1,)]
