"""`gpupool pack`: build the monthly review pack."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from pipelines.cli.common import HOME_OPTION, step, warehouse
from pipelines.warehouse import ReleaseExpired


@click.command()
@HOME_OPTION
@click.option("--month", required=True, help="Month of the pack, YYYY-MM.")
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True, help="Language of the pack.")
@click.option("--as-of", "as_of", type=int, default=None, metavar="RELEASE",
              help="Build from this kept warehouse release (the id an earlier pack recorded; `gpupool releases` "
                   "lists them) instead of the latest: the same figures again.")
@click.option("--tenant", default=None, help="Build this tenant's pack for its team lead instead of the pool's.")
def pack(home: Path | None, month: str, lang: str, as_of: int | None, tenant: str | None) -> None:
    """The monthly review pack (HTML, PDF, PNG charts, CSV/Parquet appendix) from the metrics views,
    kept under <home>/packs/YYYY-MM/<version>/ and listed in the warehouse's ops.review_packs with the
    release it read, which stays kept (docs/pack.md)."""
    from pipelines.pack.build import build_pack

    try:
        first = dt.datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise click.BadParameter(f"{month!r}: expected YYYY-MM", param_hint="--month") from None
    try:
        out = build_pack(warehouse(home), first, lang, as_of=as_of, on_step=step, tenant=tenant)
    except (FileNotFoundError, ReleaseExpired) as err:
        raise click.ClickException(str(err)) from None
    step(f"review pack {month}{f' for {tenant}' if tenant else ''} ({lang}) in {out}")
    click.echo(f"  {out / 'pack.html'}\n  {out / 'pack.pdf'}")
