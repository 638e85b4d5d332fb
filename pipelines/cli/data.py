"""`gpupool export` and `dictionary`: export the warehouse's views, document its columns (`gpupool sql` is in
pipelines/cli/sql.py)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import click
import duckdb

from allocator.filemodes import make_dirs
from pipelines.cli import render
from pipelines.cli.common import HOME_OPTION, step, warehouse


@click.command()
@click.option("--check", is_flag=True,
              help="Write nothing; exit non-zero with a diff summary when the committed files are stale.")
@click.option("--in-tree", is_flag=True,
              help="In a source checkout: rewrite the committed files (docs/data-dictionary.md, "
                   "models/metrics/_catalog_docs.md, models/metrics_schema.json), to commit them.")
@click.option("--home", type=click.Path(path_type=Path), default=None,
              help="Write to HOME/docs/data-dictionary.md, with the column types of HOME's built warehouse.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the dictionary here. Default: HOME/docs/data-dictionary.md ($GPUPOOL_HOME or ./.gpupool).")
def dictionary(check: bool, in_tree: bool, home: Path | None, out: Path | None) -> None:
    """Generate the data dictionary from the catalog, the models' dbt properties and the contracts into
    the home (or --out), never into the installed package; fail where a metrics view's properties do not
    link the metrics the catalog places in it. --in-tree regenerates the committed files in a checkout:
    docs/data-dictionary.md, the metrics views' column snapshot (models/metrics_schema.json) and the
    catalog's dbt docs blocks (models/metrics/_catalog_docs.md)."""
    import json

    from pipelines import dictionary as dd
    from pipelines.catalog import CatalogError, catalog_link_problems, load_catalog, load_model_docs

    if in_tree and (check or home or out):
        raise click.UsageError("--in-tree rewrites the committed files: it takes none of --check, --home, --out")
    try:
        catalog = load_catalog()
        catalog_docs = dd.render_catalog_docs(catalog)
        if in_tree and (not dd.CATALOG_DOCS_PATH.exists() or dd.CATALOG_DOCS_PATH.read_text() != catalog_docs):
            dd.CATALOG_DOCS_PATH.write_text(catalog_docs)  # first: the properties' doc() refer to its blocks
            step(f"wrote {dd.CATALOG_DOCS_PATH}")
        outputs = dd.generate()
        links = catalog_link_problems(catalog, load_model_docs())
    except CatalogError as err:
        raise click.ClickException(str(err)) from None
    current = json.loads(outputs.snapshot)
    committed = json.loads(dd.SNAPSHOT_PATH.read_text()) if dd.SNAPSHOT_PATH.exists() else {}
    problems = dd.snapshot_problems(committed, current)
    linked = ("the metrics views' properties (models/metrics/_*.yml) do not match the catalog:\n  "
              + "\n  ".join(links)) if links else None
    if check:
        stale = [linked] if linked else []
        if problems:
            stale.append("\n  ".join(problems))
        for path, generated in ((dd.DICTIONARY_PATH, outputs.dictionary), (dd.CATALOG_DOCS_PATH, outputs.catalog_docs)):
            text = path.read_text() if path.exists() else ""
            if text != generated:
                stale.append(dd.diff_summary(text, generated, path.relative_to(dd.REPO_ROOT).as_posix()
                                             if path.is_relative_to(dd.REPO_ROOT) else str(path)))
        if stale:
            raise click.ClickException("\n".join(stale) + "\nRun `gpupool dictionary --in-tree` and commit the result.")
        click.echo("docs/data-dictionary.md, models/metrics/_catalog_docs.md and models/metrics_schema.json are "
                   f"current (catalog {current['catalog_version']})")
        return
    if in_tree:
        if problems and committed.get("catalog_version") == current["catalog_version"]:
            raise click.ClickException("\n  ".join(problems))
        dd.DICTIONARY_PATH.write_text(outputs.dictionary)
        step(f"wrote {dd.DICTIONARY_PATH}")
        if problems:
            dd.SNAPSHOT_PATH.write_text(outputs.snapshot)
            step(f"wrote {dd.SNAPSHOT_PATH} (catalog {current['catalog_version']})")
    else:
        wh = warehouse(home)
        target = out or wh.home / "docs" / "data-dictionary.md"
        text = outputs.dictionary
        if home is not None:
            with wh.analyst_connect() as con:
                text = dd.render(types=dd.warehouse_types(con))
        make_dirs(target.parent)
        target.write_text(text)
        step(f"wrote {target}" + (f" (types from {wh.db_path})" if home is not None else ""))
    if linked:
        raise click.ClickException(linked)


@click.command("export")
@HOME_OPTION
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder to write to. Default: HOME/exports.")
@click.option("--views", default=None, help="Comma-separated metrics views (default: all).")
@click.option("--from", "first", default=None, help="First day (YYYY-MM-DD) of views with a day column.")
@click.option("--to", "last", default=None, help="Last day (YYYY-MM-DD, inclusive) of views with a day column.")
def export(home: Path | None, out: Path | None, views: str | None, first: str | None, last: str | None) -> None:
    """Export metrics views as Parquet: OUT/<view>/day=YYYY-MM-DD/part-0.parquet for views with a day
    column, OUT/<view>/part-0.parquet for the others; read-only, each view replaced atomically."""
    from pipelines.export import export_views

    wh = warehouse(home)
    try:
        bounds = [dt.date.fromisoformat(d) if d else None for d in (first, last)]
    except ValueError as err:
        raise click.UsageError(f"--from/--to: {err}") from None
    if None not in bounds and bounds[0] > bounds[1]:
        raise click.UsageError(f"--from {first} is after --to {last}")
    target = out or wh.home / "exports"
    try:
        written = export_views(wh, target, [v.strip() for v in views.split(",") if v.strip()] if views else None,
                               *bounds)
    except (FileNotFoundError, ValueError, duckdb.Error) as err:
        raise click.ClickException(str(err)) from None
    click.echo(render.rows(
        ["view", "rows", "written to"],
        [(f"metrics.{e.view}", e.rows,
          f"{e.path}/day=*/part-0.parquet ({e.days} days)" if e.days else f"{e.path}/part-0.parquet") for e in written],
        wrap=True, indent=2))
    step(f"wrote {len(written)} views under {target}; read them with "
          f"read_parquet('{target}/<view>/**/*.parquet', hive_partitioning = true)")
