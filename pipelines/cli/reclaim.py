"""`gpupool reclaim`: one idle-reclaim tick now, as the `idle_reclaim` sensor runs every minute, or
with --dry-run what it would do, touching nothing (pipelines/governance/dryrun.py)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from pipelines.cli.common import HOME_OPTION, ExitError, warehouse


@click.command()
@HOME_OPTION
@click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
              help="The configuration. Default: gpupool --config FILE, else $GPUPOOL_CONFIG, else ./gpupool.yml")
@click.option("--dry-run", is_flag=True,
              help="List every running job of the configured engines with its idle evidence and what each "
                   "policy would do now; record, send and change nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: one JSON object per job, one per line.")
def reclaim(home: Path | None, config_file: Path | None, dry_run: bool, as_json: bool) -> None:
    """One idle-reclaim tick now against the engines gpupool.yml names (the allocator, Slurm, Kueue): the
    live policies evaluated on the freshest telemetry, their due steps recorded and delivered, as the
    `idle_reclaim` sensor does every minute (docs/reclaim.md). Exit 1 when an engine could not be
    read or an action could not be delivered."""
    from pipelines.clock import utc_naive
    from pipelines.config import ConfigError
    from pipelines.resources.governance import GovernanceResource

    if as_json and not dry_run:
        raise click.UsageError("--json goes with --dry-run")
    wh = warehouse(home)
    governance = GovernanceResource(config_file=str(config_file or ""))
    now = utc_naive()
    try:
        if not dry_run:
            report = governance.tick(wh, now)
            click.echo(report.summary())
            if not report.ok:
                raise ExitError("the tick had problems (above); what could be planned was recorded")
            return
        result = governance.dry_run(wh, now)
    except ConfigError as err:
        raise ExitError(str(err)) from None
    if as_json:
        for row in result.jobs.iter_rows(named=True):
            click.echo(json.dumps(row, ensure_ascii=False))
    else:
        _print_dry_run(result)
    if result.read.errors:
        raise ExitError("; ".join(result.read.errors))


def _print_dry_run(result) -> None:
    jobs = result.jobs
    engines = ", ".join(f"{s} {'unreadable' if n is None else n}" for s, n in result.read.running_by_source.items())
    click.echo(f"dry run at {result.at:%Y-%m-%d %H:%M} UTC, telemetry of the last {result.lookback.total_seconds() / 60:.0f} "
               f"min: {jobs.height} running jobs ({engines or 'no engine read'}); nothing was recorded or sent")
    for job in jobs.iter_rows(named=True):
        click.echo("")
        click.echo(click.style(f"{job['source']} {job['job_id']}", bold=True)
                   + f" (attempt {job['attempt']}) {job['user_name'] or '?'} · {job['tenant']}/{job['queue']} · "
                   f"{job['template'] or 'no template'} · {job['gpus']} GPU(s) {job['slots']}")
        if job["minutes_reported"]:
            click.echo(f"  telemetry: {job['minutes_reported']} GPU-minutes, mean activity {job['mean_activity']:.1%}, "
                       f"peak memory {job['peak_fb_used_mib'] or 0:,.0f} MiB")
        else:
            click.echo("  telemetry: none in the lookback (no policy judges a job it cannot see)")
        for label in ("findings", "now", "next"):
            if job[label]:
                click.echo(f"  {label}: {job[label]}")
        if not job["findings"]:
            click.echo("  findings: none: no policy would act")
    for reason, n in sorted(result.read.skipped.items()):
        click.echo(f"skipped: {n} {reason}")
