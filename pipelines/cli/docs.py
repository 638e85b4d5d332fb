"""`gpupool docs`: dbt's documentation site of models/ (lineage, every model's and column's
description, the catalog's metric definitions on their views), with the column types of a home's
warehouse."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from pipelines.build import dbt_vars
from pipelines.cli.common import HOME_OPTION, step, warehouse
from pipelines.paths import MODELS_DIR


@click.command("docs")
@HOME_OPTION
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the site. Default: HOME/dbt/docs.")
@click.option("--static", is_flag=True,
              help="Also write static_index.html: one file with everything in it, to open without a server.")
def docs(home: Path | None, out: Path | None, static: bool) -> None:
    """Generate dbt's docs site (index.html, manifest.json, catalog.json) from models/ and the home's
    warehouse, and print how to serve it.

    Runs `dbt docs generate` under the warehouse's writer lock (dbt opens the file read-write, and a
    build running at the same time would otherwise fail to); the models are compiled, not built."""
    wh = warehouse(home)
    if not wh.writer_path.exists():
        raise click.ClickException(f"no warehouse at {wh.writer_path}: run `gpupool build` (or `gpupool demo`) first")
    out = (out or wh.home / "dbt" / "docs").resolve()
    args = [
        sys.executable, "-m", "dbt.cli.main", "docs", "generate",
        "--project-dir", str(MODELS_DIR), "--profiles-dir", str(MODELS_DIR),
        "--target-path", str(out), "--log-path", str(wh.home / "dbt" / "logs"),
        # the writers' file: dbt opens it read-write, and a published release is never written
        "--vars", json.dumps(dbt_vars(wh.writer_path.resolve(), wh.home)),
        "--no-use-colors", "--no-send-anonymous-usage-stats", "--no-version-check",
        *(["--static"] if static else []),
    ]
    step(f"dbt docs generate into {out}" + (" with static_index.html" if static else ""))
    with wh.writer_lock():
        code, said = run_showing_progress(args)
    if code != 0:
        raise click.ClickException(f"dbt docs generate failed:\n{said[-4000:]}")
    step(f"wrote {out}/index.html with manifest.json and catalog.json")
    click.echo(f"  serve it:  python -m http.server 8080 --directory {out}   then open http://localhost:8080")
    if static:
        click.echo(f"  or open {out}/static_index.html in a browser (no server needed)")


_DBT_CLOCK = re.compile(r"^\d\d:\d\d:\d\d\s+")  # dbt starts each log line with the time of day


def run_showing_progress(args: Sequence[str]) -> tuple[int, str]:
    """Run dbt, echoing each line it prints as it comes (the catalog of a large warehouse takes half a
    minute: the operator sees where it is); its exit status and everything it printed."""
    said = []
    with subprocess.Popen(args, cwd=MODELS_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            said.append(line)
            if line.strip():
                click.echo(f"    dbt: {_DBT_CLOCK.sub('', line.rstrip())}")
    return proc.returncode, "".join(said)
