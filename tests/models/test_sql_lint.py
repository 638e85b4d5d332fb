"""The SQL models keep the house idiom (models/.sqlfluff): sqlfluff lints every model as `make lint`
does, through its Jinja templater with dbt's builtins and our macros, so no dbt parse or warehouse."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlfluff.core import FluffConfig, Linter

from pipelines.catalog import MODEL_LAYERS
from pipelines.paths import MODELS_DIR, REPO_ROOT


def _linter() -> Linter:
    return Linter(config=FluffConfig.from_path(str(MODELS_DIR)))


@pytest.mark.slow  # about 18 s of CPU for the hundred models with the Rust parser (docs/dbt.md "SQL lint")
def test_every_model_passes_the_sql_lint():
    # `make lint`'s command in a process of its own: sqlfluff's worker pool, spawned inside a pytest-xdist
    # worker, respawned its children without end and took the worker down. One sqlfluff process, not
    # make lint's two: under `make test` the other cores are busy with other tests, and a pool's
    # workers each load sqlfluff and its dialect again
    layers = [str((MODELS_DIR / layer).relative_to(REPO_ROOT)) for layer in MODEL_LAYERS]
    run = subprocess.run([str(Path(sys.executable).parent / "sqlfluff"), "lint", "--processes", "1",
                          "--format", "json", "--nofail", *layers],
                         cwd=REPO_ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    records = json.loads(run.stdout)
    linted = {(REPO_ROOT / r["filepath"]).resolve() for r in records}
    models = {p.resolve() for layer in MODEL_LAYERS for p in (MODELS_DIR / layer).rglob("*.sql")}
    assert linted == models
    problems = [f"{(REPO_ROOT / r['filepath']).resolve().relative_to(MODELS_DIR)}:{v['start_line_no']}: {v['code']} "
                f"{v['description']}" for r in records for v in r["violations"]]
    assert problems == [], "sqlfluff (make lint):\n" + "\n".join(problems)


def test_the_lint_holds_models_to_lowercase_sql_and_templates_our_macros():
    sql = ("{{ config(materialized='incremental') }}\n"
           "SELECT Source, count(*) AS n FROM {{ ref('fct_allocations') }}\n"
           "where {{ in_window_allocations() }}\nGROUP BY Source\n")
    codes = {v.rule_code() for v in _linter().lint_string(sql).get_violations()}
    assert {"CP01", "CP02"} <= codes
    assert not codes & {"TMP", "PRS"}
