"""Data-quality checks on each ingest: the Great Expectations suites' verdict on the batch.

The ingest runs each raw table's GX suite on the parsed batch and moves failing rows to
ops.quarantine, so a few bad records never reach the marts. What must stop the pipeline is a
bad *batch*: a format change, a broken exporter, a sacct shape we do not know. The check fails
when more than MAX_REJECTED_SHARE of a day's records were quarantined (parse or validation), or
when a day's non-empty files yielded nothing at all (an empty file is a quiet day, noted as such). It blocks downstream materialisation for the tables
whose corruption would poison every mart (telemetry, job events) and warns for the others.
"""
import dagster as dg

from pipelines.sources.registry import IngestSource
from pipelines.warehouse import IngestReport, Warehouse

CHECK_NAME = "expectations_suite"
MAX_REJECTED_SHARE = 0.05
BLOCKING_TABLES = {"dcgm_samples", "job_events", "job_gpus"}


def is_blocking(src: IngestSource) -> bool:
    return any(t in BLOCKING_TABLES for t in src.tables)


def suite_check_spec(src: IngestSource, asset_key: dg.AssetKey) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        CHECK_NAME,
        asset=asset_key,
        blocking=is_blocking(src),
        description=(
            f"Great Expectations suites for {', '.join('raw.' + t for t in src.tables)} on each day's batch: "
            f"fails when over {MAX_REJECTED_SHARE:.0%} of the records were quarantined."
        ),
    )


def day_problems(report: IngestReport) -> list[str]:
    """Why one day's batch is bad, in words; empty when it is fine."""
    problems = []
    if report.records_read and report.records_quarantined > MAX_REJECTED_SHARE * report.records_read:
        share = report.records_quarantined / report.records_read
        problems.append(
            f"{report.partition_date}: {report.records_quarantined:,} of {report.records_read:,} records "
            f"quarantined ({share:.0%})"
        )
    non_empty = report.files_read - report.files_empty  # an empty file is a quiet day, not a bad batch
    if non_empty and report.records_loaded == 0:
        problems.append(f"{report.partition_date}: {non_empty} non-empty file(s) but no record loaded")
    return problems


def suite_check_result(
    src: IngestSource, asset_key: dg.AssetKey, reports: list[IngestReport], warehouse: Warehouse
) -> dg.AssetCheckResult:
    severity = dg.AssetCheckSeverity.ERROR if is_blocking(src) else dg.AssetCheckSeverity.WARN
    problems: list[str] = []
    failed_expectations: dict[str, int] = {}
    for report in reports:
        day = day_problems(report)
        problems.extend(day)
        for table, outcome in report.validation.items():
            for f in outcome.get("failed", []):
                key = f"{table}: {f['reason']}"
                failed_expectations[key] = failed_expectations.get(key, 0) + f["unexpected_count"]
        warehouse.record_check(
            CHECK_NAME, asset_key.to_user_string(), report.partition_date, not day, severity.value,
            report.records_quarantined, {"problems": day, "validation": report.validation},
        )
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=CHECK_NAME,
        passed=not problems,
        severity=severity,
        metadata={
            "unexpected_count": sum(failed_expectations.values()),
            "records_quarantined": sum(r.records_quarantined for r in reports),
            "failed_expectations": dg.MetadataValue.json(failed_expectations),
            "problems": dg.MetadataValue.json(problems[:31]),
        },
    )
