"""The ingest sources: landing folder name -> parser, file patterns and the raw tables it fills.

An ingest source is the unit of partition replacement: re-ingesting (source, day) replaces
exactly what that source loaded for that day, in every table it writes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.sources import (
    allocator_artifacts,
    allocator_log,
    dcgm_parquet,
    dcgm_text,
    governance,
    k8s_audit,
    kueue,
    mlflow,
    node_exporter,
    prometheus,
    slurm_sacct,
    slurm_sacctmgr,
)
from pipelines.sources.base import ParseResult
from pipelines.sources.slurm_squeue import parse_squeue_job_gpus


@dataclass(frozen=True)
class IngestSource:
    name: str
    description: str
    patterns: tuple[str, ...]
    tables: tuple[str, ...]  # the first is 1:1 with the parser's records
    parse_bytes: Callable[[bytes, str], ParseResult]
    parse_path: Callable[[Path], ParseResult] | None = None  # for parsers that read the file themselves
    # table -> the column whose UTC day is the record's own day (pipelines/ingest.py): records
    # carrying their own time go to that day's partition. Tables not listed (snapshots, such as
    # sacct's or Kueue's view of jobs as of the query) go to the day being ingested.
    time_columns: Mapping[str, str] = field(default_factory=dict)
    # records a tenant controls: the field (record key and column of the first table) naming the tenant;
    # the quarantine threshold is then judged per tenant (pipelines/checks.py)
    tenant_field: str | None = None
    # each landing file's records are its own: no file supersedes another's, no rule of the suites spans
    # rows (uniqueness), so a day's rows are the union of its files' and the intraday ingest may add the
    # files landed since its last run to the day (pipelines/ingest.py `ingest_new_files`) instead of
    # re-reading the day. The telemetry: scrape rounds, Prometheus pulls, exporter files.
    appends: bool = False

    def reads(self, path: Path) -> bool:
        """Whether a file of this name is one this source reads (its patterns; hidden files never)."""
        return not path.name.startswith(".") and any(path.match(pattern) for pattern in self.patterns)

    def files_in(self, folder: Path) -> list[Path]:
        if not folder.is_dir():
            return []
        found = {p for pattern in self.patterns for p in folder.glob(pattern) if p.is_file()}
        return sorted(p for p in found if not p.name.startswith("."))

    def files_not_read(self, folder: Path) -> list[Path]:
        """The folder's visible files this source does not read (for a warning naming them)."""
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and not self.reads(p))

    def parse_file(self, path: Path) -> ParseResult:
        if self.parse_path is not None:
            return self.parse_path(path)
        return self.parse_bytes(path.read_bytes(), str(path))


SOURCES: dict[str, IngestSource] = {
    s.name: s
    for s in (
        IngestSource(
            "dcgm_text",
            "dcgm-exporter /metrics text exposition (scrapes or files)",
            ("*.prom", "*.txt", "*.metrics"),
            ("dcgm_samples",),
            # Lines without a timestamp take the file's modification time as the scrape time.
            lambda data, source_file: dcgm_text.parse_dcgm_text(data, source_file),
            parse_path=dcgm_text.parse_dcgm_file,
            time_columns={"dcgm_samples": "sampled_at"},
            appends=True,
        ),
        IngestSource(
            "dcgm_parquet",
            "DCGM samples as Parquet in the raw.dcgm_samples contract (the simulator's bulk telemetry)",
            ("*.parquet",),
            ("dcgm_samples",),
            dcgm_parquet.parse_dcgm_parquet,
            time_columns={"dcgm_samples": "sampled_at"},
            appends=True,
        ),
        IngestSource(
            "node_exporter",
            "node_exporter /metrics text exposition files, one scrape each; the host is the file name up to its "
            "first dot (node-07.prom, node-07.20261201T1030.prom), else node_uname_info's nodename",
            ("*.prom", "*.txt", "*.metrics"),
            ("host_samples",),
            # Lines without a timestamp take node_time_seconds, else the file's modification time.
            lambda data, source_file: node_exporter.parse_node_exporter_text(
                data, source_file, host=node_exporter.host_from_file_name(Path(source_file).name)
            ),
            parse_path=node_exporter.parse_node_exporter_file,
            time_columns={"host_samples": "sampled_at"},
            appends=True,
        ),
        IngestSource(
            "node_exporter_parquet",
            "Host samples as Parquet in the raw.host_samples contract (the simulator's host telemetry, "
            "node_exporter scrape rounds)",
            ("*.parquet",),
            ("host_samples",),
            node_exporter.parse_node_exporter_parquet,
            time_columns={"host_samples": "sampled_at"},
            appends=True,
        ),
        IngestSource(
            "prometheus",
            "Prometheus /api/v1/query_range JSON responses with DCGM series",
            ("*.json",),
            ("dcgm_samples",),
            prometheus.parse_query_range,
            time_columns={"dcgm_samples": "sampled_at"},
            appends=True,
        ),
        IngestSource(
            "slurm_sacct",
            "Slurm accounting: sacct --parsable2 --duplicates output",
            ("*.txt", "*.psv", "*.sacct"),
            ("job_events", "job_gpus"),
            slurm_sacct.parse_sacct_parsable2,
        ),
        IngestSource(
            "slurm_sacct_json",
            "Slurm accounting: sacct --json output (Slurm 21.08 to 23.11)",
            ("*.json",),
            ("job_events", "job_gpus"),
            slurm_sacct.parse_sacct_json,
        ),
        IngestSource(
            "slurm_sacctmgr",
            "Slurm admin audit: sacctmgr -P list transactions output (accounts, users, associations, QOS)",
            ("*.txt", "*.psv"),
            ("audit_events",),
            slurm_sacctmgr.parse_sacctmgr_transactions,
            time_columns={"audit_events": "occurred_at"},
        ),
        IngestSource(
            "slurm_squeue",
            "Slurm running jobs' GPU indices (squeue --json snapshots), for the DCGM join",
            ("*.json",),
            ("job_gpus",),
            parse_squeue_job_gpus,
        ),
        IngestSource(
            "k8s_audit",
            "Kubernetes audit log JSON lines (audit.k8s.io/v1 and v1beta1)",
            ("*.jsonl", "*.log", "*.json"),
            ("audit_events",),
            k8s_audit.parse_k8s_audit,
            time_columns={"audit_events": "occurred_at"},
        ),
        IngestSource(
            "kueue",
            "Kueue Workloads (WorkloadList JSON from the Kubernetes API), with the day's pods.json for their nodes",
            ("*.json",),
            ("job_events", "job_gpus"),
            kueue.parse_kueue_workloads,
            parse_path=kueue.parse_kueue_file,
        ),
        IngestSource(
            "allocator_events",
            "gpupool allocator event log (gpupool.event/v1 JSON lines)",
            ("*.jsonl",),
            ("job_events", "job_gpus"),
            allocator_log.parse_event_log,
            time_columns={"job_events": "occurred_at", "job_gpus": "assigned_at"},
        ),
        IngestSource(
            "allocator_audit",
            "gpupool allocator audit log (gpupool.audit/v1 JSON lines)",
            ("*.jsonl",),
            ("audit_events",),
            allocator_log.parse_audit_log,
            time_columns={"audit_events": "occurred_at"},
        ),
        IngestSource(
            "allocator_artifacts",
            "gpupool allocator checkpoint and artifact reports (gpupool.artifact/v1 JSON lines)",
            ("*.jsonl",),
            ("artifact_events",),
            allocator_artifacts.parse_artifact_log,
            time_columns={"artifact_events": "occurred_at"},
        ),
        IngestSource(
            "allocator_pool",
            "gpupool allocator pool snapshot (gpupool.pool/v1 JSON): inventory and quotas",
            ("*.json",),
            ("gpu_inventory", "queue_quotas"),
            allocator_log.parse_pool_snapshot,
        ),
        IngestSource(
            "governance_actions",
            "gpupool governance decision log (gpupool.governance/v1 JSON lines): decisions and engine answers",
            ("*.jsonl",),
            ("governance_actions",),
            governance.parse_governance_log,
            time_columns={"governance_actions": "occurred_at"},
        ),
        IngestSource(
            "mlflow",
            "MLflow runs' checkpoints, artifacts and registered model versions (the MLflow connector's "
            "gpupool.artifact/v1 JSON lines, one file per pull)",
            ("*.jsonl",),
            ("artifact_events",),
            mlflow.parse_mlflow_pull,
            time_columns={"artifact_events": "occurred_at"},
            tenant_field=mlflow.TENANT_FIELD,
        ),
    )
}


def sources_filling(tables: Iterable[str]) -> list[str]:
    """The sources that write any of these raw tables, in the registry's order."""
    wanted = set(tables)
    return [s.name for s in SOURCES.values() if wanted & set(s.tables)]


def source(name: str) -> IngestSource:
    try:
        return SOURCES[name]
    except KeyError:
        raise ValueError(f"unknown ingest source {name!r}; known sources: {', '.join(sorted(SOURCES))}") from None
