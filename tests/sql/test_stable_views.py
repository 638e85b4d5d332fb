"""The metrics views' names and columns change only with a catalog version bump.

models/metrics_schema.json freezes them (view -> columns, with the catalog version); it is
generated from the dbt properties (models/metrics/_*.yml) by `gpupool dictionary`, which refuses to
rewrite it for the same version. The slow test checks a built warehouse's views against them."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from pipelines import dictionary as dd
from pipelines.catalog import load_catalog
from pipelines.lake.reader import search_config
from pipelines.warehouse import Warehouse


def _current() -> dict:
    return dd.snapshot(load_catalog().version)


def test_metrics_views_match_the_snapshot_of_this_catalog_version() -> None:
    committed = json.loads(dd.SNAPSHOT_PATH.read_text())
    problems = dd.snapshot_problems(committed, _current())
    assert not problems, "\n".join(problems)


def test_changed_columns_without_a_version_bump_say_to_bump_it() -> None:
    current = _current()
    changed = json.loads(json.dumps(current))
    changed["views"]["metrics.pool_daily"] = [*changed["views"]["metrics.pool_daily"], "gone_column"]
    problems = dd.snapshot_problems(changed, current)
    assert problems and "bump `version` in models/catalog/version.yml" in problems[0]
    assert any("metrics.pool_daily" in p and "gone_column" in p for p in problems)


def test_a_bumped_version_with_an_old_snapshot_says_to_regenerate() -> None:
    current = _current()
    old = dict(current, catalog_version="0.0.1")
    problems = dd.snapshot_problems(old, current)
    assert problems and "regenerate" in problems[0]


@pytest.mark.slow
def test_built_views_have_exactly_the_documented_columns(demo_home: Path) -> None:
    con = duckdb.connect(str(Warehouse(demo_home).db_path), read_only=True, config=search_config(demo_home))
    try:
        rows = con.sql(
            "select table_name, column_name from information_schema.columns where table_schema = 'metrics' "
            "order by table_name, ordinal_position"
        ).fetchall()
    finally:
        con.close()
    built: dict[str, list[str]] = {}
    for table, column in rows:
        built.setdefault(f"metrics.{table}", []).append(column)
    assert built == dd.metrics_columns()
