"""For the CLI: run the ingest assets in process for days (or the `ingest_backfill` job, one process
per run of days, with workers >= 2), and build the models (pipelines/build.py) with the build's
checks."""
from __future__ import annotations

import datetime as dt
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg

from pipelines.assets import backfill
from pipelines.assets.ingest import asset_name, ingest_assets
from pipelines.build import BuildError, ModelBuild, build
from pipelines.build_checks import (
    CATALOG_MATCHES,
    INGEST_ACCOUNTING,
    catalog_problems,
    load_exemptions,
    unbalanced_ingests,
)
from pipelines.config import ConfigError
from pipelines.policies.catalog import CatalogError
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse

# The CLI prints its own progress and errors; Dagster's console log would repeat them with stack traces.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


class StepFailed(RuntimeError):
    """An ingest or build step failed: `str()` is the cause in one line (the failing model and
    DuckDB's message, say); `detail` is the full error with its stack, for --verbose and logs."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True)
class StepOutcome:
    asset: str
    metadata: dict
    checks_failed: list[str]
    check_problems: list[str]


# Multiprocess steps start from a fork server that has imported these once (a spawned process would
# import Dagster, Polars and Great Expectations again for every step: seconds each).
PRELOADED = ["pipelines.assets.backfill"]


def _metadata_values(materialization) -> dict:
    return {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}


def _outcomes(result: dg.ExecuteInProcessResult) -> list[StepOutcome]:
    failed_checks: dict[str, list[str]] = {}
    problems: dict[str, list[str]] = {}
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            key = evaluation.asset_key.to_user_string()
            failed_checks.setdefault(key, []).append(evaluation.check_name)
            listed = evaluation.metadata.get("problems")
            problems.setdefault(key, []).extend(getattr(listed, "value", None) or [])
    # A run over a range of partitions materialises each partition with the same metadata: keep one per asset.
    latest = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        latest[mat.asset_key.to_user_string()] = mat
    return [
        StepOutcome(key, _metadata_values(mat), failed_checks.get(key, []), problems.get(key, []))
        for key, mat in latest.items()
    ]


def ingest_days(
    warehouse: Warehouse,
    sources: Sequence[str],
    first: dt.date,
    last: dt.date,
    on_step: Callable[[str], None] = lambda _msg: None,
    workers: int = 1,
) -> list[StepOutcome]:
    """Materialise the ingest assets of `sources` for the days first..last: in one run each, in this
    process; or, with `workers` >= 2, as the `ingest_backfill` job: the days cut into `workers`
    contiguous runs, one process each. The outcomes are per asset either way, summed over the days."""
    wanted = {asset_name(s) for s in sources}
    outcomes: list[StepOutcome] = []
    with warehouse.publishing("ingest", f"{', '.join(sorted(wanted))} {first}..{last}"):
        if workers >= 2:
            outcomes = _ingest_backfill(warehouse, sources, first, last, workers, on_step)
        else:
            resources = {"warehouse": WarehouseResource(home=str(warehouse.home))}
            outcomes = _ingest_runs(resources, wanted, first, last, on_step)
    return outcomes


def dagster_instance(warehouse: Warehouse) -> dg.DagsterInstance:
    """The instance that records a backfill's run: $DAGSTER_HOME's when set (the operators' UI shows
    it), else one kept under the home (the multiprocess executor needs an instance on disk)."""
    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    folder = warehouse.home / "dagster"
    folder.mkdir(parents=True, exist_ok=True)
    # The steps' processes log to the console at the instance's level (QUIET does not reach them).
    return dg.DagsterInstance.local_temp(str(folder), overrides={"python_logs": {"python_log_level": "CRITICAL"}})


def _ingest_backfill(warehouse: Warehouse, sources: Sequence[str], first: dt.date, last: dt.date,
                     workers: int, on_step: Callable[[str], None]) -> list[StepOutcome]:
    on_step(f"ingest {', '.join(sorted(sources))} {first}..{last}: {workers} processes, each a run of days")
    run_config = {
        **QUIET,
        "execution": {"config": {"max_concurrent": workers,
                                 "start_method": {"forkserver": {"preload_modules": PRELOADED}}}},
        "resources": {"warehouse": {"config": {"home": str(warehouse.home)}}},
        "ops": {"plan_chunks": {"config": {"sources": sorted(sources), "first": first.isoformat(),
                                           "last": last.isoformat(), "chunks": workers}}},
    }
    with dagster_instance(warehouse) as instance, dg.execute_job(
        dg.reconstructable(backfill.ingest_backfill), instance=instance, run_config=run_config,
        tags={"gpupool/command": "ingest"}, raise_on_error=False,
    ) as result:
        # A failed blocking check does not fail a step (the batch is loaded and quarantined): the
        # outcomes carry it, as in one process.
        if not result.success:
            message, detail = _failure(result)
            raise StepFailed(f"{backfill.JOB_NAME} failed (run {result.run_id}): {message}", detail)
        return _summed_outcomes(result)


def _summed_outcomes(result: dg.ExecuteJobResult) -> list[StepOutcome]:
    """Per asset: the counts summed over its partitions, the notes of every day, the failed checks."""
    days: dict[str, list[tuple[str, dict]]] = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        days.setdefault(mat.asset_key.to_user_string(), []).append((mat.partition, _metadata_values(mat)))
    failed: dict[str, list[str]] = {}
    problems: dict[str, list[str]] = {}
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            key = evaluation.asset_key.to_user_string()
            if evaluation.check_name not in failed.setdefault(key, []):
                failed[key].append(evaluation.check_name)
            listed = evaluation.metadata.get("problems")
            problems.setdefault(key, []).extend(getattr(listed, "value", None) or [])
    outcomes = []
    for key, partitions in sorted(days.items()):
        partitions.sort(key=lambda p: p[0])
        counts = ("files_read", "records_read", "records_loaded", "records_quarantined", "files_empty")
        metadata = {name: sum(m.get(name, 0) for _, m in partitions) for name in counts}
        metadata["notes"] = [f"{day}: {n}" if len(partitions) > 1 else n
                             for day, m in partitions for n in m.get("notes") or []][:200]
        outcomes.append(StepOutcome(key, metadata, failed.get(key, []), problems.get(key, [])))
    return outcomes


def _ingest_runs(resources: dict, wanted: set[str], first: dt.date, last: dt.date,
                 on_step: Callable[[str], None]) -> list[StepOutcome]:
    outcomes: list[StepOutcome] = []
    for asset in ingest_assets:
        name = asset.key.to_user_string()
        if name not in wanted:
            continue
        on_step(f"ingest {name} {first}..{last}")
        result = dg.materialize(
            [asset],
            resources=resources,
            run_config=QUIET,
            tags={
                "dagster/asset_partition_range_start": first.isoformat(),
                "dagster/asset_partition_range_end": last.isoformat(),
            },
            raise_on_error=False,
        )
        outcomes_now = _outcomes(result)
        # A failed blocking check still loaded (and quarantined) the batch: report it, don't crash.
        if not result.success and not any(o.checks_failed for o in outcomes_now):
            message, detail = _failure(result)
            raise StepFailed(f"ingest of {name} failed: {message}", detail)
        outcomes.extend(outcomes_now)
    return outcomes


def build_models(warehouse: Warehouse, full_refresh: bool = False,
                 on_step: Callable[[str], None] = lambda _msg: None, only: Sequence[str] = ()) -> list[ModelBuild]:
    """Build the models (incremental, or everything with `full_refresh`; `only`: just these models and
    what they read), load the policy exemptions, then run the build's checks: ingest_accounting_balanced
    warns, catalog_matches_models fails the step (not with `only`: it checks the whole project)."""
    what = f"{', '.join(only)} and what they read" if only else "seeds, staging, marts, metrics"
    on_step(f"build models ({what})" + (", full refresh" if full_refresh else ""))
    with warehouse.publishing("build", "full refresh" if full_refresh else None):
        builds = _build_and_check(warehouse, full_refresh, on_step, only)
    return builds


def _build_and_check(warehouse: Warehouse, full_refresh: bool, on_step: Callable[[str], None],
                     only: Sequence[str] = ()) -> list[ModelBuild]:
    try:
        builds = build(warehouse, full_refresh=full_refresh, on_step=on_step, only=only)
    except (BuildError, ConfigError, CatalogError) as err:  # the site's files too: the cause, not a traceback
        raise StepFailed(str(err), traceback.format_exc()) from None
    problem = load_exemptions(warehouse)
    if problem:
        on_step(f"policy exemptions not loaded, the last loaded are kept: {problem}")
    bad = unbalanced_ingests(warehouse)
    if bad:
        on_step(f"warning: check {INGEST_ACCOUNTING} failed on metrics/ingest_daily{_examples([list(r) for r in bad])}")
    if only:  # the catalog's check is of the whole project: the full build runs it
        return builds
    problems = catalog_problems(warehouse)
    if problems:
        raise StepFailed(f"blocking check {CATALOG_MATCHES} failed on metrics/catalog{_examples(problems)}")
    return builds


def _examples(found: list) -> str:
    return f": {'; '.join(map(str, found[:5]))}"


def _failure(result: dg.ExecuteInProcessResult | dg.ExecuteJobResult) -> tuple[str, str]:
    """(the cause in words, the full error text). Dagster wraps the op's exception in "Error occurred
    while executing op ...:" with nothing after the colon; the cause is the op's own exception, the
    first error of the chain that is not Dagster's, prefixed by its class name."""
    for event in result.all_events:
        if event.is_failure and event.step_failure_data and event.step_failure_data.error:
            err = event.step_failure_data.error
            if err.cls_name == "DagsterAssetCheckFailedError":
                break  # the cause is the check's own findings, below
            detail = err.to_string()
            while err.cause is not None and (err.cls_name or "").startswith("Dagster"):
                err = err.cause
            message = err.message.strip()
            qualified, _, rest = message.partition(": ")  # Dagster keeps "module.Class: message"
            if rest and qualified.rsplit(".", 1)[-1] == err.cls_name:
                message = rest
            if err.cls_name:
                message = f"{err.cls_name}: {message}"
            return f"{event.step_key}: {message}", detail
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            examples = getattr(evaluation.metadata.get("examples"), "value", None)
            found = f": {'; '.join(map(str, examples[:5]))}" if isinstance(examples, list) and examples else ""
            return (f"blocking check {evaluation.check_name} failed on "
                    f"{evaluation.asset_key.to_user_string()}{found}"), ""
    return "see the Dagster logs", ""
