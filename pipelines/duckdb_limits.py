"""How much of the machine DuckDB may use when it builds or ingests: memory, a folder to spill to,
and threads, sized from the machine (or the container) the pipeline runs on.

Why: DuckDB takes 80% of the machine's memory by default, and a month of a large pool's telemetry
would then crowd out the simulator, Dagster and everything else on the machine (the 1,024-GPU build
peaked at 6.5 GB). With a limit DuckDB spills what does not fit to `temp_directory` instead, so the
memory a build needs stays bounded whatever the size of the pool; only the time grows.

Every connection that writes (the warehouse's writers, the dbt build, the lake's compaction) takes
`writer_limits(home)`; readers keep their own limits (pipelines/warehouse.py, pipelines/sandbox.py).
GPUPOOL_DUCKDB_MEMORY_LIMIT overrides the sized memory limit ("3GB", "512MB", "50%").
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb

MEMORY_LIMIT_ENV = "GPUPOOL_DUCKDB_MEMORY_LIMIT"
# An eighth of the machine: the same process also holds Polars frames (ingest, simulator), and DuckDB's
# resident memory runs above its limit (the limit bounds its buffers, not every allocation). Spilling
# costs little here: the 1,024-GPU month's full build at 3 GB against 6 GB (bench/README.md, "Figures
# the code's choices rest on"; docs/operators.md).
MEMORY_SHARE = 0.125
# Below this DuckDB spills on nearly every join; a machine that small could not run the pipeline anyway.
MIN_MEMORY_BYTES = 256 * 2**20
CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v2 and v1 memory limits; v1 writes a huge number when there is none, which min() ignores
_CGROUP_MEMORY_FILES = ("memory.max", "memory/memory.limit_in_bytes")


@dataclass(frozen=True)
class DuckDBLimits:
    memory_limit: str  # as DuckDB reads it: "3GB", "5990MiB"
    temp_directory: str
    threads: int

    def config(self) -> dict[str, str | int]:
        """The `config` of duckdb.connect (dbt-duckdb's `config_options`)."""
        return {"memory_limit": self.memory_limit, "temp_directory": self.temp_directory, "threads": self.threads}


def writer_limits(home: Path, env: Mapping[str, str] = os.environ, cgroup_root: Path = CGROUP_ROOT) -> DuckDBLimits:
    """The limits of a connection that builds or ingests into the gpupool home `home`: it spills to <home>/tmp."""
    return DuckDBLimits(
        memory_limit=memory_limit(machine_memory_bytes(cgroup_root), env),
        temp_directory=str(Path(home) / "tmp"),
        threads=machine_cpus(cgroup_root),
    )


def memory_limit(machine_bytes: int, env: Mapping[str, str] = os.environ) -> str:
    """GPUPOOL_DUCKDB_MEMORY_LIMIT when set, else an eighth of `machine_bytes` (at least MIN_MEMORY_BYTES).
    Raises ValueError when the variable is not a size DuckDB reads."""
    override = env.get(MEMORY_LIMIT_ENV, "").strip()
    if override:
        try:  # DuckDB's own parser: it reads "3GB", "3 gb", "3GiB", "50%", and a regex here would drift from it
            duckdb.connect(config={"memory_limit": override}).close()
        except duckdb.Error as exc:
            raise ValueError(
                f"{MEMORY_LIMIT_ENV}={override!r} is not a memory size DuckDB reads ({exc}); "
                "give one like 3GB or 512MB, or unset it to size the limit from the machine"
            ) from exc
        return override
    share = max(int(machine_bytes * MEMORY_SHARE), MIN_MEMORY_BYTES)
    return f"{share // 2**20}MiB"


def machine_memory_bytes(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The physical memory, or the container's memory limit when it is lower."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limits = [_cgroup_int(cgroup_root / name) for name in _CGROUP_MEMORY_FILES]
    return min([physical, *(limit for limit in limits if limit)])


def machine_cpus(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The CPUs this process may run on, or the container's CPU quota when it is lower (rounded up)."""
    cpus = len(os.sched_getaffinity(0))
    fields = _read(cgroup_root / "cpu.max").split()  # "max 100000" or "<quota> <period>"
    if len(fields) == 2 and fields[0] != "max":
        cpus = min(cpus, max(1, math.ceil(int(fields[0]) / int(fields[1]))))
    return cpus


def _cgroup_int(path: Path) -> int | None:
    """The number in a cgroup limit file; None when absent or "max" (no limit)."""
    text = _read(path)
    return int(text) if text.isdigit() else None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:  # absent outside a container, unreadable in some sandboxes: no limit to honour
        return ""
