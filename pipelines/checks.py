"""Data-quality checks on each ingest: the Great Expectations suites' verdict on the batch.

The ingest runs each raw table's GX suite on the parsed batch and moves failing rows to
ops.quarantine, so a few bad records never reach the marts. What must stop the pipeline is a
bad *batch*: a format change, a broken exporter, a sacct shape we do not know. The check fails
when more than MAX_REJECTED_SHARE of a day's records were quarantined (parse or validation), or
when a day's non-empty files yielded nothing at all (an empty file, or a well-formed answer without a
record such as a header-only sacct, is a quiet day, noted as such). It blocks downstream materialisation for the tables
whose corruption would poison every mart (telemetry, job events) and warns for the others.

Where a tenant controls the records (`IngestSource.tenant_field`: MLflow runs' tags), the share is
judged per tenant: a tenant over MAX_REJECTED_SHARE is judged alone (its records stay quarantined,
a WARN `tenant_quarantine_share` result names it) and the batch is judged on the other records, so
one tenant's bad tags cannot stop everyone's rebuild. When two or more tenants are all over it, the
cause is the format, not a tenant: the batch fails as any other.
"""
import dagster as dg

from pipelines.ingest_record import IngestReport
from pipelines.sources.registry import IngestSource
from pipelines.warehouse import Warehouse

CHECK_NAME = "expectations_suite"
TENANT_CHECK_NAME = "tenant_quarantine_share"
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


def tenants_judged_alone(report: IngestReport) -> dict[str, tuple[int, int]]:
    """Tenants over MAX_REJECTED_SHARE, as tenant -> (read, quarantined), judged apart from the batch
    (module doc); empty when two or more tenants are all over it (then the format is at fault)."""
    named = {t: c for t, c in report.tenants.items() if t is not None}
    over = {t: (read, bad) for t, (read, bad) in named.items() if read and bad > MAX_REJECTED_SHARE * read}
    return over if len(over) < len(named) or len(named) == 1 else {}


def tenant_warnings(report: IngestReport) -> list[str]:
    return [f"{report.partition_date}: tenant {t}: {bad:,} of {read:,} records quarantined ({bad / read:.0%}), "
            f"judged alone: the other tenants' records loaded"
            for t, (read, bad) in sorted(tenants_judged_alone(report).items())]


def day_problems(report: IngestReport) -> list[str]:
    """Why one day's batch is bad, in words; empty when it is fine."""
    problems = []
    alone = tenants_judged_alone(report)
    read = report.records_read - sum(r for r, _ in alone.values())
    quarantined = report.records_quarantined - sum(q for _, q in alone.values())
    if read and quarantined > MAX_REJECTED_SHARE * read:
        problems.append(
            f"{report.partition_date}: {quarantined:,} of {read:,} records quarantined ({quarantined / read:.0%})"
            + (" (besides the tenants judged alone)" if alone else "")
        )
    non_empty = report.files_read - report.files_empty  # an empty file is a quiet day, not a bad batch
    if non_empty and report.records_loaded == 0 and not alone:
        problems.append(f"{report.partition_date}: {non_empty} non-empty file(s) but no record loaded")
    return problems


def suite_check_result(
    src: IngestSource, asset_key: dg.AssetKey, reports: list[IngestReport], warehouse: Warehouse
) -> dg.AssetCheckResult:
    severity = dg.AssetCheckSeverity.ERROR if is_blocking(src) else dg.AssetCheckSeverity.WARN
    problems: list[str] = []
    tenant_notes: list[str] = []
    failed_expectations: dict[str, int] = {}
    results = []
    for report in reports:
        day = day_problems(report)
        problems.extend(day)
        for table, outcome in report.validation.items():
            for f in outcome.get("failed", []):
                key = f"{table}: {f['reason']}"
                failed_expectations[key] = failed_expectations.get(key, 0) + f["unexpected_count"]
        results.append((
            CHECK_NAME, asset_key.to_user_string(), report.partition_date, not day, severity.value,
            report.records_quarantined, {"problems": day, "validation": report.validation},
        ))
        if src.tenant_field:
            alone = tenant_warnings(report)
            tenant_notes.extend(alone)
            results.append((
                TENANT_CHECK_NAME, asset_key.to_user_string(), report.partition_date, not alone,
                dg.AssetCheckSeverity.WARN.value, sum(q for _, q in tenants_judged_alone(report).values()),
                {"tenants": alone},
            ))
    warehouse.record_checks(results)
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
            "tenants_judged_alone": dg.MetadataValue.json(tenant_notes[:31]),
        },
    )
