"""The gpupool command line: the root group `main` (the `gpupool` entry point) and its commands, one
module per command group."""
from __future__ import annotations

import click

from allocator.cli import allocator as allocator_group
from allocator.filemodes import restrict_umask
from pipelines.cli import (
    capacity,
    dashboard,
    data,
    demo,
    docs,
    ingest,
    land,
    maintain,
    metrics,
    pack,
    reclaim,
    releases,
)


@click.group()
def main() -> None:
    """gpupool: operations and governance for a shared GPU pool."""
    # before anything is written: what libraries create (delta-rs' log, dbt's logs, DuckDB's spill) is
    # then never writable by group or others, whatever umask started it (allocator/filemodes.py)
    restrict_umask()


for command in (
    demo.demo, demo.simulate, ingest.ingest, ingest.build, ingest.sources, data.sql, data.export,
    data.dictionary, docs.docs, capacity.whatif, capacity.recommend, land.backfill, land.land, land.k8s_audit_webhook,
    dashboard.dashboard, pack.pack, reclaim.reclaim, releases.releases, maintain.maintain, metrics.metrics,
    allocator_group,
):
    main.add_command(command)
