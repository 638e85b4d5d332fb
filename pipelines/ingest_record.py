"""What an ingest of a day records (ops.ingest_log) and reports (Warehouse.replace_partition and
append_partition, pipelines/ingest.py)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from pipelines.lake import LakeError


class IncrementStale(LakeError):
    """An intraday ingest's base is no longer the day's newest run: nothing was committed (ingest the day whole)."""


@dataclass(frozen=True)
class IngestTotals:
    """What ops.ingest_log records of a day: its files, records and rows, and the parsers' notes."""

    files_read: int
    records_read: int
    records_loaded: int
    records_quarantined: int
    rows_by_table: dict[str, int]
    notes: list[str]

    def report(self, ingest_source: str, partition_date: dt.date) -> IngestReport:
        return IngestReport(ingest_source=ingest_source, partition_date=partition_date, files_read=self.files_read,
                            records_read=self.records_read, records_loaded=self.records_loaded,
                            records_quarantined=self.records_quarantined, rows_by_table=dict(self.rows_by_table),
                            notes=list(self.notes))


@dataclass(frozen=True)
class IngestReport:
    ingest_source: str
    partition_date: dt.date
    files_read: int
    records_read: int
    records_loaded: int
    records_quarantined: int
    rows_by_table: dict[str, int]
    # what the parsers said about the input ("19 step rows ignored", "empty file"), each prefixed by its file
    notes: list[str] = field(default_factory=list)
    files_empty: int = 0  # empty files and well-formed answers without a record (ParseResult.empty_answer)
    # per table: the Great Expectations suite's outcome on the parsed batch (before quarantine)
    validation: dict[str, dict] = field(default_factory=dict)
    # sources whose records a tenant controls (IngestSource.tenant_field): tenant -> [read, quarantined];
    # the key None holds the quarantined records no tenant could be read from (pipelines/checks.py)
    tenants: dict[str | None, list[int]] = field(default_factory=dict)
    # how the intraday ingest (pipelines/ingest.py ingest_new_files) loaded the day; empty for a whole day's ingest
    how: str = ""

    def summary(self) -> str:
        return (
            f"{self.ingest_source} {self.partition_date}: {self.files_read} files, "
            f"{self.records_read} read, {self.records_loaded} loaded, {self.records_quarantined} quarantined"
            + (f" ({self.how})" if self.how else "")
        )
