"""The connectors domain: land a day from the live Slurm and Kueue into the landing zone.

`slurm_accounting_landing` and `kueue_workloads_landing` (group `connectors`, daily partitions)
write what the ingest assets `raw_slurm_sacct`/`raw_slurm_sacct_json` and `raw_kueue` read; the
`land_connectors_daily` job and its schedule (00:10 UTC, yesterday) run them before
`ingest_daily` (00:20). A live connector without its section in gpupool.yml fails the asset:
landing nothing and reporting success would hide that the connector is off. With `offline_dir`
set the resources read recorded answers and need no section.

The `slurm_gpu_snapshot` sensor lands `squeue --json` once per tick (which GPU indices each
running job holds) and every `ingest_every_ticks` snapshots requests a run of the day's
`raw_slurm_squeue` partition; on the first tick of a new day, one last run of the day before.

The `mlflow_pull` sensor (stopped by default) pulls the MLflow runs tagged with a job id, their
artifacts and model versions (the `mlflow` section; pipelines/connectors/mlflow.py) every
`interval_s` into landing/mlflow/<day>/ and requests a run of the day's `raw_mlflow` partition for
each pull that landed a file; without the section its ticks skip, saying so.

The `slurm_admin_audit` sensor lands the day's `sacctmgr list transactions` (the admin audit:
account, user, association and QOS changes) once per tick and requests a run of the day's
`raw_slurm_sacctmgr` partition; on the first tick of a new day it lands and ingests the day before
once more, so the transactions of its last minutes are kept.
"""

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
from pydantic import BaseModel

from pipelines.assets.ingest import asset_name
from pipelines.assets.ingest_cursor import TRIGGER_TAG, JsonCursor, due_ingests, ingest_result
from pipelines.clock import utc_naive
from pipelines.config import ConfigError, config_path, section
from pipelines.connectors.kubernetes import SECTION as KUBERNETES_SECTION
from pipelines.connectors.kubernetes import KubernetesConfig
from pipelines.connectors.mlflow import SECTION as MLFLOW_SECTION
from pipelines.connectors.mlflow import SOURCE as MLFLOW_SOURCE
from pipelines.connectors.mlflow import MlflowConfig
from pipelines.connectors.mlflow import pull as pull_mlflow
from pipelines.connectors.slurm import SECTION as SLURM_SECTION
from pipelines.connectors.slurm import (
    SQUEUE_SOURCE,
    TRANSACTIONS_SOURCE,
    SlurmConfig,
    land_transactions,
    snapshot_running_jobs,
)
from pipelines.partitions import daily_partitions
from pipelines.resources.kueue import KueueState
from pipelines.resources.slurm import SlurmAccounting
from pipelines.resources.warehouse import WarehouseResource
from pipelines.schedules import daily_schedule

GROUP = "connectors"
RAW_SLURM_SQUEUE = dg.AssetKey(asset_name(SQUEUE_SOURCE))
RAW_MLFLOW = dg.AssetKey(asset_name(MLFLOW_SOURCE))
RAW_SLURM_SACCTMGR = dg.AssetKey(asset_name(TRANSACTIONS_SOURCE))


def require_section(name: str, model: type[BaseModel], config_file: str) -> BaseModel:
    """The connector's section, or dg.Failure naming the file and what to add."""
    path = config_path(config_file)
    try:
        settings = section(name, model, path)
    except ConfigError as err:
        raise dg.Failure(description=str(err)) from None
    if settings is None:
        raise dg.Failure(
            description=(
                f"{path}: no `{name}` section, so the {name} connector is off. Add one "
                f"(see gpupool.example.yml and docs/connectors.md), or point $GPUPOOL_CONFIG at "
                f"the file that has it."
            )
        )
    return settings


def _landed(context: dg.AssetExecutionContext, land) -> dg.MaterializeResult:
    """Land every partition of the run with `land(day)`; metadata lists the files."""
    files: list[Path] = []
    for partition in context.partition_keys:
        paths = land(dt.date.fromisoformat(partition))
        context.log.info(f"{partition}: landed {', '.join(str(p) for p in paths)}")
        files.extend(paths)
    return dg.MaterializeResult(
        metadata={
            "files_landed": len(files),
            "bytes_landed": sum(p.stat().st_size for p in files),
            "files": dg.MetadataValue.md("\n".join(f"- `{p}`" for p in files[-62:]) or "(none)"),
        }
    )


@dg.asset(
    group_name=GROUP,
    kinds={"slurm"},
    partitions_def=daily_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),  # a range of days lands in one run, day by day
    description=(
        "A UTC day of Slurm accounting (sacct text/JSON and/or slurmrestd, per the `slurm` section "
        "of gpupool.yml) into landing/slurm_sacct/<day>/ and landing/slurm_sacct_json/<day>/; "
        "landing a day again replaces its files."
    ),
)
def slurm_accounting_landing(
    context: dg.AssetExecutionContext, slurm: SlurmAccounting, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    if not slurm.offline_dir:
        require_section(SLURM_SECTION, SlurmConfig, slurm.config_file)
    landing = warehouse.get().landing
    return _landed(context, lambda day: slurm.land_day(landing, day))


@dg.asset(
    group_name=GROUP,
    kinds={"kubernetes"},
    partitions_def=daily_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),  # a range of days lands in one run, day by day
    description=(
        "A snapshot of Kueue Workloads and their pods (the `kubernetes` section of gpupool.yml) "
        "merged into landing/kueue/<day>/workloads.json and pods.json."
    ),
)
def kueue_workloads_landing(
    context: dg.AssetExecutionContext, kueue: KueueState, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    if not kueue.offline_dir:
        require_section(KUBERNETES_SECTION, KubernetesConfig, kueue.config_file)
    landing = warehouse.get().landing
    return _landed(context, lambda day: kueue.land(landing, day))


connector_assets = [slurm_accounting_landing, kueue_workloads_landing]

land_connectors_job = dg.define_asset_job(
    "land_connectors_daily",
    selection=dg.AssetSelection.groups(GROUP),
    partitions_def=daily_partitions,
    description="Land one day from Slurm and Kueue into the landing zone.",
)


# Yesterday, landed before ingest_daily (00:20) reads it.
land_connectors_schedule = daily_schedule(
    land_connectors_job, "10 0 * * *", "land_connectors_daily_schedule",
    "Lands yesterday (UTC) from Slurm and Kueue at 00:10 UTC.", run_key_prefix="land_connectors")


def _slurm_or_skip(context: dg.SensorEvaluationContext, slurm: SlurmAccounting) -> SlurmConfig | dg.SensorResult:
    """The `slurm` section, or the tick's skip (its cursor kept) when the configuration has none."""
    path = config_path(slurm.config_file)
    settings = section(SLURM_SECTION, SlurmConfig, path)
    if settings is None:
        return dg.SensorResult(skip_reason=f"{path}: no `slurm` section (see gpupool.example.yml)",
                               cursor=context.cursor)
    return settings


@dataclass(frozen=True)
class SnapshotCursor(JsonCursor):
    day: str | None = None  # UTC day of the last snapshot
    since_ingest: int = 0  # snapshots on `day` since its last requested ingest
    snapshots: int = 0  # all days


def advance_snapshot(
    cursor: SnapshotCursor, now: dt.datetime, every: int
) -> tuple[SnapshotCursor, list[tuple[str, str]]]:
    """The cursor after a snapshot at `now`, and the (partition day, run key) ingests to request."""
    day, snapshots = now.date().isoformat(), cursor.snapshots + 1
    since, ingests = due_ingests(SQUEUE_SOURCE, cursor.day, cursor.since_ingest, day, snapshots, True, every)
    return replace(cursor, day=day, since_ingest=since, snapshots=snapshots), ingests


def build_slurm_snapshot_sensor(
    interval_s: int = 60,
    ingest_every_ticks: int = 15,
    name: str = "slurm_gpu_snapshot",
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        minimum_interval_seconds=interval_s,
        asset_selection=[RAW_SLURM_SQUEUE],
        default_status=default_status,
        description=(
            f"Lands `squeue --json` (running jobs and their GPU indices) every {interval_s} s into "
            f"landing/{SQUEUE_SOURCE}/<day>/ and re-ingests the day's {RAW_SLURM_SQUEUE.to_user_string()} "
            f"partition every {ingest_every_ticks} snapshots."
        ),
    )
    def _snapshot(
        context: dg.SensorEvaluationContext, slurm: SlurmAccounting, warehouse: WarehouseResource
    ) -> dg.SensorResult:
        settings = _slurm_or_skip(context, slurm)
        if isinstance(settings, dg.SensorResult):
            return settings
        now = utc_naive()
        landed = snapshot_running_jobs(warehouse.get().landing, now, settings)
        cursor, ingests = advance_snapshot(SnapshotCursor.parse(context.cursor), now, ingest_every_ticks)
        context.log.info(f"squeue snapshot written to {landed}")
        return ingest_result(ingests, name, cursor, f"snapshot landed: {landed.name}")

    return _snapshot


slurm_gpu_snapshot_sensor = build_slurm_snapshot_sensor()


def build_mlflow_sensor(
    interval_s: int = 900,
    name: str = "mlflow_pull",
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        minimum_interval_seconds=interval_s,
        asset_selection=[RAW_MLFLOW],
        default_status=default_status,
        description=(
            f"Pulls MLflow's runs tagged with a job id (their checkpoints, artifacts and registered model "
            f"versions) every {interval_s} s into landing/{MLFLOW_SOURCE}/<day>/ and ingests the day's "
            f"{RAW_MLFLOW.to_user_string()} partition after each pull that landed a file."
        ),
    )
    def _pull(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult:
        path = config_path()
        settings = section(MLFLOW_SECTION, MlflowConfig, path)
        if settings is None:
            return dg.SensorResult(skip_reason=f"{path}: no `{MLFLOW_SECTION}` section (see gpupool.example.yml)")
        result = pull_mlflow(warehouse.get().landing, settings)  # MlflowError fails the tick with its message
        context.log.info("; ".join([f"{result.records} record(s) from {result.runs_linked} linked run(s)",
                                    *result.notes]))
        if result.path is None:
            return dg.SensorResult(skip_reason=f"no run carries the {settings.job_tag} tag; nothing landed")
        return dg.SensorResult(run_requests=[dg.RunRequest(
            run_key=f"{MLFLOW_SOURCE}:{result.path.name}", partition_key=result.path.parent.name,
            tags={TRIGGER_TAG: name})])

    return _pull


mlflow_pull_sensor = build_mlflow_sensor()


def admin_audit_days(last_day: str | None, today: dt.date) -> list[dt.date]:
    """The days to land on a tick: today, after the day before when the last tick was on it."""
    days = [today]
    if last_day is not None and last_day < today.isoformat():
        days.insert(0, dt.date.fromisoformat(last_day))
    return days


def build_slurm_admin_audit_sensor(
    interval_s: int = 300,
    name: str = "slurm_admin_audit",
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        minimum_interval_seconds=interval_s,
        asset_selection=[RAW_SLURM_SACCTMGR],
        default_status=default_status,
        description=(
            f"Lands the day's `sacctmgr -P list transactions` every {interval_s} s into "
            f"landing/{TRANSACTIONS_SOURCE}/<day>/transactions.txt and ingests the day's "
            f"{RAW_SLURM_SACCTMGR.to_user_string()} partition."
        ),
    )
    def _audit(
        context: dg.SensorEvaluationContext, slurm: SlurmAccounting, warehouse: WarehouseResource
    ) -> dg.SensorResult:
        settings = _slurm_or_skip(context, slurm)
        if isinstance(settings, dg.SensorResult):
            return settings
        now = utc_naive()
        runs = []
        for day in admin_audit_days(context.cursor, now.date()):
            landed = land_transactions(warehouse.get().landing, day, settings)
            context.log.info(f"sacctmgr transactions written to {landed}")
            runs.append(dg.RunRequest(run_key=f"{TRANSACTIONS_SOURCE}:{day}:{now:%Y%m%dT%H%M%S}",
                                      partition_key=day.isoformat(), tags={TRIGGER_TAG: name}))
        return dg.SensorResult(run_requests=runs, cursor=now.date().isoformat())

    return _audit


slurm_admin_audit_sensor = build_slurm_admin_audit_sensor()


defs = dg.Definitions(
    assets=connector_assets,
    jobs=[land_connectors_job],
    schedules=[land_connectors_schedule],
    sensors=[slurm_gpu_snapshot_sensor, slurm_admin_audit_sensor, mlflow_pull_sensor],
)
