"""A small demo warehouse shared by the SQL-access tests (3 days, 64 GPUs, about 30 s)."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.cli import main
from pipelines.warehouse import Warehouse


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("sql_demo")
    result = CliRunner().invoke(main, ["demo", "--days", "3", "--gpus", "64", "--no-baseline", "--home", str(home)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert Warehouse(home).db_path.exists()
    return home
