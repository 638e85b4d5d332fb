"""Run the Dagster assets in process for the CLI: ingest days, build the models."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg

from pipelines.assets.ingest import asset_name, ingest_assets
from pipelines.assets.marts import catalog_matches_models, ingest_accounting_balanced, warehouse_models
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse

# The CLI prints its own progress and errors; Dagster's console log would repeat them with stack traces.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass(frozen=True)
class StepOutcome:
    asset: str
    metadata: dict
    checks_failed: list[str]
    check_problems: list[str]


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
) -> list[StepOutcome]:
    """Materialise the ingest assets of `sources` for the days first..last in one run each."""
    resources = {"warehouse": WarehouseResource(home=str(warehouse.home))}
    wanted = {asset_name(s) for s in sources}
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
            raise RuntimeError(f"ingest of {name} failed: {_failure_message(result)}")
        outcomes.extend(outcomes_now)
    return outcomes


def build_models(warehouse: Warehouse, on_step: Callable[[str], None] = lambda _msg: None) -> list[StepOutcome]:
    on_step("build models (staging, marts, metrics)")
    result = dg.materialize(
        [*ingest_assets, warehouse_models, ingest_accounting_balanced, catalog_matches_models],
        selection=[warehouse_models],
        resources={"warehouse": WarehouseResource(home=str(warehouse.home))},
        run_config=QUIET,
        raise_on_error=False,
    )
    if not result.success:
        raise RuntimeError(f"building the models failed: {_failure_message(result)}")
    return _outcomes(result)


def _failure_message(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_failure and event.step_failure_data and event.step_failure_data.error:
            err = event.step_failure_data.error
            return f"{event.step_key}: {err.message.strip()}"
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            return f"blocking check {evaluation.check_name} failed on {evaluation.asset_key.to_user_string()}"
    return "see the Dagster logs"
