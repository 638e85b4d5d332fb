"""The gpupool code location: only assembles Definitions."""
import dagster as dg

from pipelines.assets.capacity import capacity_job, capacity_recommendations, capacity_schedule
from pipelines.assets.connectors import (
    connector_assets,
    land_connectors_job,
    land_connectors_schedule,
    slurm_gpu_snapshot_sensor,
)
from pipelines.assets.ingest import ingest_assets
from pipelines.assets.marts import catalog_matches_models, ingest_accounting_balanced, warehouse_models
from pipelines.assets.pack import pack_job, pack_schedule, review_pack
from pipelines.assets.reclaim import (
    idle_reclaim_sensor,
    policy_findings,
    policy_findings_job,
    policy_findings_schedule,
)
from pipelines.assets.scrape import dcgm_scrape_sensor
from pipelines.connectors.kubernetes import KueueState
from pipelines.connectors.slurm import SlurmAccounting
from pipelines.resources.governance import GovernanceResource
from pipelines.resources.telemetry import DcgmScrapeResource
from pipelines.resources.warehouse import WarehouseResource
from pipelines.schedules import ingest_job, ingest_schedule, models_job, models_schedule

defs = dg.Definitions(
    assets=[*connector_assets, *ingest_assets, warehouse_models, policy_findings, capacity_recommendations,
            review_pack],
    asset_checks=[ingest_accounting_balanced, catalog_matches_models],
    jobs=[land_connectors_job, ingest_job, models_job, policy_findings_job, capacity_job, pack_job],
    schedules=[land_connectors_schedule, ingest_schedule, models_schedule, policy_findings_schedule,
               capacity_schedule, pack_schedule],
    sensors=[dcgm_scrape_sensor, slurm_gpu_snapshot_sensor, idle_reclaim_sensor],
    resources={
        "warehouse": WarehouseResource(),
        "telemetry": DcgmScrapeResource(),
        "slurm": SlurmAccounting(),
        "kueue": KueueState(),
        "governance": GovernanceResource(),
    },
)
