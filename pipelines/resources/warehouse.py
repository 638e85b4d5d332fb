"""The warehouse as a Dagster resource."""
from __future__ import annotations

import dagster as dg
from pydantic import Field

from pipelines.paths import default_home
from pipelines.warehouse import Warehouse


class WarehouseResource(dg.ConfigurableResource):
    """The gpupool home: DuckDB warehouse, Parquet lake and landing zone."""

    home: str = Field("", description=(
        "The gpupool home folder. Empty: $GPUPOOL_HOME, else ./.gpupool; the code location binds it to "
        "EnvVar GPUPOOL_HOME when that is set."))

    def get(self) -> Warehouse:
        return Warehouse(self.home or default_home())
