"""The gpupool code location: merges each domain's Definitions and binds the shared resources.

Each module of pipelines/assets/ is a domain (its assets, checks, jobs, schedules and sensors) and
ends with its own `defs`. Modules are imported whole: one Definitions at this module's scope only.
"""
import os

import dagster as dg

from allocator.filemodes import restrict_umask
from pipelines.assets import backfill, capacity, connectors, ingest, maintenance, marts, pack, reclaim, scrape
from pipelines.resources.dbt import dbt_resource
from pipelines.resources.governance import GovernanceResource
from pipelines.resources.kueue import KueueState
from pipelines.resources.slurm import SlurmAccounting
from pipelines.resources.telemetry import DcgmScrapeResource
from pipelines.resources.warehouse import WarehouseResource


def from_env(name: str) -> str:
    """`dg.EnvVar(name)` when the variable is set, so the UI shows where the value comes from; else ""
    and the resource's own default applies (dagster fails a run whose EnvVar is unset)."""
    return dg.EnvVar(name) if name in os.environ else ""


# the code location's processes (code server, run workers) write the home: whatever umask started
# them, nothing they create is writable by group or others (allocator/filemodes.py)
restrict_umask()

defs = dg.Definitions.merge(
    connectors.defs,
    ingest.defs,
    backfill.defs,
    scrape.defs,
    marts.defs,
    reclaim.defs,
    capacity.defs,
    pack.defs,
    maintenance.defs,
    dg.Definitions(resources={
        "warehouse": WarehouseResource(home=from_env("GPUPOOL_HOME")),
        "dbt": dbt_resource(),
        "telemetry": DcgmScrapeResource(config_file=from_env("GPUPOOL_CONFIG")),
        "slurm": SlurmAccounting(config_file=from_env("GPUPOOL_CONFIG")),
        "kueue": KueueState(config_file=from_env("GPUPOOL_CONFIG")),
        "governance": GovernanceResource(config_file=from_env("GPUPOOL_CONFIG")),
    }),
)
