"""The gpupool command line: the root group `main` (the `gpupool` entry point) and its commands, one
module per command group."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

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
    sql,
)
from pipelines.config import use_config
from pipelines.paths import MODELS_DIR
from pipelines.yamlfile import load_yaml


def version_text() -> str:
    """The package's version, the metric catalog's and the dbt project's: the catalog and the models can
    change between packages, and a site reports all three."""
    try:
        package = version("gpupool")
    except PackageNotFoundError:
        package = "unknown (not installed)"
    catalog = load_yaml((MODELS_DIR / "catalog" / "version.yml").read_text())["version"]
    dbt_project = load_yaml((MODELS_DIR / "dbt_project.yml").read_text())["version"]
    return f"gpupool {package}\nmetric catalog {catalog}\ndbt project {dbt_project}"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit()


@click.group()
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The site's configuration (docs/configuration.md). Default: $GPUPOOL_CONFIG, else ./gpupool.yml")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the versions of gpupool, its metric catalog and its dbt project, and exit.")
def main(config_file: Path | None) -> None:
    """gpupool: operations and governance for a shared GPU pool."""
    # before anything is written: what libraries create (delta-rs' log, dbt's logs, DuckDB's spill) is
    # then never writable by group or others, whatever umask started it (allocator/filemodes.py)
    restrict_umask()
    # one file for this command and every process it starts (dbt, Dagster, Streamlit), wherever they run
    use_config(config_file)


for command in (
    demo.demo, demo.simulate, ingest.ingest, ingest.build, ingest.sources, sql.sql, data.export,
    data.dictionary, docs.docs, capacity.whatif, capacity.recommend, land.backfill, land.land, land.k8s_audit_webhook,
    dashboard.dashboard, pack.pack, reclaim.reclaim, releases.releases, maintain.maintain, metrics.metrics,
    allocator_group,
):
    main.add_command(command)
