"""Build one month's pack from the warehouse's metrics views into a new version folder."""
from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path

from pipelines.lake import release_read
from pipelines.pack import store
from pipelines.pack.figures import POOL, collect, refuse_month_without_data
from pipelines.pack.render import render
from pipelines.warehouse import Warehouse


def build_pack(warehouse: Warehouse, month: dt.date, lang: str = "en", as_of: int | None = None,
               on_step: Callable[[str], None] = lambda _m: None, tenant: str | None = None) -> Path:
    """Collect (on the analysts' read-only connection), render and store the pack for `month` (the
    pool's, or `tenant`'s pack for its team lead); returns its folder, recorded in ops.review_packs with
    the release it read. `as_of`: read that kept release instead of the latest (raises ReleaseExpired
    when it is no longer kept). The release read is pinned, so that `as_of` finds it again and rebuilds
    the same figures. Raises NoDataForMonth when the release holds no day of the month."""
    from pipelines.pack.questions import pool_answers
    from pipelines.pack.tenant import TENANT, tenant_answers

    spec, summarise = (POOL, pool_answers) if tenant is None else (TENANT, tenant_answers)
    started = time.monotonic()
    con = warehouse.analyst_connect(release=as_of)  # read-only, no file but the release and its lake
    try:
        release_id = release_read(con)
        refuse_month_without_data(con, month.replace(day=1))  # nothing pinned, nothing written
        # pinned before the figures are read: publishes during the collect must not expire it
        warehouse.pin_release(release_id, f"pack {month:%Y-%m}" + (f" {tenant}" if tenant else ""))
        on_step(f"reading release {release_id} (pinned: `gpupool pack --month {month:%Y-%m} --as-of {release_id}` "
                "rebuilds these figures)")
        on_step(f"collecting the figures of {month:%Y-%m}" + (f" for {tenant}" if tenant else ""))
        figs = collect(con, month, spec, tenant)
        figs.answers, figs.decisions = summarise(con, figs)
    finally:
        con.close()
    out = store.new_version_dir(warehouse.home, figs.month, lang, tenant)
    on_step(f"rendering charts, appendix, HTML and PDF into {out}")
    render(figs, out, lang)
    home = warehouse.home
    store.record_pack(warehouse, store.PackRecord(
        month=figs.month, version=out.name, lang=lang, catalog_version=figs.catalog_version,
        built_at=dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0),
        html_path=str(out.relative_to(home) / "pack.html"), pdf_path=str(out.relative_to(home) / "pack.pdf"),
        build_seconds=round(time.monotonic() - started, 1), release_id=figs.release_id, tenant=tenant))
    return out
