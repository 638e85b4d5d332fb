"""Build one month's pack from a warehouse connection into a new version folder."""
from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import duckdb

from pipelines.pack import store
from pipelines.pack.figures import collect
from pipelines.pack.render import render


def build_pack(con: duckdb.DuckDBPyConnection, home: Path, month: dt.date, lang: str = "en") -> Path:
    """Collect, render and store the pack for `month`; returns its folder (added to the index)."""
    started = time.monotonic()
    figs = collect(con, month)
    out = store.new_version_dir(home, figs.month, lang)
    render(figs, out, lang)
    store.add_to_index(home, {"month": figs.month.strftime("%Y-%m"), "version": out.name, "lang": lang,
                              "catalog_version": figs.catalog_version,
                              "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                              "html": str(out.relative_to(store.packs_dir(home)) / "pack.html"),
                              "pdf": str(out.relative_to(store.packs_dir(home)) / "pack.pdf"),
                              "seconds": round(time.monotonic() - started, 1)})
    return out
