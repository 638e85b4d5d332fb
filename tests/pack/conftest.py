"""Fixtures and helpers of the pack tests."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.warehouse import Warehouse
from tests.conftest import built_once, copy_home, gpupool_command


@pytest.fixture(scope="session")
def packed_twice_demo_home(tmp_path_factory: pytest.TempPathFactory, packed_demo_home: Path) -> Path:
    """packed_demo_home with a second pool pack of November built after the first, in Chinese
    (`gpupool pack --month 2026-11 --lang zh`), once per test run; read it, or copy it."""
    def make(home: Path) -> None:
        copy_home(packed_demo_home, home)
        gpupool_command("pack", "--month", "2026-11", "--lang", "zh", "--home", str(home))

    return built_once(tmp_path_factory, "small-demo-packed-twice", make)


def keep_only_tenants(home: Path, *tenants: str) -> None:
    """Leave `tenants` the only tenants with allocations (the ones a tenant pack is built for) in a copied
    home, and publish: "every tenant's pack" then costs two renders, not the demo's six."""
    with Warehouse(home).writer() as con:
        con.execute(f"delete from marts.fct_allocation_daily where tenant not in ({', '.join('?' * len(tenants))})",
                    list(tenants))
