"""`gpupool dashboard`: serve the Streamlit dashboards on the warehouse, read-only."""
from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from pipelines.cli.common import HOME_OPTION, step, warehouse

# Streamlit's options for the dashboards, on `gpupool dashboard`'s command line and in the tests' AppTest.
# Magic off: the pages write through st calls only, and magic runs each page through ast.parse, which
# CPython 3.11 before 3.11.8 can fail with "SystemError: AST constructor recursion depth mismatch" when
# a garbage collection lets another thread parse meanwhile (gh-106905), as concurrent sessions do.
STREAMLIT_OPTIONS = {"server.headless": True, "browser.gatherUsageStats": False, "client.toolbarMode": "minimal",
                     "runner.magicEnabled": False}


def streamlit_command(app: Path | str, host: str, port: int) -> list[str]:
    """`streamlit run APP` serving on host:port with STREAMLIT_OPTIONS, in this Python."""
    options = {**STREAMLIT_OPTIONS, "server.port": port, "server.address": host}
    flags = [part for name, value in options.items()
             for part in (f"--{name}", str(value).lower() if isinstance(value, bool) else str(value))]
    return [sys.executable, "-m", "streamlit", "run", str(app), *flags]


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
    command = streamlit_command(app, host, port)
    step(f"dashboards on http://{host}:{port}/ reading {wh.db_path} (Ctrl-C stops)")
    code = serve_until_stopped(command, env)
    if code:
        raise click.ClickException(f"streamlit exited with status {code}")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def serve_until_stopped(command: Sequence[str], env: dict[str, str]) -> int:
    """Run the server until it exits; its exit status, 0 when it stopped because this process was asked to.

    SIGTERM and SIGINT are passed on to it and its exit awaited, so a supervisor's stop ends the server too
    instead of leaving it serving. It runs in a process group of its own so that Ctrl-C in a terminal
    reaches it once, through here, not twice."""
    child = subprocess.Popen(command, env=env, process_group=0)
    asked: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        asked.append(signum)
        child.send_signal(signum)

    saved = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        code = child.wait()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return 0 if asked else code
