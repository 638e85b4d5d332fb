"""`gpupool metrics serve`: the pipeline's own metrics (pipelines/selfmetrics.py) for Prometheus to
scrape: ingest freshness per source, the release's age, the reclaim tick, the outbox, drains in force."""
from __future__ import annotations

from pathlib import Path

import click

from pipelines.cli.common import HOME_OPTION, warehouse


@click.group()
def metrics() -> None:
    """The pipeline's own Prometheus metrics (docs/operators.md, "Metrics and alerts")."""


@metrics.command()
@HOME_OPTION
@click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
              help="The connector configuration (where the outbox is). Default: $GPUPOOL_CONFIG, else ./gpupool.yml")
@click.option("--outbox", type=click.Path(path_type=Path), default=None,
              help="The outbox to read. Default: governance.outbox of the configuration, else <home>/governance/outbox.db")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9464, show_default=True, type=int, help="Port to listen on.")
def serve(home: Path | None, config_file: Path | None, outbox: Path | None, host: str, port: int) -> None:
    """Serve the metrics on http://HOST:PORT/metrics until interrupted, read from the home at each
    scrape (read-only). A home without a warehouse or an outbox yet still answers: the part's
    `gpupool_exporter_part_up` is 0."""
    from prometheus_client import start_http_server

    from pipelines.selfmetrics import pipeline_registry

    wh = warehouse(home)
    if outbox is None:
        from pipelines.resources.governance import GovernanceResource  # Dagster: only when the config is read

        outbox = GovernanceResource(config_file=str(config_file or "")).outbox_path(wh)
    server, thread = start_http_server(port, addr=host, registry=pipeline_registry(wh, outbox))
    click.echo(f"metrics of {wh.home} (outbox {outbox}) on http://{host}:{server.server_port}/metrics", err=True)
    try:
        thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
