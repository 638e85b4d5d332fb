"""The lakehouse: Delta tables on disk, a release registry in SQL, views of a table version.

Why (docs/architecture.md, "Storage: the lakehouse decision"): one DuckDB file lets one process
write and refuses every other open while it does. The telemetry is a Delta table (a folder; a write
is one atomic commit, so days load in parallel and a kill -9 leaves the last commit), a release maps
each table to a Delta version, and a published DuckDB file reads that version through a view over
its Parquet files (pipelines/warehouse.py publishes). Nothing here imports Dagster or the Warehouse.
"""
from pipelines.lake.reader import home_relative, release_read, search_config, view_sql
from pipelines.lake.releases import Release, ReleaseNotFound, ReleaseRegistry, registry_for
from pipelines.lake.tables import DeltaStore, LakeError, UnreadableByFileList

__all__ = [
    "DeltaStore",
    "LakeError",
    "Release",
    "ReleaseNotFound",
    "ReleaseRegistry",
    "UnreadableByFileList",
    "home_relative",
    "registry_for",
    "release_read",
    "search_config",
    "view_sql",
]
