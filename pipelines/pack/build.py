"""Build one month's pack from the warehouse's metrics views into a new version folder."""
from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from pipelines.pack import store
from pipelines.pack.figures import collect
from pipelines.pack.render import render
from pipelines.warehouse import Warehouse


def build_pack(warehouse: Warehouse, month: dt.date, lang: str = "en") -> Path:
    """Collect (on the analysts' read-only connection), render and store the pack for `month`; returns
    its folder, recorded in ops.review_packs."""
    started = time.monotonic()
    con = warehouse.analyst_connect()  # read-only, no file but the warehouse and its lake
    try:
        figs = collect(con, month)
    finally:
        con.close()  # before the writer opens the same file
    out = store.new_version_dir(warehouse.home, figs.month, lang)
    render(figs, out, lang)
    home = warehouse.home
    store.record_pack(warehouse, store.PackRecord(
        month=figs.month, version=out.name, lang=lang, catalog_version=figs.catalog_version,
        built_at=dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0),
        html_path=str(out.relative_to(home) / "pack.html"), pdf_path=str(out.relative_to(home) / "pack.pdf"),
        build_seconds=round(time.monotonic() - started, 1)))
    return out
