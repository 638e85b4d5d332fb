"""`gpupool releases`: the warehouse releases kept for time travel (`gpupool pack --as-of`), and
publishing the writers' state by hand."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from pipelines.cli import render
from pipelines.cli.common import HOME_OPTION, step, warehouse
from pipelines.lake import LakeError, ReleaseNotFound
from pipelines.warehouse import Warehouse


@dataclass(frozen=True)
class KeptRelease:
    release_id: int
    created_at: str  # UTC, to the second; "?" when the registry has no row for it
    kind: str
    note: str
    size_bytes: int  # its DuckDB file; the lake's Parquet files are shared between releases
    pinned_by: list[str]  # the reasons it is pinned (packs, recommendations), first first, without repeats
    is_current: bool  # the one warehouse.duckdb serves


def kept_releases(wh: Warehouse) -> list[KeptRelease]:
    """The releases whose files are kept, newest first, with their registry row and pins."""
    current = wh.current_release()
    registry = wh.registry
    out = []
    for release_id in reversed(wh.kept_releases()):
        try:
            row = registry.get(release_id)
            created, kind, note = f"{row.created_at:%Y-%m-%d %H:%M:%S}", row.kind, row.note or ""
        except ReleaseNotFound:  # a file without its registry row (a registry replaced by hand)
            created, kind, note = "?", "?", ""
        path = wh.release_path(release_id, must_exist=False)
        out.append(KeptRelease(release_id, created, kind, note, path.stat().st_size if path.exists() else 0,
                               wh.pin_reasons(release_id), release_id == current))
    return out


@click.command()
@HOME_OPTION
@click.option("--publish", is_flag=True,
              help="Publish the writers' state now as a new release (after the data team ran a plain `dbt build` "
                   "on the writers' file); nothing new when it did not change.")
@click.option("--note", default=None, help="With --publish: a note kept with the release.")
def releases(home: Path | None, publish: bool, note: str | None) -> None:
    """The warehouse releases kept: id, when and by what they were published, size, what pins them
    (review packs, capacity recommendations: `gpupool pack --as-of ID` reads one again), and which one
    readers get now (*). The newest $GPUPOOL_KEEP_RELEASES (default 3), the pinned ones and the current
    one are kept; older ones are deleted at the next publish (docs/architecture.md)."""
    wh = warehouse(home)
    try:
        if publish:
            before = wh.current_release()
            release_id = wh.publish("publish", note)
            if release_id is None:
                raise click.ClickException(f"nothing to publish: no writers' file at {wh.writer_path}; run "
                                           "`gpupool demo` or `gpupool ingest` first")
            step(f"published release {release_id}" if release_id != before
                 else f"nothing changed since release {release_id}: readers keep it")
        kept = kept_releases(wh)
    except LakeError as err:  # e.g. the PostgreSQL release catalog is unreachable
        raise click.ClickException(str(err)) from None
    if not kept:
        raise click.ClickException(f"no release kept in {wh.releases}: run `gpupool demo` or `gpupool ingest` first")
    click.echo(render.rows(
        ["", "release", "created (UTC)", "kind", "size", "note; pinned by"],
        [("*" if r.is_current else "", r.release_id, r.created_at, r.kind, r.size_bytes,
          "; ".join(x for x in (r.note, *(f"pinned: {p}" for p in r.pinned_by)) if x)) for r in kept],
        footer="* what readers get now. `gpupool pack --month YYYY-MM --as-of RELEASE` builds a pack from one.",
        units={"size": "bytes"}, wrap=True))
