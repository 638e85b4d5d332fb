"""`gpupool dashboard`: serve the Streamlit dashboards on the warehouse, read-only."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from pipelines.cli.common import HOME_OPTION, step, warehouse


@click.command()
@HOME_OPTION
@click.option("--port", default=8501, show_default=True, help="Port to serve on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
def dashboard(home: Path | None, port: int, host: str) -> None:
    """Start the governance dashboards (Streamlit) on the warehouse of HOME, read-only (docs/dashboards.md).

    Users come from $GPUPOOL_DASHBOARD_USERS or Streamlit secrets; with none configured, a one-time
    operator user is made for this run and its password printed."""
    import json
    import os
    import secrets
    import subprocess

    from dashboards import auth
    from dashboards.auth import UsersError, configured_users, hash_password

    wh = warehouse(home)
    if not wh.db_path.exists():
        click.echo(click.style(f"no warehouse at {wh.db_path} yet: the pages will say so until "
                               "`gpupool demo` (or an ingest) builds one", fg="yellow"))
    env = dict(os.environ, GPUPOOL_HOME=str(wh.home))
    try:
        users = configured_users()
    except UsersError as err:
        raise click.ClickException(f"{err} (docs/dashboards.md)") from None
    if not users:
        password = secrets.token_urlsafe(12)
        env["GPUPOOL_DASHBOARD_USERS"] = json.dumps(
            [{"name": "operator", "role": "operator", "password_hash": hash_password(password)}])
        step(f"no dashboard users configured: sign in as `operator` with password {password} (this run only; "
              "configure users as docs/dashboards.md says)")
    app = Path(auth.__file__).resolve().parent / "app.py"
    command = [sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
               "--server.port", str(port), "--server.address", host, "--browser.gatherUsageStats", "false",
               "--client.toolbarMode", "minimal"]
    step(f"dashboards on http://{host}:{port}/ reading {wh.db_path} (Ctrl-C stops)")
    try:
        code = subprocess.run(command, env=env, check=False).returncode
    except KeyboardInterrupt:
        code = 0
    if code:
        raise click.ClickException(f"streamlit exited with status {code}")
