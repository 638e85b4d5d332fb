"""`gpupool pack`: build the monthly review pack."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from pipelines.cli.common import HOME_OPTION, MONTH_HELP, loaded_months, parse_month, step, warehouse
from pipelines.warehouse import ReleaseExpired, Warehouse


def _tenants(wh: Warehouse, month: dt.date, as_of: int | None) -> list[str]:
    """The tenants with allocations in the month, in the release the packs read."""
    from pipelines.pack.tenant import tenants_of_month

    con = wh.analyst_connect(release=as_of)
    try:
        return tenants_of_month(con, month)
    finally:
        con.close()


def _check_tenant(wh: Warehouse, month: dt.date, tenant: str, as_of: int | None) -> None:
    """Refuse a tenant with no allocations in the month (a typo would build an empty pack), naming those
    that have some; the same release the pack would read."""
    known = _tenants(wh, month, as_of)
    if tenant not in known:
        raise click.ClickException(
            f"tenant {tenant!r} has no allocations in {month:%Y-%m}; tenants of that month: "
            f"{', '.join(known) or 'none (build the warehouse for that month first)'}")


def _latest_month(wh: Warehouse, as_of: int | None) -> dt.date:
    """The month --month defaults to: the latest with data in the release the pack reads."""
    with wh.analyst_connect(release=as_of) as con:
        loaded = loaded_months(con)
    if not loaded:
        raise click.ClickException("no data in the warehouse: run `gpupool demo` or ingest a month first")
    return loaded[-1]


@click.command()
@HOME_OPTION
@click.option("--month", default=None, help=MONTH_HELP)
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True, help="Language of the pack.")
@click.option("--as-of", "as_of", type=int, default=None, metavar="RELEASE",
              help="Build from this kept warehouse release (the id an earlier pack recorded; `gpupool releases` "
                   "lists them) instead of the latest: the same figures again.")
@click.option("--tenant", default=None, help="Build this tenant's pack for its team lead instead of the pool's.")
@click.option("--all-tenants", "all_tenants", is_flag=True,
              help="Build the pool's pack and every tenant's with allocations in the month (as the monthly schedule does).")
def pack(home: Path | None, month: str | None, lang: str, as_of: int | None, tenant: str | None, all_tenants: bool) -> None:
    """The monthly review pack (HTML, PDF, PNG charts, CSV/Parquet appendix) from the metrics views,
    kept under <home>/packs/YYYY-MM/<version>/ and listed in the warehouse's ops.review_packs with the
    release it read, which stays kept (docs/pack.md)."""
    from pipelines.pack.build import build_pack
    from pipelines.pack.figures import NoDataForMonth

    first = parse_month(month) if month is not None else None
    if tenant is not None and all_tenants:
        raise click.UsageError("--tenant and --all-tenants: choose one")
    try:
        wh = warehouse(home)
        if first is None:
            first = _latest_month(wh, as_of)
            month = f"{first:%Y-%m}"
        if tenant is not None:
            _check_tenant(wh, first, tenant, as_of)
        for each in (None, *_tenants(wh, first, as_of)) if all_tenants else (tenant,):
            out = build_pack(wh, first, lang, as_of=as_of, on_step=step, tenant=each)
            step(f"review pack {month}{f' for {each}' if each else ''} ({lang}) in {out}")
            click.echo(f"  {out / 'pack.html'}\n  {out / 'pack.pdf'}")
    except (FileNotFoundError, ReleaseExpired, NoDataForMonth) as err:
        raise click.ClickException(str(err)) from None
