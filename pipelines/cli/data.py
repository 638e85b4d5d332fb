"""`gpupool sql`, `export` and `dictionary`: read the warehouse, export its views, document its columns."""
from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import click
import duckdb
import polars as pl

from pipelines.cli.common import HOME_OPTION, step, warehouse


@click.command()
@click.argument("query")
@HOME_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--limit", default=200, show_default=True, help="Rows to print in table format.")
def sql(query: str, home: Path | None, fmt: str, limit: int) -> None:
    """Run a read-only SQL QUERY against the warehouse (DuckDB dialect).

    Only queries run (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN), on a connection that
    can read the warehouse and the lake its views read, and no other file (pipelines/sandbox.py)."""
    from pipelines.sandbox import QueryRefused, check_read_only

    wh = warehouse(home)
    try:
        check_read_only(query)
    except QueryRefused as err:
        raise click.ClickException(str(err)) from None
    except duckdb.Error as err:
        raise click.ClickException(f"query failed: {err}") from None
    try:
        con = wh.analyst_connect()
    except FileNotFoundError as err:
        raise click.ClickException(str(err)) from None
    try:
        result = con.sql(query)
        frame = result.pl() if result is not None else pl.DataFrame()
    except duckdb.PermissionException as err:
        raise click.ClickException(f"query failed: {err} (`gpupool sql` opens no file but the warehouse and "
                                   "the lake its views read)") from None
    except duckdb.Error as err:
        raise click.ClickException(f"query failed: {err}") from None
    except Exception as err:  # noqa: BLE001 - e.g. a DuckDB type Polars cannot hold: say so, no traceback
        raise click.ClickException(f"query failed: cannot show the result ({type(err).__name__}: {err})") from None
    finally:
        con.close()
    try:
        if fmt == "csv":
            sys.stdout.write(frame.write_csv())
        elif fmt == "json":
            sys.stdout.write(frame.write_json() + "\n")
        else:
            with pl.Config(tbl_rows=limit, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
                click.echo(frame.head(limit))
    except pl.exceptions.PolarsError as err:  # e.g. nested columns in CSV
        raise click.ClickException(f"cannot write the result as {fmt}: {err} (try --format json)") from None


@click.command()
@click.option("--check", is_flag=True,
              help="Write nothing; exit non-zero with a diff summary when the committed files are stale.")
@click.option("--home", type=click.Path(path_type=Path), default=None,
              help="Take column types from this built warehouse (needs --out: the committed file is from the yml only).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the dictionary here instead of docs/data-dictionary.md.")
def dictionary(check: bool, home: Path | None, out: Path | None) -> None:
    """Generate the data dictionary (docs/data-dictionary.md), the metrics views' column snapshot
    (models/metrics_schema.json) and the catalog's dbt docs blocks (models/metrics/_catalog_docs.md)
    from the catalog, the models' dbt properties and the contracts; fail where a metrics view's
    properties do not link the metrics the catalog places in it."""
    import json

    from pipelines import dictionary as dd
    from pipelines.catalog import CatalogError, catalog_link_problems, load_catalog, load_model_docs

    try:
        catalog = load_catalog()
        catalog_docs = dd.render_catalog_docs(catalog)
        if not check and (not dd.CATALOG_DOCS_PATH.exists() or dd.CATALOG_DOCS_PATH.read_text() != catalog_docs):
            dd.CATALOG_DOCS_PATH.write_text(catalog_docs)  # first: the properties' doc() refer to its blocks
            step(f"wrote {dd.CATALOG_DOCS_PATH}")
        outputs = dd.generate()
        links = catalog_link_problems(catalog, load_model_docs())
    except CatalogError as err:
        raise click.ClickException(str(err)) from None
    current = json.loads(outputs.snapshot)
    committed = json.loads(dd.SNAPSHOT_PATH.read_text()) if dd.SNAPSHOT_PATH.exists() else {}
    problems = dd.snapshot_problems(committed, current)
    linked = ("the metrics views' properties (models/metrics/_models.yml) do not match the catalog:\n  "
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
            raise click.ClickException("\n".join(stale) + "\nRun `gpupool dictionary` and commit the result.")
        click.echo("docs/data-dictionary.md, models/metrics/_catalog_docs.md and models/metrics_schema.json are "
                   f"current (catalog {current['catalog_version']})")
        return
    if home is not None:
        if out is None:
            raise click.UsageError("--home needs --out: docs/data-dictionary.md is generated from the yml only")
        with warehouse(home).analyst_connect() as con:
            text = dd.render(types=dd.warehouse_types(con))
        out.write_text(text)
        step(f"wrote {out} (types from {warehouse(home).db_path})")
    else:
        if problems and committed.get("catalog_version") == current["catalog_version"]:
            raise click.ClickException("\n  ".join(problems))
        target = out or dd.DICTIONARY_PATH
        target.write_text(outputs.dictionary)
        step(f"wrote {target}")
        if problems:
            dd.SNAPSHOT_PATH.write_text(outputs.snapshot)
            step(f"wrote {dd.SNAPSHOT_PATH} (catalog {current['catalog_version']})")
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
    target = out or wh.home / "exports"
    try:
        written = export_views(wh, target, [v.strip() for v in views.split(",") if v.strip()] if views else None,
                               *bounds)
    except (FileNotFoundError, ValueError, duckdb.Error) as err:
        raise click.ClickException(str(err)) from None
    for e in written:
        where = f"{e.path}/day=*/part-0.parquet ({e.days} days)" if e.days else f"{e.path}/part-0.parquet"
        click.echo(f"  metrics.{e.view:<28} {e.rows:>9,} rows  {where}")
    step(f"wrote {len(written)} views under {target}; read them with "
          f"read_parquet('{target}/<view>/**/*.parquet', hive_partitioning = true)")
