"""`gpupool maintain`: the lake's retention (pipelines/lake/retention.py) by hand; the Dagster job
`maintain_lake` runs the same every day."""
from __future__ import annotations

from pathlib import Path

import click

from pipelines.cli.common import HOME_OPTION, step, warehouse


@click.command()
@HOME_OPTION
@click.option("--raw-retention-days", type=int, default=None, metavar="N",
              help="Compact raw telemetry older than N days to the per-minute grain "
                   "(default: $GPUPOOL_RAW_RETENTION_DAYS, else 35).")
@click.option("--dry-run", is_flag=True, help="Change nothing; print what would be done.")
def maintain(home: Path | None, raw_retention_days: int | None, dry_run: bool) -> None:
    """Compact old raw telemetry (the marts keep every figure), merge small lake files, drop
    recommendation pins older than $GPUPOOL_PIN_DAYS (default 35; pack pins stay), expire
    releases beyond $GPUPOOL_KEEP_RELEASES, and delete lake files no kept release reads that were
    replaced more than $GPUPOOL_LAKE_VACUUM_HOURS ago (default 24)."""
    from pipelines.lake import LakeError
    from pipelines.lake.retention import RetentionError
    from pipelines.lake.retention import maintain as run_maintenance

    wh = warehouse(home)
    try:
        report = run_maintenance(wh, raw_retention_days=raw_retention_days, dry_run=dry_run,
                                 on_step=step)
    except RetentionError as err:
        raise click.BadParameter(str(err), param_hint="--raw-retention-days or the environment") from None
    except LakeError as err:
        raise click.ClickException(str(err)) from None
    for line in report.lines():
        click.echo(line)
