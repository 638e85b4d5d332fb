"""The lakehouse: Delta tables on disk, a release registry in SQL, and reader files of views.

Why (docs/architecture.md, "Storage: the lakehouse decision"): one DuckDB file lets one process
write and refuses every other open while it does. Here each table is a Delta table (a folder; a
write is one atomic commit, readers see snapshots), a release maps every table to a Delta version
so readers never see half a build, and readers open a small DuckDB file of views over one release's
Parquet files, which no process ever holds a write lock on.

Nothing here imports Dagster or the existing Warehouse: the package is the foundation, wired in later.
"""
from pipelines.lake.reader import publish_reader_file, release_of
from pipelines.lake.releases import Release, ReleaseNotFound, ReleaseRegistry, registry_for
from pipelines.lake.tables import DeltaStore, LakeError, UnreadableByFileList

__all__ = [
    "DeltaStore",
    "LakeError",
    "Release",
    "ReleaseNotFound",
    "ReleaseRegistry",
    "UnreadableByFileList",
    "publish_reader_file",
    "registry_for",
    "release_of",
]
