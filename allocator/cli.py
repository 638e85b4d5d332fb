"""`gpupool allocator ...`: the live allocator's commands (attached to the main CLI as a group)."""

from __future__ import annotations

from pathlib import Path

import click

from allocator.filemodes import restrict_umask


@click.group()
def allocator() -> None:
    """The live allocator: the pool's control plane over HTTP."""
    restrict_umask()  # nothing it writes is writable by group or others (allocator/filemodes.py)


@allocator.command()
@click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="SQLite database of the allocator's state (created if missing).",
)
@click.option(
    "--pool",
    "pool_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Pool YAML (nodes, GPUs, queues). Default: the built-in pool.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--tokens",
    "tokens_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="JSON file of bearer tokens. Default: $GPUPOOL_ALLOCATOR_TOKENS.",
)
@click.option(
    "--tick",
    "tick_interval_s",
    default=1.0,
    show_default=True,
    type=float,
    help="Seconds between checks of the engine's timers (run-time caps, grace periods).",
)
@click.option(
    "--snapshot-every",
    default=500,
    show_default=True,
    type=int,
    help="Commands between snapshots of the engine (bounds the replay at start).",
)
def serve(
    db_path: Path,
    pool_path: Path | None,
    host: str,
    port: int,
    tokens_path: Path | None,
    tick_interval_s: float,
    snapshot_every: int,
) -> None:
    """Serve the allocator's HTTP API, its state durable in DB."""
    from allocator.auth import TokenError
    from allocator.pool import PoolError
    from allocator.service import serve as run
    from allocator.store import StoreError

    try:
        run(
            db_path,
            pool_path,
            host,
            port,
            tokens_path,
            tick_interval_s=tick_interval_s,
            snapshot_every=snapshot_every,
        )
    except (TokenError, PoolError, StoreError) as exc:
        raise click.ClickException(str(exc)) from None


@allocator.command("check-store")
@click.option(
    "--db",
    "db_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="SQLite database of the allocator's state.",
)
@click.option("--repair", is_flag=True, help="Rewrite what is found escaped (stop the service first).")
def check_store(db_path: Path, repair: bool) -> None:
    """List records an earlier version logged that are not clean JSON (a lone surrogate, a NaN);
    with --repair, rewrite them as the API answers them (docs/allocator.md, "Input limits")."""
    from allocator import repair as fix
    from allocator.store import StoreError

    try:
        found = fix.repair(db_path) if repair else fix.find_unclean(db_path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    for item in found:
        click.echo(str(item))
    verb = "repaired" if repair else "found"
    click.echo(f"{len(found)} unclean record(s) {verb} in {db_path}" if found else f"{db_path}: clean")
    if found and not repair:
        raise SystemExit(1)
