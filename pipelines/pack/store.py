"""Packs kept under <home>/packs/<YYYY-MM>/<version>/, never overwritten: a new build gets a new
version folder (a UTC timestamp, suffixed when two land in the same second). The index of packs
built is the warehouse table ops.review_packs (one row per pack, DDL in pipelines/contracts.py),
which the dashboards' Review packs page reads."""
from __future__ import annotations

import datetime as dt
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from pipelines.contracts import REVIEW_PACKS_TABLE
from pipelines.warehouse import Warehouse


@dataclass(frozen=True)
class PackRecord:
    """One pack built: a row of ops.review_packs (in its column order)."""

    month: dt.date  # first day of the month
    version: str  # the version folder's name
    lang: str
    catalog_version: str
    built_at: dt.datetime  # UTC, naive
    html_path: str  # relative to the gpupool home: packs/<YYYY-MM>/<version>/pack.html
    pdf_path: str
    build_seconds: float
    release_id: int  # the warehouse release its figures were read from (pinned)
    tenant: str | None = None  # a tenant pack's tenant; None: the pool's pack


def packs_dir(home: Path) -> Path:
    return Path(home) / "packs"


def new_version_dir(home: Path, month: dt.date, lang: str, tenant: str | None = None) -> Path:
    """A fresh folder for one pack (a tenant's under tenants/<tenant>/); an existing folder is never reused."""
    base = packs_dir(home) / month.strftime("%Y-%m")
    if tenant is not None:
        base = base / "tenants" / safe_name(tenant)
    base.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{lang}"
    for n in range(1000):
        path = base / (stamp if n == 0 else f"{stamp}.{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{base}: no free version folder for {stamp}")


def safe_name(tenant: str) -> str:
    """A tenant's folder name: its name where that is a plain file name, else its hex (never a path)."""
    if tenant and tenant not in (".", "..") and all(c.isalnum() or c in "-_." for c in tenant) and tenant.isascii():
        return tenant
    return "x-" + tenant.encode().hex()


def record_pack(warehouse: Warehouse, pack: PackRecord) -> None:
    """Add the pack to the index (ops.review_packs)."""
    with warehouse.writer() as con:
        columns = ", ".join(f.name for f in fields(PackRecord))
        con.execute(f"insert into {REVIEW_PACKS_TABLE} ({columns}) values ({', '.join('?' * len(fields(PackRecord)))})",
                    list(astuple(pack)))
