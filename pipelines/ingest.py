"""Ingest one (source, day): parse every landing file, validate, quarantine, replace the partition.

Pure of Dagster so the CLI, the assets and the tests share one code path.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl

from expectations.validate import split_valid
from pipelines.contracts import contract
from pipelines.sources.base import empty_quarantine
from pipelines.sources.registry import IngestSource, source
from pipelines.warehouse import IngestReport, Warehouse


def landing_folder(warehouse: Warehouse, source_name: str, day: dt.date) -> Path:
    return warehouse.landing / source_name / day.isoformat()


def ingest_partition(
    warehouse: Warehouse,
    source_name: str,
    day: dt.date,
    validate: bool = True,
    on_file: Callable[[Path], None] | None = None,
) -> IngestReport:
    """Parse the day's landing files of one source and replace that source's partition."""
    src = source(source_name)
    started_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    files = src.files_in(landing_folder(warehouse, source_name, day))
    parts: dict[str, list[pl.DataFrame]] = {t: [] for t in src.tables}
    quarantines = [empty_quarantine()]
    records_read = records_loaded = 0
    for path in files:
        if on_file:
            on_file(path)
        result = src.parse_file(path)
        records_read += result.records_read
        records_loaded += result.records_loaded
        quarantines.append(result.quarantine)
        for table in src.tables:
            if table in result.tables:
                parts[table].append(result.tables[table])
    tables = {
        t: pl.concat(frames, how="vertical") if frames else contract(t).empty_frame() for t, frames in parts.items()
    }
    parse_quarantined = sum(q.height for q in quarantines)
    validate_rejected = 0
    outcomes: dict[str, dict] = {}
    if validate:
        tables, rejected, validate_rejected, outcomes = _validate(src, tables)
        quarantines.append(rejected)
        records_loaded -= validate_rejected
    quarantine = pl.concat(quarantines, how="vertical")
    report = warehouse.replace_partition(
        ingest_source=source_name,
        partition_date=day,
        tables=tables,
        quarantine=quarantine,
        files_read=len(files),
        records_read=records_read,
        records_loaded=records_loaded,
        records_quarantined=parse_quarantined + validate_rejected,
        started_at=started_at,
    )
    return dataclasses.replace(report, validation=outcomes)


def _validate(
    src: IngestSource, tables: dict[str, pl.DataFrame]
) -> tuple[dict[str, pl.DataFrame], pl.DataFrame, int, dict[str, dict]]:
    """Move rows that fail the table's GX suite to quarantine (stage validate).

    Returns the kept rows, the quarantine rows and how many input records they came from: a
    record is identified by (source_file, line_number) where the table carries line numbers;
    otherwise each rejected row of the source's first table (1:1 with records) is one record.
    """
    kept: dict[str, pl.DataFrame] = {}
    rejected = [empty_quarantine()]
    outcomes: dict[str, dict] = {}
    for table, frame in tables.items():
        has_lines = "line_number" in frame.columns
        valid, bad, outcome = split_valid(table, frame, source=src.name, line_col="line_number" if has_lines else None)
        kept[table] = valid
        rejected.append(bad)
        outcomes[table] = outcome.to_metadata()
    bad_rows = pl.concat(rejected, how="vertical")
    located = bad_rows.filter(pl.col("line_number").is_not_null()).select("source_file", "line_number").unique()
    unlocated = 0
    if "line_number" not in tables[src.tables[0]].columns:
        unlocated = rejected[1].height if len(rejected) > 1 else 0
    return kept, bad_rows, located.height + unlocated, outcomes


def stage_files(warehouse: Warehouse, source_name: str, path: Path, day: dt.date) -> list[Path]:
    """Copy a file, or a folder's matching files, into the landing zone for (source, day)."""
    src = source(source_name)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    candidates = src.files_in(path) if path.is_dir() else [path]
    if not candidates:
        raise ValueError(f"{path}: no files matching {', '.join(src.patterns)} for source {source_name}")
    target = landing_folder(warehouse, source_name, day)
    target.mkdir(parents=True, exist_ok=True)
    staged = []
    for file in candidates:
        dest = target / file.name
        shutil.copy2(file, dest)
        staged.append(dest)
    return staged
