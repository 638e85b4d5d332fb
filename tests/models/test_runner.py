"""The model runner: discovery, dependency order, errors, progress, the catalog tables, day batches."""
from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import duckdb
import pytest

from pipelines.catalog import load_catalog
from pipelines.models_runner import ModelBuildError, build_models, discover_models, references
from pipelines.paths import MODELS_DIR
from tests.models.builders import build, gpu, load, one, write_catalog


def write_model(models: Path, layer: str, name: str, sql: str, columns: list[str], build: str = "") -> None:
    (models / layer).mkdir(parents=True, exist_ok=True)
    (models / layer / f"{name}.sql").write_text(sql)
    described = "\n".join(f"  - {{name: {c}, description: test column}}" for c in columns)
    build_key = f"build: {{{build}}}\n" if build else ""
    (models / layer / f"{name}.yml").write_text(
        f"grain: test\ndescription: test model\n{build_key}columns:\n{described}\n"
    )


@pytest.fixture
def tiny_models(tmp_path: Path) -> Path:
    """A models/ tree with only the real catalog and seeds, for runner tests."""
    models = tmp_path / "models"
    (models / "seeds").mkdir(parents=True)
    for f in (MODELS_DIR / "seeds").iterdir():
        shutil.copy(f, models / "seeds" / f.name)
    write_catalog(
        models / "catalog",
        "  - {name: n, group: task, label_en: N, label_zh: 数量, description: d, type: simple, grain: g,"
        " unit: u, formula: f, source_fields: [x], view: metrics.m, column: n, version: 1.0.0}\n",
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


# -- models built one day at a time ---------------------------------------------------------------
PER_MINUTE = (
    "select date_trunc('minute', seen_at) as minute_at, sum(n) as n from raw.events "
    "where seen_at >= getvariable('batch_start_at') and seen_at < getvariable('batch_end_at') group by 1"
)


def events_table(rows: list[tuple[str, int]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("create schema raw")
    con.execute("create table raw.events (seen_at timestamp, n integer)")
    if rows:
        con.executemany("insert into raw.events values (?, ?)", rows)
    return con


def test_by_day_model_is_built_per_day_with_data_and_sums_like_one_pass(tiny_models):
    # 23:59:30 on the 1st, two samples in 00:00 of the 2nd, one on the 4th; nothing on the 3rd
    con = events_table([
        ("2026-11-01 23:59:30", 1), ("2026-11-02 00:00:10", 2), ("2026-11-02 00:00:50", 4),
        ("2026-11-04 08:00:00", 8),
    ])
    write_model(tiny_models, "marts", "per_minute", PER_MINUTE, ["minute_at", "n"], build="by_day: raw.events.seen_at")
    write_model(tiny_models, "metrics", "m", "select sum(n) as n from marts.per_minute", ["n"])
    built = {b.name: b for b in build_models(con, tiny_models)}

    assert (built["marts.per_minute"].batches, built["marts.per_minute"].rows) == (3, 3)
    assert con.execute("select minute_at, n from marts.per_minute order by minute_at").fetchall() == [
        (dt.datetime(2026, 11, 1, 23, 59), 1), (dt.datetime(2026, 11, 2, 0, 0), 6), (dt.datetime(2026, 11, 4, 8, 0), 8),
    ]
    assert con.execute("select n from metrics.m").fetchall() == [(15,)]
    # the day bounds do not outlive the build
    assert con.execute("select getvariable('batch_start_at'), getvariable('batch_end_at')").fetchall() == [
        (None, None)
    ]


def test_by_day_model_over_no_rows_is_created_empty(tiny_models):
    con = events_table([])
    write_model(tiny_models, "marts", "per_minute", PER_MINUTE, ["minute_at", "n"], build="by_day: raw.events.seen_at")
    built = {b.name: b for b in build_models(con, tiny_models)}["marts.per_minute"]

    assert (built.batches, built.rows) == (1, 0)
    assert [c[0] for c in con.execute("describe marts.per_minute").fetchall()] == ["minute_at", "n"]


def test_failed_day_rolls_back_the_build_and_clears_the_day_bounds(tiny_models):
    con = events_table([("2026-11-01 10:00:00", 1), ("2026-11-02 10:00:00", 0)])
    write_model(tiny_models, "marts", "per_minute", PER_MINUTE.replace("sum(n)", "sum(1 // n)"), ["minute_at", "n"],
                build="by_day: raw.events.seen_at")
    with pytest.raises(ModelBuildError, match=r"per_minute\.sql: building marts\.per_minute failed"):
        build_models(con, tiny_models)
    assert con.execute("select count(*) from information_schema.tables where table_name = 'per_minute'").fetchall() == [
        (0,)
    ]
    assert con.execute("select getvariable('batch_start_at')").fetchall() == [(None,)]


@pytest.mark.parametrize(
    ("layer", "sql", "build", "message"),
    [
        ("marts", PER_MINUTE.replace(" and seen_at < getvariable('batch_end_at')", ""), "by_day: raw.events.seen_at",
         r"per_minute\.sql: built by day, so its SQL must filter its input on getvariable\('batch_end_at'\)"),
        ("marts", PER_MINUTE, "by_day: events.seen_at",
         r"per_minute\.yml: build\.by_day is 'events\.seen_at'; expected <schema>\.<table>\.<timestamp column>"),
        ("marts", PER_MINUTE, "by_week: raw.events.seen_at", r"per_minute\.yml: build must be a mapping with one key, by_day"),
        ("staging", PER_MINUTE, "by_day: raw.events.seen_at", r"per_minute\.yml: build\.by_day applies to marts"),
        ("marts", PER_MINUTE, "by_day: raw.missing.seen_at", r"per_minute\.sql: references raw\.missing"),
        ("marts", PER_MINUTE, "", r"per_minute\.sql: reads getvariable\('batch_start_at'\) but per_minute\.yml has no build"),
    ],
)
def test_by_day_declaration_errors_name_the_model(tiny_models, layer, sql, build, message):
    con = events_table([("2026-11-01 10:00:00", 1)])
    write_model(tiny_models, layer, "per_minute", sql, ["minute_at", "n"], build=build)
    with pytest.raises(ModelBuildError, match=message):
        build_models(con, tiny_models)
