"""Slurm accounting as a Dagster resource: live (sacct / slurmrestd) or offline (recorded outputs)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
from pydantic import Field

from pipelines.config import config_file_field, config_path
from pipelines.connectors.slurm import (
    AccountingClient,
    LiveAccounting,
    OfflineAccounting,
    SlurmConfig,
    land,
    load_slurm_config,
)


class SlurmAccounting(dg.ConfigurableResource):
    """Slurm accounting for a day, into the landing zone.

    Live (default): sacct on this host and/or slurmrestd, per the `slurm:` section of the
    configuration file (`config_file`, else $GPUPOOL_CONFIG, else ./gpupool.yml; defaults without
    one). Offline: `offline_dir` holds recorded outputs, `<offline_dir>/<day>/sacct.txt`,
    `sacct.json`, `slurmrestd.json`.
    """

    offline_dir: str = Field("", description=(
        "Recorded outputs to read instead of the live cluster (<dir>/<day>/sacct.txt, sacct.json, "
        "slurmrestd.json). Empty: live."))
    config_file: str = config_file_field()

    def settings(self) -> SlurmConfig:
        return load_slurm_config(config_path(self.config_file))

    def client(self) -> AccountingClient:
        if self.offline_dir:
            return OfflineAccounting(Path(self.offline_dir))
        return LiveAccounting(self.settings())

    def land_day(self, landing: Path, day: dt.date) -> list[Path]:
        """Fetch the day and write it under `landing` (the warehouse's landing zone)."""
        return land(landing, day, self.client().fetch(day))
