"""Tiny contract-conforming fixtures for the model tests, and a build helper.

Each test writes the few rows it needs through `Warehouse.replace_partition` (so DCGM samples
land in Parquet exactly as ingestion writes them), builds models/, and reads metric views.
Times are on 2026-11-01 unless a test says otherwise; `at("23:40")` is 2026-11-01 23:40 and
`at("00:20", day=2)` is 2026-11-02 00:20.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from pipelines.build import build as build_warehouse
from pipelines.catalog import GROUPS
from pipelines.contracts import contract
from pipelines.paths import MODELS_DIR
from pipelines.sources.base import empty_quarantine
from pipelines.warehouse import Warehouse

DAY1 = dt.date(2026, 11, 1)
SNAPSHOT = dt.datetime(2026, 11, 1, 0, 0)

Row = dict[str, Any]


def at(hhmm: str, day: int = 1) -> dt.datetime:
    hours, minutes = (int(p) for p in hhmm.split(":"))
    return dt.datetime(2026, 11, day, hours, minutes)


# -- raw rows ---------------------------------------------------------------------------------
def gpu(host: str, index: int, gpu_model: str = "A100", **fields: Any) -> Row:
    """One inventory row: a whole GPU unless share_mode/fraction/gpu_instance_id say otherwise."""
    row = {
        "snapshot_at": SNAPSHOT, "host": host, "gpu": index, "gpu_model": gpu_model,
        "memory_mib": 81920, "share_mode": "whole", "fraction": 1.0,
        "source": "allocator", "source_file": "pool.json",
    }
    return row | fields


def quota(queue: str, tenant: str, gpu_model: str, quota_gpus: float, **fields: Any) -> Row:
    row = {
        "snapshot_at": SNAPSHOT, "queue": queue, "tenant": tenant, "gpu_model": gpu_model,
        "quota_gpus": quota_gpus, "source": "allocator", "source_file": "pool.json",
    }
    return row | fields


def event(job_id: str, event_type: str, occurred_at: dt.datetime, attempt: int = 1, **fields: Any) -> Row:
    row = {
        "event_id": f"{job_id}:{event_type}:{attempt}:{occurred_at.isoformat()}",
        "occurred_at": occurred_at, "event_type": event_type, "job_id": job_id, "attempt": attempt,
        "source": "allocator", "source_file": "events.jsonl",
    }
    return row | fields


def submit(
    job_id: str, occurred_at: dt.datetime, tenant: str = "vision", queue: str = "vision-train",
    template: str = "training", gpu_model: str = "A100", gpus: int = 1, spec: dict | None = None, **fields: Any,
) -> Row:
    return event(
        job_id, "submit", occurred_at, tenant=tenant, queue=queue, template=template,
        gpu_model=gpu_model, gpus_requested=gpus, spec_json=json.dumps(spec) if spec else None, **fields,
    )


def placement(job_id: str, attempt: int, host: str, index: int | None, assigned_at: dt.datetime, **fields: Any) -> Row:
    row = {
        "job_id": job_id, "attempt": attempt, "host": host, "gpu": index, "fraction": 1.0,
        "assigned_at": assigned_at, "source": "allocator", "source_file": "events.jsonl",
    }
    return row | fields


def simple_job(
    job_id: str, host: str, index: int | None, start: dt.datetime, end: dt.datetime | None,
    state: str = "COMPLETED", placement_fields: Row | None = None, **submit_fields: Any,
) -> tuple[list[Row], list[Row]]:
    """A job submitted, admitted and started at `start` on one GPU, finished at `end` (None = running)."""
    events = [submit(job_id, start, **submit_fields), event(job_id, "admit", start), event(job_id, "start", start)]
    if end is not None:
        events.append(event(job_id, "finish", end, state=state))
    return events, [placement(job_id, 1, host, index, start, **(placement_fields or {}))]


def series(
    host: str, index: int, metric: str, start: dt.datetime, minutes: int, value: float, **labels: Any,
) -> list[Row]:
    """One sample per minute of one DCGM series, for `minutes` minutes from `start`."""
    return [
        {
            "sampled_at": start + dt.timedelta(minutes=m), "host": host, "gpu": index, "metric": metric,
            "value": value, "source": "dcgm_text", "source_file": "metrics.prom",
        } | labels
        for m in range(minutes)
    ]


def audit(audit_id: str, action: str, occurred_at: dt.datetime, **fields: Any) -> Row:
    row = {
        "audit_id": audit_id, "occurred_at": occurred_at, "actor": "admin-1", "action": action,
        "source": "allocator", "source_file": "audit.jsonl",
    }
    return row | fields


# -- loading and building -------------------------------------------------------------------
def load(warehouse: Warehouse, ingest: str = "test", day: dt.date = DAY1, **tables: list[Row]) -> None:
    """Write rows into the raw tables (contract-conformed) as one ingest partition."""
    frames = {
        name: contract(name).conform(pl.from_dicts(rows, infer_schema_length=None))
        for name, rows in tables.items()
        if rows
    }
    n = sum(f.height for f in frames.values())
    warehouse.replace_partition(ingest, day, frames, empty_quarantine(), files_read=1, records_read=n, records_loaded=n)


def write_catalog(catalog_dir: Path, entries: str, group: str = "task", version: str = "1.0.0") -> Path:
    """A catalog folder: version.yml, and one file per group with `entries` (YAML list items) in group's."""
    catalog_dir.mkdir(parents=True, exist_ok=True)
    (catalog_dir / "version.yml").write_text(f"version: {version}\n")
    for g in GROUPS:
        (catalog_dir / f"{g}.yml").write_text("metrics:\n" + (entries if g == group else ""))
    return catalog_dir


def build(warehouse: Warehouse, models_dir: Path = MODELS_DIR) -> duckdb.DuckDBPyConnection:
    """Build the dbt project `models_dir` and return a read-only connection to the result."""
    build_warehouse(warehouse, project_dir=models_dir)
    return warehouse.connect(read_only=True)


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[Row]:
    result = con.execute(sql, params or [])
    names = [d[0] for d in result.description]
    return [dict(zip(names, r, strict=True)) for r in result.fetchall()]


def one(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> Row:
    found = rows(con, sql, params)
    assert len(found) == 1, f"expected one row, got {len(found)}: {found}"
    return found[0]


def mark_day_files(warehouse: Warehouse, mart: str, day: dt.date, replace: str) -> None:
    """Rewrite, in place, the day files a per-minute mart's view reads for `day` (models/macros/day_files.sql)
    with `replace` (a DuckDB `* replace (...)` list, e.g. "0.0 as activity"): a mark that only a build
    rebuilding that day removes, as an UPDATE marks the rows of a table."""
    with warehouse.writer() as con:
        paths = [p for (p,) in con.execute("select path from ops.mart_files where table_name = ? and day = ?",
                                           [mart, day]).fetchall()]
        assert paths, f"{mart} lists no file for {day}"
        for path in paths:
            target = warehouse.home / path
            con.execute(f"copy (select * replace ({replace}) from read_parquet('{target}')) "
                        f"to '{target}.tmp' (format parquet)")
            Path(f"{target}.tmp").replace(target)
