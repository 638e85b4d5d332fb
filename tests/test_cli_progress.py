"""`gpupool docs` echoes dbt's lines as dbt prints them (half a minute of catalog on a large warehouse is
not silence), without dbt's time of day, and still returns all of it for an error message (issue 33)."""
from __future__ import annotations

import sys

from pipelines.cli.docs import run_showing_progress


def test_docs_echoes_each_dbt_line_as_it_comes_and_keeps_them_for_errors(capsys):
    script = "print('23:20:01  Found 101 models'); print(); print('23:20:09  Building catalog'); raise SystemExit(3)"
    code, said = run_showing_progress([sys.executable, "-c", script])
    assert code == 3
    assert capsys.readouterr().out.splitlines() == ["    dbt: Found 101 models", "    dbt: Building catalog"]
    assert "23:20:09  Building catalog" in said
