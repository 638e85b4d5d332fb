"""The model runner: discovery, dependency order, errors, progress, the catalog tables."""
from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from pipelines.catalog import load_catalog
from pipelines.models_runner import ModelBuildError, build_models, discover_models, references
from pipelines.paths import MODELS_DIR
from tests.models.builders import build, gpu, load, one


def write_model(models: Path, layer: str, name: str, sql: str, columns: list[str]) -> None:
    (models / layer).mkdir(parents=True, exist_ok=True)
    (models / layer / f"{name}.sql").write_text(sql)
    described = "\n".join(f"  - {{name: {c}, description: test column}}" for c in columns)
    (models / layer / f"{name}.yml").write_text(f"grain: test\ndescription: test model\ncolumns:\n{described}\n")


@pytest.fixture
def tiny_models(tmp_path: Path) -> Path:
    """A models/ tree with only the real catalog and seeds, for runner tests."""
    models = tmp_path / "models"
    (models / "seeds").mkdir(parents=True)
    for f in (MODELS_DIR / "seeds").iterdir():
        shutil.copy(f, models / "seeds" / f.name)
    (models / "metrics.yml").write_text(
        "version: 1.0.0\nmetrics:\n"
        "  - {name: n, group: task, label_en: N, label_zh: 数量, description: d, type: simple, grain: g,"
        " unit: u, formula: f, source_fields: [x], view: metrics.m, column: n, version: 1.0.0}\n"
    )
    return models


def test_references_ignore_comments_and_strings():
    sql = "-- reads marts.old\nselect 'staging.not_a_ref' as s from marts.a join seeds.b using (x)"
    assert references(sql) == {"marts.a", "seeds.b"}


def test_models_build_in_dependency_order_with_progress(tiny_models):
    write_model(tiny_models, "metrics", "m", "select n from marts.b", ["n"])
    write_model(tiny_models, "marts", "b", "select n + 1 as n from marts.a", ["n"])
    write_model(tiny_models, "marts", "a", "select count(*) as n from seeds.idle_policy", ["n"])
    seen = []
    con = duckdb.connect()
    builds = build_models(con, tiny_models, on_progress=lambda name, i, n: seen.append((name, i, n)))

    names = [b.name for b in builds]
    assert names.index("marts.a") < names.index("marts.b") < names.index("metrics.m")
    assert seen[0][1] == 1 and seen[-1] == ("metrics.catalog", len(builds), len(builds))
    assert con.execute("select n from metrics.m").fetchall() == [(3,)]  # 2 seed rows + 1
    kinds = {b.name: b.kind for b in builds}
    assert (kinds["marts.a"], kinds["metrics.m"], kinds["seeds.gpu_models"]) == ("table", "view", "seed")
    assert con.execute("select catalog_version, metrics from metrics.catalog_version").fetchall() == [("1.0.0", 1)]


def test_unknown_reference_fails_naming_the_model(tiny_models):
    write_model(tiny_models, "marts", "a", "select * from marts.missing", ["x"])
    with pytest.raises(ModelBuildError, match=r"a\.sql: references marts\.missing"):
        build_models(duckdb.connect(), tiny_models)


def test_cycle_fails_naming_the_cycle(tiny_models):
    write_model(tiny_models, "marts", "a", "select * from marts.b", ["x"])
    write_model(tiny_models, "marts", "b", "select * from marts.a", ["x"])
    with pytest.raises(ModelBuildError, match=r"cycle among models: marts\.a -> marts\.b -> marts\.a"):
        build_models(duckdb.connect(), tiny_models)


def test_missing_sidecar_fails(tiny_models):
    (tiny_models / "marts").mkdir()
    (tiny_models / "marts" / "a.sql").write_text("select 1 as x")
    with pytest.raises(ValueError, match=r"a\.yml: sidecar missing"):
        build_models(duckdb.connect(), tiny_models)


def test_failed_build_rolls_back_and_keeps_the_previous_models(tiny_models):
    write_model(tiny_models, "marts", "a", "select 1 as x", ["x"])
    write_model(tiny_models, "metrics", "m", "select x as n from marts.a", ["n"])
    con = duckdb.connect()
    build_models(con, tiny_models)
    write_model(tiny_models, "marts", "a", "select 2 as x", ["x"])
    write_model(tiny_models, "metrics", "m", "select no_such_column as n from marts.a", ["n"])
    with pytest.raises(ModelBuildError, match=r"m\.sql: building metrics\.m failed"):
        build_models(con, tiny_models)
    assert con.execute("select x from marts.a").fetchall() == [(1,)]


def test_real_models_build_and_write_the_catalog(warehouse):
    load(warehouse, gpu_inventory=[gpu("a100-01", 0)])
    con = build(warehouse)
    catalog = load_catalog()
    assert one(con, "select catalog_version from metrics.catalog_version")["catalog_version"] == catalog.version
    assert one(con, "select count(*) as n from metrics.catalog")["n"] == len(catalog.metrics)
    layers = {m.layer for m in discover_models()}
    assert layers == {"staging", "marts", "metrics"}
