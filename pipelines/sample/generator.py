"""Deterministic sample data for the demo, in the landing layout the ingest reads.

    out_dir/allocator_pool/<D>/pool.json         gpupool.pool/v1 snapshot at 00:00Z
    out_dir/allocator_events/<D>/events.jsonl    gpupool.event/v1, events of that UTC day
    out_dir/allocator_audit/<D>/audit.jsonl      gpupool.audit/v1, records of that UTC day
    out_dir/dcgm_text/<D>/<host>.prom            dcgm-exporter exposition, a sample a minute

The same (start, days, seed) gives byte-identical files; nothing reads the clock. The scenario
(workload.story) is fixed and its cases are listed in `SampleManifest.facts`; the seed drives the
background jobs and the telemetry noise. A longer window reproduces a shorter one's days.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.sample.allocator_logs import audit_records, dumps, event_records, pool_snapshot
from pipelines.sample.pool import NODES
from pipelines.sample.telemetry import DEFAULT_INTERVAL_S, node_day_exposition
from pipelines.sample.workload import KnownFacts, build_workload

SOURCES = ("allocator_pool", "allocator_events", "allocator_audit", "dcgm_text")


@dataclass(frozen=True)
class SampleManifest:
    out_dir: Path
    dates: tuple[dt.date, ...]
    files: dict[str, tuple[Path, ...]]  # ingest source -> files written, in date order
    jobs: int  # jobs submitted inside the window
    facts: KnownFacts
    hosts: tuple[str, ...] = field(default=tuple(n.host for n in NODES))

    @property
    def window(self) -> tuple[dt.datetime, dt.datetime]:
        first = dt.datetime.combine(self.dates[0], dt.time())
        return first, first + dt.timedelta(days=len(self.dates))

    @property
    def total_bytes(self) -> int:
        return sum(p.stat().st_size for paths in self.files.values() for p in paths)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def _jsonl(records: list[dict]) -> str:
    return "".join(dumps(r) + "\n" for r in records)


def generate_sample(out_dir: Path, start: dt.date = dt.date(2026, 11, 1), days: int = 3, seed: int = 7,
                    scrape_interval_s: int = DEFAULT_INTERVAL_S) -> SampleManifest:
    """Write `days` UTC days of pool snapshots, allocator logs and DCGM telemetry under out_dir.

    About 60 MB of telemetry a day at the default one-minute scrape interval (168 series on 4 nodes);
    scrape_interval_s=120 halves it.
    """
    if days < 1:
        raise ValueError(f"generate_sample: days must be at least 1, got {days}")
    out_dir = Path(out_dir)
    workload = build_workload(start, days, seed)
    dates = tuple(start + dt.timedelta(days=i) for i in range(days))
    window_end = dt.datetime.combine(dates[-1], dt.time()) + dt.timedelta(days=1)
    events = event_records(workload.jobs, window_end)
    audit = audit_records(workload.audit, window_end)
    files: dict[str, list[Path]] = {s: [] for s in SOURCES}
    for day in dates:
        d0 = dt.datetime.combine(day, dt.time())
        d1 = d0 + dt.timedelta(days=1)
        folder = day.isoformat()
        snapshot = pool_snapshot(d0, workload.audit)
        files["allocator_pool"].append(
            _write(out_dir / "allocator_pool" / folder / "pool.json", json.dumps(snapshot, indent=2) + "\n"))
        files["allocator_events"].append(_write(
            out_dir / "allocator_events" / folder / "events.jsonl", _jsonl([r for t, r in events if d0 <= t < d1])))
        files["allocator_audit"].append(_write(
            out_dir / "allocator_audit" / folder / "audit.jsonl", _jsonl([r for t, r in audit if d0 <= t < d1])))
        for node in NODES:
            files["dcgm_text"].append(_write(
                out_dir / "dcgm_text" / folder / f"{node.host}.prom",
                node_day_exposition(node, day, workload.jobs, workload.rogues, seed, scrape_interval_s)))
    submitted = sum(1 for job in workload.jobs if job.submit_at < window_end)
    return SampleManifest(out_dir, dates, {k: tuple(v) for k, v in files.items()}, submitted, workload.facts)
