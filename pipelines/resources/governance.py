"""Idle-reclaim's settings as a Dagster resource: the policy catalog, the outbox and the engines.

Read from the connector configuration (gpupool.yml, or $GPUPOOL_CONFIG) at every use, so an edit
applies at the next sensor tick:

    governance:
      policies: models/policies/policies.yml     # the catalog (default)
      exemptions: models/policies/exemptions.yml # the allow-list (default: beside the catalog)
      outbox: /var/lib/gpupool/outbox.db          # default: <gpupool home>/governance/outbox.db
      lookback_minutes: 130                       # default: the longest live window + 10 min
    allocator:                                    # when the pool runs the built-in allocator
      url: http://allocator.internal:8080
      token: ${GPUPOOL_ALLOCATOR_TOKEN}
    slurm:                                        # when it runs Slurm (docs/reclaim.md)
      governance:
        partitions: [batch]
    kubernetes:                                   # when it runs Kueue (docs/reclaim.md)
      governance:
        namespaces: [team-a]

Relative paths are read from the configuration file's folder.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import BaseModel, ConfigDict, Field

from pipelines.config import config_file_field, config_path, config_relative, section
from pipelines.connectors.allocator import AllocatorConfig, load_allocator_config
from pipelines.governance.dryrun import DryRun
from pipelines.governance.factory import run_dry_run, run_governance_tick
from pipelines.governance.tick import TickReport
from pipelines.policies.catalog import DEFAULT_POLICIES, EXEMPTIONS_NAME, PolicyCatalog, load_catalog
from pipelines.warehouse import Warehouse

OUTBOX_NAME = Path("governance") / "outbox.db"


class GovernanceSettings(BaseModel):
    """The `governance:` section of gpupool.yml (pipelines.policies.catalog reads the same section)."""

    model_config = ConfigDict(extra="forbid")
    policies: Path | None = Field(None, description="the policy catalog; default models/policies/policies.yml")
    exemptions: Path | None = Field(None, description="the allow-list; default exemptions.yml beside the catalog")
    outbox: Path | None = Field(None, description="the outbox (SQLite); default <home>/governance/outbox.db")
    lookback_minutes: int | None = Field(None, ge=1, description="telemetry read per tick; default from the catalog")
    telemetry: Literal["dcgm_scrape", "prometheus"] = Field(
        "dcgm_scrape", description="where the tick's per-GPU minutes come from: the rounds the dcgm_scrape "
        "sensor lands, or the Prometheus of the `prometheus:` section")


class GovernanceResource(dg.ConfigurableResource):
    """Idle-reclaim's catalog, outbox and engines' connections. `config_file` defaults to
    $GPUPOOL_CONFIG, else ./gpupool.yml."""

    config_file: str = config_file_field()

    def _path(self) -> Path:
        return config_path(self.config_file)

    def settings(self) -> GovernanceSettings:
        return section("governance", GovernanceSettings, self._path()) or GovernanceSettings()

    def _resolve(self, p: Path | None) -> Path | None:
        return config_relative(p, self.config_file)

    def catalog(self) -> PolicyCatalog:
        """The catalog the settings name (default models/policies/policies.yml, with exemptions.yml beside it)."""
        s = self.settings()
        policies = self._resolve(s.policies) or DEFAULT_POLICIES
        exemptions = self._resolve(s.exemptions)
        if exemptions is None and (policies.parent / EXEMPTIONS_NAME).exists():
            exemptions = policies.parent / EXEMPTIONS_NAME
        return load_catalog(policies, exemptions)

    def outbox_path(self, warehouse: Warehouse) -> Path:
        return self._resolve(self.settings().outbox) or warehouse.home / OUTBOX_NAME

    def allocator(self) -> AllocatorConfig | None:
        """The built-in allocator's connection; None when the pool does not run it (a Slurm pool)."""
        return load_allocator_config(self._path())

    def lookback(self) -> dt.timedelta | None:
        minutes = self.settings().lookback_minutes
        return None if minutes is None else dt.timedelta(minutes=minutes)

    def tick(self, warehouse: Warehouse, now: dt.datetime) -> TickReport:
        """One governance tick with these settings (the sensor's body), wired by pipelines/governance/factory.py."""
        return run_governance_tick(
            now, config_file=self._path(), allocator=self.allocator(), landing=warehouse.landing,
            catalog=self.catalog(), outbox_path=self.outbox_path(warehouse), lookback=self.lookback(),
            telemetry=self.settings().telemetry,
        )

    def dry_run(self, warehouse: Warehouse, now: dt.datetime) -> DryRun:
        """What `tick` would do now, touching nothing (`gpupool reclaim --dry-run`)."""
        return run_dry_run(
            now, config_file=self._path(), allocator=self.allocator(), landing=warehouse.landing,
            catalog=self.catalog(), outbox_path=self.outbox_path(warehouse), lookback=self.lookback(),
            telemetry=self.settings().telemetry,
        )
