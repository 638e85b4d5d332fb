"""docs/data-dictionary.md, models/metrics/_catalog_docs.md and models/metrics_schema.json are current
(no warehouse needed)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines import dictionary as dd
from pipelines.catalog import load_catalog, load_model_docs
from pipelines.cli import main
from pipelines.contracts import contracts
from pipelines.paths import MODELS_DIR

pytestmark = pytest.mark.slow  # builds a warehouse and the data dictionary


def test_committed_dictionary_is_current() -> None:
    result = CliRunner().invoke(main, ["dictionary", "--check"])
    assert result.exit_code == 0, result.output


def test_generation_is_deterministic() -> None:
    assert dd.generate() == dd.generate()


def test_every_table_and_column_is_described_with_its_grain() -> None:
    assert dd.undescribed() == []
    text = dd.DICTIONARY_PATH.read_text()
    for qualified, doc in load_model_docs().items():
        assert f"### {qualified}\n" in text
        for column in doc.column_names:
            assert f"| `{column}` |" in text
    for c in contracts().values():
        assert f"### {c.table}\n" in text
    for table in ("ops.ingest_log", "ops.check_results", "ops.scrape_gaps", "governance.capacity_recommendations",
                  "governance.policy_findings", "metrics.catalog", "metrics.catalog_version"):
        assert f"### {table}\n" in text
    assert all(r.grain.strip() for r in dd.relations())


def test_metrics_views_list_their_catalog_metrics_in_both_languages() -> None:
    text = dd.DICTIONARY_PATH.read_text()
    for m in load_catalog().metrics:
        section = text.split(f"### {m.view}\n", 1)[1].split("\n### ", 1)[0]
        assert f"| `{m.column}` | `{m.name}` | {m.label_en} | {m.label_zh} |" in section


def test_check_fails_with_a_diff_summary_when_stale(tmp_path: Path, monkeypatch) -> None:
    stale = tmp_path / "data-dictionary.md"
    stale.write_text(dd.DICTIONARY_PATH.read_text().replace("| `queue_wait_p95_s` |", "| `queue_wait_p99_s` |", 1))
    monkeypatch.setattr(dd, "DICTIONARY_PATH", stale)
    result = CliRunner().invoke(main, ["dictionary", "--check"])
    assert result.exit_code != 0
    assert "stale" in result.output and "queue_wait_p99_s" in result.output


def test_check_fails_when_the_catalog_docs_blocks_are_stale(tmp_path: Path, monkeypatch) -> None:
    stale = tmp_path / "_catalog_docs.md"
    stale.write_text(dd.CATALOG_DOCS_PATH.read_text().replace("容量GPU小时", "容量", 1))
    monkeypatch.setattr(dd, "CATALOG_DOCS_PATH", stale)
    result = CliRunner().invoke(main, ["dictionary", "--check"])
    assert result.exit_code != 0
    assert "_catalog_docs.md is stale" in result.output


def test_each_metric_has_a_docs_block_with_its_definition() -> None:
    text = dd.CATALOG_DOCS_PATH.read_text()
    for m in load_catalog().metrics:
        block = text.split(f"{{% docs metric_{m.name} %}}\n", 1)[1].split("{% enddocs %}", 1)[0]
        assert f"**{m.label_en}** · {m.label_zh}" in block and f"version {m.version}" in block
        assert f"\n{m.description}\n\n{m.description_zh}\n" in block  # the definition in both languages
        assert f"- formula: `{m.formula}`" in block and f"- unit: {m.unit}" in block


def test_a_changed_property_shows_in_the_dictionary(tmp_path: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(MODELS_DIR, models, ignore=shutil.ignore_patterns("target", "logs"))
    properties = models / "metrics" / "_queues.yml"
    text = properties.read_text()
    at = text.index("description: UTC day\n", text.index("- name: queue_daily\n"))
    properties.write_text(text[:at] + "description: the UTC day, renamed\n" + text[at + len("description: UTC day\n"):])
    assert "the UTC day, renamed" in dd.render(models_dir=models)
    assert "the UTC day, renamed" not in dd.DICTIONARY_PATH.read_text()


def test_snapshot_is_generated_from_the_properties() -> None:
    committed = json.loads(dd.SNAPSHOT_PATH.read_text())
    assert committed["views"]["metrics.queue_daily"] == load_model_docs()["metrics.queue_daily"].column_names
