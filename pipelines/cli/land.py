"""`gpupool backfill`, `land` and `k8s-audit-webhook`: bring data from live systems into the landing zone
(and, for `land`, ingest the day and rebuild)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from pipelines.cli.common import (
    HOME_OPTION,
    VERBOSE_OPTION,
    partition_day,
    print_outcomes,
    rebuild_unless_blocked,
    step,
    step_errors,
    warehouse,
)
from pipelines.warehouse import Warehouse


@click.group()
def backfill() -> None:
    """Fetch history from live systems into the landing zone (configured in gpupool.yml)."""


@backfill.command("prometheus")
# --from/--to, as `gpupool export` spells a range; --start/--end, the first spelling, still work
@click.option("--from", "--start", "start", required=True, type=click.DateTime(), help="Window start, UTC.")
@click.option("--to", "--end", "end", required=True, type=click.DateTime(), help="Window end, UTC.")
@click.option("--no-ingest", is_flag=True, help="Only land the responses; do not ingest the days.")
@HOME_OPTION
def backfill_prometheus(start: dt.datetime, end: dt.datetime, no_ingest: bool, home: Path | None) -> None:
    """Backfill DCGM series from Prometheus' query_range for a window."""
    from pipelines.config import ConfigError, config_path, section
    from pipelines.connectors.prometheus import LANDING_SOURCE, PrometheusConfig, PrometheusError
    from pipelines.connectors.prometheus import backfill_prometheus as run_backfill

    ingested = []
    try:
        settings = section("prometheus", PrometheusConfig)
        if settings is None:
            raise click.ClickException(f"{config_path()}: no prometheus section (see gpupool.example.yml)")
        wh = warehouse(home)
        report = run_backfill(wh.landing, start, end, settings, log=step)
        if not no_ingest:
            from pipelines.ingest import ingest_partition  # imports Great Expectations: only when asked

            for day in report.days:
                ingested.append(ingest_partition(wh, LANDING_SOURCE, day))
                step(ingested[-1].summary())
    except (ConfigError, PrometheusError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    loaded = sum(r.records_loaded for r in ingested)
    click.echo(report.summary() + (f"; ingested {loaded} samples" if ingested else ""))


@click.group()
def land() -> None:
    """Land a day from a live system (configured in gpupool.yml), ingest it, rebuild the models."""


DATE_OPTION = click.option("--date", "day", default=None, help="UTC day to land. Default: today.")
NO_BUILD_OPTION = click.option("--no-build", is_flag=True, help="Do not rebuild the models afterwards.")
OFFLINE_OPTION = click.option(
    "--offline-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
    help="Read recorded answers from DIR/<day>/ instead of the live system (no config section needed).",
)


def _require_section(name: str, model: type) -> None:
    from pipelines.config import ConfigError, config_path, section

    try:
        settings = section(name, model)
    except ConfigError as err:
        raise click.ClickException(f"{err} (fix the file, see gpupool.example.yml)") from None
    if settings is None:
        raise click.ClickException(
            f"{config_path()}: no `{name}` section: add one (see gpupool.example.yml and docs/connectors.md), "
            f"or set $GPUPOOL_CONFIG to the file that has it"
        )


def _ingest_landed(wh: Warehouse, paths: list[Path], day: dt.date, no_build: bool, verbose: bool = False) -> None:
    """Ingest the day of every source that got files (landing/<source>/<day>/<file>), then rebuild."""
    from pipelines import runner

    for path in paths:
        step(f"landed {path}")
    sources = sorted({p.parent.parent.name for p in paths})
    with step_errors(wh, verbose):
        outcomes = runner.ingest_days(wh, sources, day, day, on_step=step)
    print_outcomes(outcomes, name_assets=True)
    blocked = ", ".join(o.asset for o in outcomes if o.checks_failed)
    rebuild_unless_blocked(
        wh, outcomes, no_build, verbose,
        f"{blocked} for {day} failed the blocking data-quality check: models not rebuilt. "
        "See ops.quarantine, then `gpupool build` to rebuild anyway.")


@land.command("slurm")
@DATE_OPTION
@HOME_OPTION
@NO_BUILD_OPTION
@OFFLINE_OPTION
@VERBOSE_OPTION
def land_slurm(day: str | None, home: Path | None, no_build: bool, offline_dir: Path | None, verbose: bool) -> None:
    """Land a day of Slurm accounting (sacct / slurmrestd), ingest it, rebuild the models."""
    import requests

    from pipelines.config import ConfigError
    from pipelines.connectors.http import HttpStatusError
    from pipelines.connectors.slurm import SECTION, SlurmCommandError, SlurmConfig, SlurmRestError
    from pipelines.resources.slurm import SlurmAccounting

    partition = partition_day(day)
    if offline_dir is None:
        _require_section(SECTION, SlurmConfig)
    wh = warehouse(home)
    step(f"landing Slurm accounting for {partition}")
    try:
        paths = SlurmAccounting(offline_dir=str(offline_dir or "")).land_day(wh.landing, partition)
    except (SlurmCommandError, SlurmRestError, HttpStatusError, requests.RequestException) as err:
        raise click.ClickException(f"{err} (check the slurm section of the config and that Slurm answers)") from None
    except (ConfigError, FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    _ingest_landed(wh, paths, partition, no_build, verbose)


@land.command("kueue")
@DATE_OPTION
@HOME_OPTION
@NO_BUILD_OPTION
@OFFLINE_OPTION
@VERBOSE_OPTION
def land_kueue(day: str | None, home: Path | None, no_build: bool, offline_dir: Path | None, verbose: bool) -> None:
    """Land a snapshot of Kueue Workloads (and their pods) into a day, ingest it, rebuild the models."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from pipelines.config import ConfigError
    from pipelines.connectors.kubernetes import SECTION, KubernetesAnswerError, KubernetesConfig
    from pipelines.resources.kueue import KueueState

    partition = partition_day(day)
    if offline_dir is None:
        _require_section(SECTION, KubernetesConfig)
    wh = warehouse(home)
    step(f"landing Kueue Workloads for {partition}")
    try:
        paths = KueueState(offline_dir=str(offline_dir or "")).land(wh.landing, partition)
    except (ApiException, ConfigException, HTTPError, KubernetesAnswerError) as err:
        raise click.ClickException(
            f"{err} (check the kubernetes section of the config and that the API server answers)"
        ) from None
    except (ConfigError, OSError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    _ingest_landed(wh, paths, partition, no_build, verbose)


@land.command("mlflow")
@HOME_OPTION
@NO_BUILD_OPTION
@VERBOSE_OPTION
def land_mlflow(home: Path | None, no_build: bool, verbose: bool) -> None:
    """Pull the runs tagged with a job id from MLflow (checkpoints, artifacts, model versions), ingest
    them into the day of the pull, rebuild the models."""
    from pipelines.config import section
    from pipelines.connectors.mlflow import SECTION, MlflowConfig, MlflowError, pull

    _require_section(SECTION, MlflowConfig)
    config = section(SECTION, MlflowConfig)
    wh = warehouse(home)
    step(f"pulling MLflow runs tagged {config.job_tag} from {config.tracking_uri}")
    try:
        result = pull(wh.landing, config)
    except MlflowError as err:
        raise click.ClickException(f"{err} (check the mlflow section of the config and that MLflow answers)") from None
    for note in result.notes:
        click.echo(f"    {note}")
    if result.path is None:
        click.echo("    nothing to land: no run carries the tag")
        return
    _ingest_landed(wh, [result.path], dt.date.fromisoformat(result.path.parent.name), no_build, verbose)


@click.command("k8s-audit-webhook")
@click.option("--host", default=None, help="Address to listen on. Default: kubernetes.audit_webhook.host, else 127.0.0.1.")
@click.option("--port", default=None, type=int, help="Port. Default: kubernetes.audit_webhook.port, else 8765.")
@click.option("--insecure-no-auth", is_flag=True,
              help="Serve without a bearer token: any client that reaches the port may write audit events.")
@HOME_OPTION
def k8s_audit_webhook(host: str | None, port: int | None, insecure_no_auth: bool, home: Path | None) -> None:
    """Serve the Kubernetes audit webhook backend into landing/k8s_audit/<day>/ until interrupted.

    The bearer token is $GPUPOOL_AUDIT_TOKEN (else kubernetes.audit_webhook.token); without one it
    refuses to start unless --insecure-no-auth. TLS uses kubernetes.audit_webhook.certfile / keyfile
    when set. See docs/connectors.md for the API server's webhook kubeconfig.
    """
    import os
    import signal
    import sys

    from pipelines.config import ConfigError, section
    from pipelines.connectors.k8s_audit import serve_audit_webhook
    from pipelines.connectors.kubernetes import SECTION, KubernetesConfig

    try:
        settings = section(SECTION, KubernetesConfig)
    except ConfigError as err:
        raise click.ClickException(f"{err} (fix the file, see gpupool.example.yml)") from None
    hook = settings.audit_webhook if settings is not None else None
    written = hook.model_fields_set if hook else set()  # keys the file sets, not the model's defaults
    host = host or (hook.host if "host" in written else "127.0.0.1")
    port = port if port is not None else (hook.port if "port" in written else 8765)
    token = (os.environ.get("GPUPOOL_AUDIT_TOKEN") or (hook.token if hook else None) or "").strip() or None
    if token is None and not insecure_no_auth:
        raise click.ClickException(
            "no bearer token for the audit webhook: set $GPUPOOL_AUDIT_TOKEN (or kubernetes.audit_webhook.token: "
            '"${GPUPOOL_AUDIT_TOKEN}") and put the same token in the API server\'s webhook kubeconfig '
            "(users[].user.token; see docs/connectors.md), or pass --insecure-no-auth to accept any client"
        )
    options: dict[str, object] = {"insecure_no_auth": token is None}
    if hook is not None:
        options.update(certfile=hook.certfile, keyfile=hook.keyfile,
                       max_body_bytes=int(hook.max_body_mib * 2**20),
                       max_item_bytes=int(hook.max_item_mib * 2**20), max_depth=hook.max_depth,
                       max_items=hook.max_items)
    wh = warehouse(home)
    scheme = "https" if options.get("certfile") else "http"
    if token is None:
        rule = "!" * 78
        click.echo(f"{rule}\n!! INSECURE: the audit webhook runs WITHOUT authentication (--insecure-no-auth).\n"
                   f"!! Any client that reaches {host}:{port} can write audit events into the warehouse.\n"
                   f"!! Set $GPUPOOL_AUDIT_TOKEN for anything but a local test.\n{rule}", err=True)
    step(f"audit webhook on {scheme}://{host}:{port}/ writing to {wh.landing / 'k8s_audit'}")
    # a supervisor's stop (SIGTERM) ends the server cleanly, also where the parent left SIGTERM ignored
    # (an ignored signal is inherited across exec, and the server would then never stop)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve_audit_webhook(wh.landing, host, port, token, **options)
    except OSError as err:
        raise click.ClickException(f"cannot serve on {host}:{port}: {err} (pick another --port, or check the TLS files)") from None
    except KeyboardInterrupt:
        step("stopped")
