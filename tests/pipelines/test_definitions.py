"""The code location loads, and holds what the product needs."""
import subprocess
import sys

from pipelines.definitions import defs
from pipelines.sources.registry import SOURCES


def test_dagster_validates_the_code_location():
    result = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-m", "pipelines.definitions"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_ingest_asset_per_source_plus_the_models():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {f"raw_{name}" for name in SOURCES} | {"warehouse_models"}


def test_every_ingest_asset_has_its_expectations_check():
    names = {(k.asset_key.to_user_string(), k.name) for k in defs.resolve_asset_graph().asset_check_keys}
    for source in SOURCES:
        assert (f"raw_{source}", "expectations_suite") in names
    assert ("warehouse_models", "ingest_accounting_balanced") in names
    assert ("warehouse_models", "catalog_matches_models") in names


def test_schedules_and_jobs_are_defined():
    assert {j.name for j in defs.jobs} >= {"ingest_daily", "build_models"}
    assert len(list(defs.schedules)) == 2
