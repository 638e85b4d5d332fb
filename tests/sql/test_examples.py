"""Every example query in models/examples/ runs on the demo warehouse, reads only metrics views,
and returns rows with the columns its header documents."""
from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from pipelines.lake.reader import search_config
from pipelines.paths import MODELS_DIR, REPO_ROOT
from pipelines.warehouse import Warehouse

EXAMPLES = sorted((MODELS_DIR / "examples").glob("*.sql"))
_RELATION = re.compile(r"\b(raw|ops|governance|seeds|staging|marts|metrics)\.([a-z_][a-z0-9_]*)\b")


def references(sql: str) -> set[str]:
    """The schema-qualified relations the SQL names, ignoring comments and string literals."""
    code = re.sub(r"'(?:[^']|'')*'", "''", re.sub(r"--[^\n]*", "", sql))
    return {f"{schema}.{name}" for schema, name in _RELATION.findall(code)}


def _header(path: Path, key: str) -> list[str]:
    match = re.search(rf"^-- {key}: (.+)$", path.read_text(), re.MULTILINE)
    assert match, f"{path.name}: no '-- {key}:' line in its leading comment"
    return [part.strip() for part in match.group(1).split(",")]


def test_there_are_examples_for_the_asked_questions() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"idle_gpu_hours_by_tenant_last_month", "p95_wait_by_queue_by_week", "cost_by_tenant",
            "top_oversized_requests"} <= names
    assert len(names) >= 6


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_header_and_views(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("-- Question: ")
    views = _header(path, "Views")
    assert views and all(v.startswith("metrics.") for v in views)
    assert references(text) == set(views), f"{path.name}: reads {sorted(references(text))}, header says {views}"
    assert f"models/examples/{path.name}" in (REPO_ROOT / "docs" / "data-team.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_the_demo(path: Path, demo_home: Path) -> None:
    con = duckdb.connect(str(Warehouse(demo_home).db_path), read_only=True, config=search_config(demo_home))
    try:
        rel = con.sql(path.read_text())
        columns = rel.columns
        rows = rel.fetchall()
    finally:
        con.close()
    assert columns == _header(path, "Columns")
    assert rows, f"{path.name} returned no rows on the demo"
