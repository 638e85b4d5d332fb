"""The dashboards' only door to the warehouse: read-only, cached queries on the `metrics` views, and on
the two tables of configuration the pipeline keeps for them (governance.policy_exemptions, loaded by
every model build, and ops.review_packs, one row per pack built).

Connections come from the analysts' factory (Warehouse.analyst_connect, pipelines/sandbox.py): they
read the warehouse and the lake its views read, and no other file; queries pass the read-only
statement allow-list first.

Pages never open DuckDB themselves, write no query and never compute a metric: they ask for rows of
a metric view (`view`, with a filter's WHERE fragment) or call one of the named queries below (a
view's rows summed over the filters, a filter's choices, the exemptions, the packs), then draw
them. WHERE fragments and their parameters come from dashboards/filters.py (Filters.clause, where).
Connections are read-only and short, each on the release published last: writers never hold that
file (they publish a new one), so a page never waits on the pipeline.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import streamlit as st

from pipelines.clock import utc_naive
from pipelines.contracts import EXEMPTIONS_CHECK, EXEMPTIONS_TABLE, REVIEW_PACKS_TABLE
from pipelines.paths import default_home
from pipelines.sandbox import QueryLimitExceeded, check_read_only, guarded
from pipelines.warehouse import Warehouse

TTL_S = int(os.environ.get("GPUPOOL_DASHBOARD_TTL_S", "").strip() or 60)
# DuckDB's memory for one page's query (it spills beyond, up to GPUPOOL_SQL_TEMP_LIMIT, and stops at
# GPUPOOL_SQL_TIMEOUT_S: pipelines/sandbox.py).
MEMORY_LIMIT = "2GB"
# The most rows a query may bring back to a page, fetched BATCH_ROWS at a time: a chart or a table of more
# is a query missing its filter or its LIMIT, and it stops with QueryLimitExceeded instead of filling memory.
MAX_ROWS = 1_000_000
BATCH_ROWS = 65_536


# The data are stale when the latest telemetry the release holds is older than this (GPUPOOL_DASHBOARD_STALE_MIN
# minutes): the live chain lands and publishes every few minutes, the daily chain once a day.
STALE_AFTER = dt.timedelta(minutes=int(os.environ.get("GPUPOOL_DASHBOARD_STALE_MIN", "").strip() or 30))


@dataclass(frozen=True)
class AsOf:
    """What every page reads: the release, when it was published, and its data's end."""

    release: int
    published_at: dt.datetime
    telemetry_at: dt.datetime | None  # the latest minute any GPU reported (metrics.gpu_status); None: none yet

    def stale_by(self, now: dt.datetime) -> dt.timedelta | None:
        """How old the data are when older than STALE_AFTER (no telemetry at all is stale), else None."""
        age = now - (self.telemetry_at or self.published_at)
        return age if self.telemetry_at is None or age > STALE_AFTER else None


class WarehouseMissing(RuntimeError):
    """No warehouse file at the configured home."""


home = default_home  # $GPUPOOL_HOME or ./.gpupool: pipelines.paths owns where the home is


def db_path() -> Path:
    return home() / "warehouse.duckdb"


def _connect() -> duckdb.DuckDBPyConnection:
    """The latest published release, sandboxed. Writers never hold it (they publish a new file), so
    there is nothing to wait for: each query opens whatever release is current."""
    path = db_path()
    if not path.exists():
        raise WarehouseMissing(f"no warehouse at {path}: run `gpupool demo` (or ingest data) first")
    return Warehouse(home()).analyst_connect(memory_limit=MEMORY_LIMIT)


def query(sql: str, params: tuple = ()) -> pl.DataFrame:
    """Rows of a read-only query, cached per release, query and parameters for TTL_S seconds at most:
    a page opened after a publish reads the new release at once, not after the cache expires."""
    path = db_path()
    return _query(str(path), _release_key(path), sql, params)


def _release_key(path: Path) -> tuple[int, int] | None:
    """Which release `path` is: every publish links a new file in its place (pipelines/warehouse.py)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None  # _connect says so
    return stat.st_ino, stat.st_mtime_ns


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _query(path: str, release: tuple[int, int] | None, sql: str, params: tuple) -> pl.DataFrame:
    check_read_only(sql)  # the pages' SQL is ours; a second line of defence all the same
    con = _connect()
    try:
        with guarded(con, memory_knob="MEMORY_LIMIT in dashboards/data.py"):  # the statement timeout, limits' errors
            reader = con.sql(sql, params=list(params)).to_arrow_reader(BATCH_ROWS)  # streams: DuckDB runs as it is read
            batches, rows = [], 0
            for batch in reader:
                rows += batch.num_rows
                if rows > MAX_ROWS:
                    reader.close()
                    raise QueryLimitExceeded(f"a dashboard query returned more than {MAX_ROWS:,} rows (MAX_ROWS in "
                                             f"dashboards/data.py): it needs a narrower filter or a LIMIT ({sql[:80]}...)")
                batches.append(batch)
        frame = pl.from_arrow(pa.Table.from_batches(batches, schema=reader.schema))
        # DuckDB's sums of integers are DECIMAL; charts and number formats want floats
        return frame.with_columns(pl.col(pl.Decimal).cast(pl.Float64))
    finally:
        con.close()


def view(name: str, where: str = "", params: tuple = (), order: str = "", columns: str = "*") -> pl.DataFrame:
    """Rows of metrics.<name>; `where`/`order` are SQL fragments with ? parameters."""
    if not name.isidentifier():
        raise ValueError(f"view {name!r}: not a view name")
    sql = f"select {columns} from metrics.{name}"
    if where:
        sql += f" where {where}"
    if order:
        sql += f" order by {order}"
    return query(sql, params)


def catalog() -> pl.DataFrame:
    """The metric catalog (metrics.catalog): definitions, formulas, units, English and Chinese labels."""
    return query("select * from metrics.catalog order by metric_group, metric_name")


def metric(column: str, view_name: str) -> dict | None:
    """The catalog entry behind a view's column (for the definition one click away)."""
    rows = catalog().filter((pl.col("view_name") == f"metrics.{view_name}") & (pl.col("column_name") == column))
    if rows.is_empty():
        rows = catalog().filter(pl.col("also_in").str.contains(f"metrics.{view_name}.{column}", literal=True))
    return rows.row(0, named=True) if rows.height else None


def metric_of_column(column: str) -> dict | None:
    """The catalog entry of a column of this name in any view (the metric named like it first): the label
    and unit of a figure shown outside its own view (a named query's sum, a table of evidence)."""
    rows = catalog().filter(pl.col("column_name") == column).sort(pl.col("metric_name") != column)
    return rows.row(0, named=True) if rows.height else None


def as_of() -> AsOf:
    """The release the pages read (lake.release) and the latest telemetry in it (metrics.gpu_status)."""
    release, published_at, telemetry_at = query(  # one query: one open of the release per page
        "select release_id, created_at, (select max(last_telemetry_at) from metrics.gpu_status) from lake.release").row(0)
    return AsOf(release=int(release), published_at=published_at, telemetry_at=telemetry_at)


def bounds() -> tuple | None:
    """First and last day with pool data (metrics.pool_daily), or None when the warehouse is empty."""
    row = query("select min(day) as first, max(day) as last from metrics.pool_daily").row(0)
    return None if row[0] is None else row


# -- filters' choices --------------------------------------------------------------------------------
def tenants() -> list[str]:
    """Every tenant with a queue (metrics.queue_rules)."""
    return [v for v in query("select distinct tenant from metrics.queue_rules order by 1")[:, 0].to_list()
            if v is not None]


def queues(tenant: str | None) -> list[str]:
    """Every queue (of `tenant`, when given) in metrics.queue_rules."""
    rows = query("select distinct queue from metrics.queue_rules where ? is null or tenant = ? order by 1",
                 (tenant, tenant))[:, 0].to_list()
    return [q for q in rows if q]


def gpu_models() -> list[str]:
    """Every GPU model of the inventory (metrics.gpu_inventory)."""
    return [v for v in query("select distinct gpu_model from metrics.gpu_inventory order by 1")[:, 0].to_list()
            if v is not None]


# -- Pool ----------------------------------------------------------------------------------------------
def scorecard(end) -> pl.DataFrame:
    """metrics.pooling_scorecard of the month of `end`, else of the latest scored month, by stage."""
    return view("pooling_scorecard",
                "month = coalesce((select max(month) from metrics.pooling_scorecard "
                "where month <= cast(date_trunc('month', cast(? as date)) as date)), "
                "(select max(month) from metrics.pooling_scorecard))",
                (end,), order="stage_order")


@dataclass(frozen=True)
class Targets:
    """What good looks like where the pool states it: the full-score thresholds of the pooling scorecard
    (models/metrics/pooling_scorecard.sql), None while no month is scored."""

    utilisation_pct: float | None  # utilisation of allocated GPUs, percent
    wait_p95_s: float | None  # queue wait p95, seconds

    @property
    def wait_p95_min(self) -> float | None:
        return None if self.wait_p95_s is None else self.wait_p95_s / 60


def targets() -> Targets:
    """The pool's targets as metrics.pooling_scorecard carries them on its latest month's rows (the same
    on every month: the thresholds are the SQL's); both None on a warehouse with no scored month."""
    row = query("select max(utilisation_target_pct) as utilisation_pct, max(wait_p95_target_s) as wait_p95_s "
                "from metrics.pooling_scorecard where month = (select max(month) from metrics.pooling_scorecard)")
    return Targets(**row.row(0, named=True))


# -- Queues --------------------------------------------------------------------------------------------
def queue_interruptions(where: str, params: tuple) -> pl.DataFrame:
    """Preemptions and requeues of metrics.queue_daily summed over the rows `where` selects (one row)."""
    return query("select sum(preemptions) as preemptions, sum(requeues) as requeues "
                 f"from metrics.queue_daily where {where}", params)


def queue_interruptions_daily(where: str, params: tuple) -> pl.DataFrame:
    """Preemptions and requeues of metrics.queue_daily per day."""
    return query("select day, sum(preemptions) as preemptions, sum(requeues) as requeues "
                 f"from metrics.queue_daily where {where} group by day order by day", params)


def queue_interruptions_per_queue(where: str, params: tuple) -> pl.DataFrame:
    """Admissions, preemptions and requeues of metrics.queue_daily per queue and tenant, most preempted first."""
    return query("select queue, tenant, sum(admissions) as admissions, sum(preemptions) as preemptions, "
                 "sum(requeues) as requeues from metrics.queue_daily "
                 f"where {where} group by queue, tenant order by preemptions desc, queue", params)


def waited_by_cause(where: str, params: tuple) -> pl.DataFrame:
    """Waited GPU-hours of metrics.wait_causes per day and cause."""
    return query("select day, cause, sum(waited_gpu_hours) as waited_gpu_hours from metrics.wait_causes "
                 f"where {where} group by day, cause order by day, cause", params)


# -- Tenants -------------------------------------------------------------------------------------------
COST_MONTHS = "month between date_trunc('month', cast(? as date)) and ?"  # the months a period touches


def tenant_costs(start, end, where: str, params: tuple) -> pl.DataFrame:
    """metrics.cost_attribution's rows (`where` selects tenants) of the months from `start`'s to `end`."""
    return view("cost_attribution", f"({COST_MONTHS}) and ({where or 'true'})", (start, end, *params),
                order="month, tenant",
                columns="month, tenant, allocated_gpu_hours, allocated_cost_usd, shared_unallocated_cost_usd, "
                        "total_cost_usd, cost_share_pct, unpriced_gpu_hours")


def pool_costs(start, end) -> pl.DataFrame:
    """The pool's total cost and capacity per month from `start`'s month to `end` (metrics.cost_attribution
    repeats them on every tenant's row: one value per month)."""
    return query("select month, any_value(pool_total_cost_usd) as pool_total_cost_usd, "
                 "any_value(pool_capacity_gpu_hours) as pool_capacity_gpu_hours "
                 f"from metrics.cost_attribution where {COST_MONTHS} group by month order by month", (start, end))


def pool_task_mix(start, end) -> pl.DataFrame:
    """Submissions and allocated GPU-hours of metrics.task_daily per day and template, all tenants."""
    return query("select day, template, sum(submissions) as submissions, "
                 "sum(allocated_gpu_hours) as allocated_gpu_hours from metrics.task_daily "
                 "where cast(day as date) between ? and ? group by day, template order by day, template",
                 (start, end))


# -- Idle and reclaim ----------------------------------------------------------------------------------
def idle_by_tenant(where: str, params: tuple) -> pl.DataFrame:
    """Idle allocated GPU-hours of metrics.tenant_daily per day and tenant."""
    return query("select day, tenant, sum(idle_allocated_gpu_hours) as idle_allocated_gpu_hours "
                 f"from metrics.tenant_daily where {where} group by day, tenant order by day, tenant", params)


def governance_steps_daily(where: str, params: tuple) -> pl.DataFrame:
    """Governance steps of metrics.governance_actions per day and outcome."""
    return query("select day, outcome, sum(actions) as actions from metrics.governance_actions "
                 f"where {where} group by day, outcome order by day", params)


def governance_steps_by_policy(where: str, params: tuple) -> pl.DataFrame:
    """Governance steps of metrics.governance_actions per policy, mode and outcome, with their counts."""
    return query(
        "select policy, mode, outcome, sum(actions) as actions, sum(applied) as applied, sum(refused) as refused, "
        "sum(exempt) as exempt, sum(rate_limited) as rate_limited, sum(shadow) as shadow, "
        "sum(recommended) as recommended, sum(dropped) as dropped, sum(queued) as queued "
        f"from metrics.governance_actions where {where} group by all order by policy, mode, outcome", params)


def action_kinds() -> list[str]:
    """Every action kind in metrics.enforcement_actions."""
    return query("select distinct action_kind from metrics.enforcement_actions order by 1")[:, 0].to_list()


def reclaimed_daily(where: str, params: tuple) -> pl.DataFrame:
    """Recovered and reused GPU-hours of the reclaims in metrics.reclaim_ledger per day."""
    return query(
        "select day, sum(recovered_gpu_hours) as recovered_gpu_hours, sum(reused_gpu_hours) as reused_gpu_hours "
        f"from metrics.reclaim_ledger where ({where}) and reclaimed_at is not null group by day order by day",
        params)


# -- Jobs ----------------------------------------------------------------------------------------------
def failure_reasons_top(where: str, params: tuple, limit: int) -> pl.DataFrame:
    """The `limit` failure reasons of metrics.failure_reasons with the most failed jobs."""
    return query(
        "select failure_reason, final_state, sum(failed_jobs) as failed_jobs, "
        "sum(allocated_gpu_hours) as allocated_gpu_hours from metrics.failure_reasons "
        f"where {where} group by failure_reason, final_state order by failed_jobs desc limit {int(limit)}", params)


def failed_gpu_hours_daily(where: str, params: tuple) -> pl.DataFrame:
    """GPU-hours of failed jobs (metrics.failure_reasons) per day and final state."""
    return query(
        "select day, final_state, sum(allocated_gpu_hours) as allocated_gpu_hours from metrics.failure_reasons "
        f"where {where} group by day, final_state order by day", params)


def retries_daily(where: str, params: tuple) -> pl.DataFrame:
    """Retries and the GPU-hours they burned (metrics.task_daily) per day and template."""
    return query(
        "select day, template, sum(retries) as retries, sum(retry_gpu_hours) as retry_gpu_hours, "
        "sum(interrupted_gpu_hours) as interrupted_gpu_hours from metrics.task_daily "
        f"where {where} group by day, template order by day, template", params)


def rightsizable_daily(where: str, params: tuple) -> pl.DataFrame:
    """Rightsizable GPU-hours of metrics.spec_gaps per day and GPU model."""
    return query("select day, gpu_model, sum(rightsizable_gpu_hours) as rightsizable_gpu_hours "
                 f"from metrics.spec_gaps where {where} group by day, gpu_model order by day", params)


def rightsizable_shapes(where: str, params: tuple) -> pl.DataFrame:
    """The request shapes of metrics.spec_gaps with rightsizable attempts, most GPU-hours first."""
    return query(
        "select gpu_model, share_mode, mig_profile, gpus_requested, sum(attempts_measured) as attempts_measured, "
        "sum(rightsizable_attempts) as rightsizable_attempts, sum(rightsizable_to_mig_slice) as to_mig_slice, "
        "sum(rightsizable_to_smaller_model) as to_smaller_model, sum(rightsizable_to_fewer_gpus) as to_fewer_gpus, "
        "sum(rightsizable_gpu_hours) as rightsizable_gpu_hours from metrics.spec_gaps "
        f"where {where} group by all having sum(rightsizable_attempts) > 0 order by rightsizable_gpu_hours desc",
        params)


def checkpoint_breach_totals(start, end, where: str, params: tuple) -> dict:
    """metrics.checkpoint_policy_breaches of the months from `start`'s to `end`, summed over the tenants
    `where` selects (one row, as a dict): breaches, jobs breaching, and the rate: the view's per-tenant
    rates weighted by their denominators (attempts with a time policy), its definition over the sums."""
    return query(
        "select cast(coalesce(sum(policy_breaches), 0) as bigint) as policy_breaches, "
        "cast(coalesce(sum(jobs_breaching), 0) as bigint) as jobs_breaching, "
        "sum(policy_breach_rate_pct * attempts_with_time_policy) / nullif(sum(attempts_with_time_policy), 0) "
        "as policy_breach_rate_pct from metrics.checkpoint_policy_breaches "
        f"where ({COST_MONTHS}) and ({where or 'true'})", (start, end, *params)).row(0, named=True)


def checkpoint_breach_offenders(start, end, where: str, params: tuple) -> pl.DataFrame:
    """metrics.checkpoint_policy_breaches' own rows (month x tenant) of the months from `start`'s to `end`
    with a breach, the most breaches first."""
    return view("checkpoint_policy_breaches", f"({COST_MONTHS}) and ({where or 'true'}) and policy_breaches > 0",
                (start, end, *params), order="policy_breaches desc, policy_breach_rate_pct desc, month, tenant",
                columns="month, tenant, policy_breaches, jobs_breaching, breaches_without_checkpoint, "
                        "attempts_with_time_policy, policy_breach_rate_pct")


def work_lost_by_cause(start, end, where: str, params: tuple) -> pl.DataFrame:
    """metrics.work_lost of the months from `start`'s to `end`, summed over the rows `where` selects,
    per cause: attempts and GPU-hours lost with and without a checkpoint, the most lost first."""
    return query(
        "select cause, cast(sum(attempts) as bigint) as attempts, "
        "cast(sum(attempts_without_checkpoint) as bigint) as attempts_without_checkpoint, "
        "sum(work_lost_gpu_hours) as work_lost_gpu_hours, "
        "sum(work_lost_with_checkpoint_gpu_hours) as work_lost_with_checkpoint_gpu_hours, "
        "sum(work_lost_without_checkpoint_gpu_hours) as work_lost_without_checkpoint_gpu_hours "
        f"from metrics.work_lost where ({COST_MONTHS}) and ({where or 'true'}) "
        "group by cause order by work_lost_gpu_hours desc, cause", (start, end, *params))


def artifact_status_by_tenant(start, end, where: str, params: tuple) -> pl.DataFrame:
    """Finished training jobs of metrics.artifact_status of the months from `start`'s to `end`, summed
    per tenant and artifact status (the rows `where` selects)."""
    return query(
        "select tenant, artifact_status, cast(sum(jobs) as bigint) as jobs, "
        "cast(sum(jobs_with_checkpoint) as bigint) as jobs_with_checkpoint "
        f"from metrics.artifact_status where ({COST_MONTHS}) and ({where or 'true'}) "
        "group by tenant, artifact_status order by tenant, artifact_status", (start, end, *params))


def stalest_checkpoints(where: str, params: tuple, limit: int) -> pl.DataFrame:
    """The `limit` training attempts running at the data's end with the oldest checkpoint: each one's
    latest row of metrics.checkpoint_age (its age now), the rows `where` selects."""
    return query(
        "select job_id, attempt, tenant, queue, gpu_model, gpus, checkpoint_policy, checkpoint_interval_s, "
        "last_ok_checkpoint_at, checkpoint_age_s, is_checkpoint_overdue, measured_at from metrics.checkpoint_age "
        f"where is_running and ({where or 'true'}) "
        "qualify row_number() over (partition by source, job_id, attempt order by hour_at desc) = 1 "
        f"order by checkpoint_age_s desc, job_id limit {int(limit)}", params)


# -- Health and failures -------------------------------------------------------------------------------
def failure_causes(start, end, where: str, params: tuple) -> pl.DataFrame:
    """metrics.failure_causes of the months from `start`'s to `end` (the view is monthly), summed over
    the tenants `where` selects, per cause (cause 'all' first). Counts and GPU-hours lost add up; the
    two rates are the view's own per-tenant rates weighted by their denominators (the tenant's ended
    attempts, the cause's failures): the same ratio over the summed counts, with the view's definition."""
    return query(
        "with rows as (select * from metrics.failure_causes "
        f"where tenant <> 'all' and ({COST_MONTHS}) and ({where or 'true'})), "
        "ended as (select month, tenant, attempts as ended_attempts from rows where cause = 'all') "
        "select cause, cast(sum(attempts) as bigint) as attempts, cast(sum(failures) as bigint) as failures, "
        "sum(failure_rate_pct * ended_attempts) / nullif(sum(ended_attempts), 0) as failure_rate_pct, "
        "sum(gpu_hours_lost) as gpu_hours_lost, "
        "sum(not_user_fault_pct * failures) / nullif(sum(failures), 0) as not_user_fault_pct "
        "from rows join ended using (month, tenant) group by cause "
        "order by cause = 'all' desc, failures desc, gpu_hours_lost desc, cause", (start, end, *params))


def failure_causes_per_tenant(start, end, where: str, params: tuple) -> pl.DataFrame:
    """metrics.failure_causes' own rows (month x tenant x cause) of the months from `start`'s to `end`
    that had failures, with each month and tenant's `all` row."""
    return view("failure_causes", f"tenant <> 'all' and ({COST_MONTHS}) and ({where or 'true'}) "
                "and (failures > 0 or cause = 'all')",
                (start, end, *params), order="month, tenant, cause = 'all' desc, failures desc, cause",
                columns="month, tenant, cause, attempts, failures, failure_rate_pct, gpu_hours_lost, "
                        "not_user_fault_pct")


def gpu_fault_counts(where: str, params: tuple) -> pl.DataFrame:
    """How many GPUs of metrics.gpu_faults had a hardware fault, were repeat offenders, and on how many
    hosts the node was a repeat offender (one row)."""
    return query("select count(*) filter (where hardware_faults > 0) as gpus_with_faults, "
                 "count(*) filter (where is_repeat_offender) as repeat_offender_gpus, "
                 "count(distinct host) filter (where is_node_repeat_offender) as repeat_offender_nodes "
                 f"from metrics.gpu_faults where {where}", params)


def host_measure_days(column: str, where: str, params: tuple, top: int) -> pl.DataFrame:
    """One metrics.host_daily column per day and host, for the `top` hosts with its highest daily value
    in the rows `where` selects (a heatmap stays readable on a large pool)."""
    if not column.isidentifier():
        raise ValueError(f"host_daily column {column!r}: not a column name")
    return query(
        f"with rows as (select day, host, {column} as value from metrics.host_daily where {where}), "
        f"top as (select host from rows group by host order by max(value) desc nulls last, host limit {int(top)}) "
        "select day, host, value from rows where host in (select host from top) order by day, host", params)


def drain_counts(where: str, params: tuple) -> dict:
    """metrics.drain_decisions over the rows `where` selects: drains decided and applied (the catalog's
    sums), and the drains decided in shadow (one row, as a dict)."""
    return query("select cast(coalesce(sum(drains_decided), 0) as bigint) as drains_decided, "
                 "cast(coalesce(sum(drains_applied), 0) as bigint) as drains_applied, "
                 "count(*) filter (where action = 'drain' and mode = 'shadow') as shadow_drains "
                 f"from metrics.drain_decisions where {where}", params).row(0, named=True)


def hosts_known(where: str, params: tuple) -> int:
    """How many hosts metrics.host_daily has in the rows `where` selects."""
    return query(f"select count(distinct host) from metrics.host_daily where {where}", params).item()


# -- Capacity ------------------------------------------------------------------------------------------
def recommendation_months() -> pl.DataFrame:
    """The months with capacity recommendations, newest first."""
    return query("select distinct period_month from metrics.capacity_recommendations order by 1 desc")


# -- Audit ---------------------------------------------------------------------------------------------
AUDIT_SEARCHED = ("actor", "actor_role", "action", "object_kind", "object_namespace", "object_name", "reason",
                  "decision", "request_id")


def audit_records_known() -> int:
    """How many records metrics.audit_events holds in all."""
    return query("select count(*) from metrics.audit_events").item()


def audit_records(where: str, params: tuple, *, namespace: str | None, category: str | None, search: str,
                  columns: Sequence[str], limit: int) -> tuple[int, pl.DataFrame]:
    """(how many records of metrics.audit_events match, the latest `limit` of them): `where` and, when
    given, the object's namespace, the category and a text searched for in AUDIT_SEARCHED (any case)."""
    if namespace:
        where += " and object_namespace = ?"
        params += (namespace,)
    if category:
        where += " and category = ?"
        params += (category,)
    if search.strip():
        where += f" and concat_ws(' ', {', '.join(AUDIT_SEARCHED)}) ilike ?"
        params += (f"%{search.strip()}%",)
    total = query(f"select count(*) from metrics.audit_events where {where}", params).item()
    rows = query(f"select {', '.join(columns)} from metrics.audit_events "
                 f"where {where} order by occurred_at desc, audit_id limit {int(limit)}", params)
    return total, rows


# the schedulers' own admin changes: Slurm's sacctmgr transactions, Kueue's quota objects in Kubernetes audit
SCHEDULER_ADMIN = ("(source = 'slurm' and api_version = 'slurm/sacctmgr') or (source = 'k8s' "
                   "and category = 'quota_change' and lower(object_kind) in ('clusterqueues', 'resourceflavors'))")


def scheduler_admin_changes(where: str, params: tuple, *, namespace: str | None, limit: int) -> tuple[int, pl.DataFrame]:
    """(how many, the latest `limit`) of metrics.audit_events' scheduler admin changes (SCHEDULER_ADMIN)
    that `where` and, when given, the object's namespace select."""
    if namespace:
        where += " and object_namespace = ?"
        params += (namespace,)
    where = f"({where}) and ({SCHEDULER_ADMIN})"
    total = query(f"select count(*) from metrics.audit_events where {where}", params).item()
    rows = query("select occurred_at, source, actor, category, action, object_kind, object_namespace, object_name, "
                 "coalesce(after_json, before_json) as changed, audit_id from metrics.audit_events "
                 f"where {where} order by occurred_at desc, audit_id limit {int(limit)}", params)
    return total, rows


# -- configuration the pipeline loads: exemptions, packs -------------------------------------------------
def exemptions(now: dt.datetime | None = None) -> pl.DataFrame:
    """Every policy exemption the last model build loaded (governance.policy_exemptions), the latest
    expiry first, with whether it has expired and the days left against `now` (default: the clock,
    UTC): presentation of the entries' expiry, not a metric."""
    rows = query("select tenant, policy, queue, job_id, reason, granted_by, expires_at "
                 f"from {EXEMPTIONS_TABLE} order by expires_at desc, tenant, policy, queue, job_id")
    now = now or utc_naive()
    return rows.with_columns(
        is_expired=pl.col("expires_at") <= now,
        days_left=((pl.col("expires_at") - now).dt.total_seconds().clip(lower_bound=0) / 86400).round(1))


def exemptions_problem() -> str | None:
    """Why the exemptions file did not load at the last build (the rows shown are the last loaded),
    from its check in metrics.check_results; None when it loaded."""
    rows = query("select metadata_json from metrics.check_results where check_name = ? and is_failed",
                 (EXEMPTIONS_CHECK,))
    return json.loads(rows.item()).get("error") if rows.height else None


def review_packs(tenant_scope: str | None) -> pl.DataFrame:
    """The review packs a user may open (ops.review_packs), newest first; paths are relative to the home.
    `tenant_scope` (auth.tenant_scope): None, an operator's, lists every pack, the pool's and each
    tenant's; a tenant's name lists only that tenant's packs (never the pool's nor another tenant's),
    filtered here, in the query, so that no page can show more."""
    columns = "month, version, lang, catalog_version, built_at, html_path, pdf_path, tenant"
    if tenant_scope is None:
        return query(f"select {columns} from {REVIEW_PACKS_TABLE} order by built_at desc, version desc")
    return query(f"select {columns} from {REVIEW_PACKS_TABLE} where tenant = ? order by built_at desc, version desc",
                 (tenant_scope,))
