"""A tenant's pack, for its team lead: the same machinery as the pool's pack (figures.collect,
render), its queries limited to one tenant (the tenant is each query's last parameter)."""
from __future__ import annotations

import datetime as dt

import duckdb

from pipelines.pack.figures import DAYS, Figure, PackSpec, Table, next_month

TENANT_PARTS = ("usage",)

TENANT_FIGURES: tuple[Figure, ...] = (
    Figure("allocated_gpu_hours", "usage", "allocated_gpu_hours", "tenant_daily",
           f"select sum(allocated_gpu_hours) from metrics.tenant_daily where {DAYS} and tenant = ?"),
)

TENANT_TABLES: tuple[Table, ...] = ()

TENANT = PackSpec("tenant", TENANT_PARTS, TENANT_FIGURES, TENANT_TABLES,
                  part_titles={"usage": {"en": "1. Usage", "zh": "一、使用"}})


def tenant_answers(con: duckdb.DuckDBPyConnection, figs) -> tuple[list, list]:
    """Page 1 of a tenant pack: (answers, decisions). Filled in by the tenant pack's work."""
    return [], []


def tenants_of_month(con: duckdb.DuckDBPyConnection, month: dt.date) -> list[str]:
    """The tenants with allocations in the month, the ones a tenant pack is built for."""
    rows = con.sql(f"select distinct tenant from metrics.tenant_daily where {DAYS} and tenant is not null "
                   "order by tenant", params=[month, next_month(month)]).fetchall()
    return [r[0] for r in rows]
