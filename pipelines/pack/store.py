"""Packs kept under <home>/packs/<YYYY-MM>/<version>/, never overwritten: a new build gets a new
version folder (a UTC timestamp, suffixed when two land in the same second). The index of packs
built is the warehouse table ops.review_packs (one row per pack, DDL in pipelines/contracts.py),
which the dashboards' Review packs page reads."""
from __future__ import annotations

import datetime as dt
from dataclasses import astuple, dataclass
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


def packs_dir(home: Path) -> Path:
    return Path(home) / "packs"


def new_version_dir(home: Path, month: dt.date, lang: str) -> Path:
    """A fresh folder for one pack; an existing folder is never reused."""
    base = packs_dir(home) / month.strftime("%Y-%m")
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


def record_pack(warehouse: Warehouse, pack: PackRecord) -> None:
    """Add the pack to the index (ops.review_packs)."""
    with warehouse.writer() as con:
        con.execute(f"insert into {REVIEW_PACKS_TABLE} values (?, ?, ?, ?, ?, ?, ?, ?, ?)", list(astuple(pack)))
