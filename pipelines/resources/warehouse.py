"""The warehouse as a Dagster resource."""
from __future__ import annotations

import dagster as dg

from pipelines.paths import default_home
from pipelines.warehouse import Warehouse


class WarehouseResource(dg.ConfigurableResource):
    """The gpupool home: DuckDB warehouse, Parquet lake and landing zone.

    `home` defaults to $GPUPOOL_HOME, else ./.gpupool.
    """

    home: str = ""

    def get(self) -> Warehouse:
        return Warehouse(self.home or default_home())
