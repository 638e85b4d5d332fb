"""Every number of the monthly review pack, as a named query on a `metrics` view.

A headline figure is one value: its SQL reads one metric view for the month ([start, end) days, or
the month's row of a monthly view) and names the catalog metric it carries, so a test can run the
same query again and the pack can footnote the definition. Each headline is queried again for the
previous month for the change (none when that month has no data). Tables are queries too; the pack
shows them and writes each to the CSV/Parquet appendix. Ratios of a month come from
metrics.pack_month (computed in SQL), never from sums in Python.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import duckdb
import polars as pl

from pipelines.coverage import Coverage, read_coverage
from pipelines.lake import release_read

PARTS = ("resources", "tasks", "governance", "improvements", "scorecard")

DAYS = "day >= ? and day < ?"
OTHER_REASONS = "OTHER"  # the rest of a top-N table of failure reasons, summed (a final_state key of its own)
# the allocator's English notes appended to a failure's reason (allocator/scheduler.py)
_BUDGET_NOTE = r"\s*\(retry budget of \d+ used\)$"
_CAP_NOTE = r"^run time cap of \d+ s reached$"


@dataclass(frozen=True)
class Figure:
    key: str
    part: str
    metric: str  # catalog metric name
    view: str
    sql: str  # parameters: the month's first day and the next month's first day (or just the first day)
    monthly: bool = False  # True: one parameter, the month's first day
    # set when `sql` reads just this column of the month's row of metrics.pack_month: collect reads that
    # row once for all such figures (not 16 queries of the view a month, each computing every month)
    pack_month_column: str | None = None

    def params(self, month: dt.date, tenant: str | None = None) -> list:
        return _params(self.monthly, month, tenant)


@dataclass(frozen=True)
class Table:
    key: str
    part: str
    view: str
    sql: str
    metrics: tuple[str, ...] = ()  # catalog metrics its columns carry
    monthly: bool = False
    # (x, y, mark) for a PNG chart; y: one column, or several drawn as lines with a legend
    chart: tuple[str, str | tuple[str, ...], str] | None = None
    title: dict[str, str] | None = None  # {"en": ..., "zh": ...}: the table's heading in the pack

    def params(self, month: dt.date, tenant: str | None = None) -> list:
        return _params(self.monthly, month, tenant)


def _params(monthly: bool, month: dt.date, tenant: str | None) -> list:
    """A query's parameters: the month's first day (monthly) or its [first, next first) days, then the
    tenant for a tenant pack's queries (their SQL puts the tenant's `?` last)."""
    days = [month] if monthly else [month, next_month(month)]
    return days if tenant is None else [*days, tenant]


def next_month(month: dt.date) -> dt.date:
    return (month.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


def previous_month(month: dt.date) -> dt.date:
    return (month.replace(day=1) - dt.timedelta(days=1)).replace(day=1)


class NoDataForMonth(ValueError):
    """The release holds no day of the month: a pack of it would report zeros as findings."""


def refuse_month_without_data(con: duckdb.DuckDBPyConnection, month: dt.date) -> None:
    """Raise NoDataForMonth unless some day of `month` has pool data (metrics.pool_daily), naming the
    days the release does hold."""
    days, first, last = con.execute(
        "select count(distinct day) filter (where day >= ? and day < ?), min(day), max(day) from metrics.pool_daily",
        [month, next_month(month)]).fetchall()[0]
    if not days:
        held = f"its data run from {first} to {last}" if first else "it holds no data yet"
        raise NoDataForMonth(f"no data for {month:%Y-%m} in release {release_read(con)}: {held}. Ingest and build "
                             f"that month first (gpupool ingest, gpupool build), or choose a month it holds.")


def _pm(key: str, part: str, metric: str, column: str) -> Figure:
    """A figure that is a column of the month's row of metrics.pack_month."""
    return Figure(key, part, metric, "pack_month", f"select {column} from metrics.pack_month where month = ?", True,
                  pack_month_column=column)


def month_sum(column: str, view: str) -> str:
    return f"select sum({column}) from metrics.{view} where {DAYS}"


# the pool's rows of metrics.failure_causes (tenant 'all') of the month
_CAUSES = (
    "select cause, attempts, failures, failure_rate_pct, gpu_hours_lost, not_user_fault_pct "
    "from metrics.failure_causes where month = ? and tenant = 'all'")


def _cause(column: str) -> str:
    return f"select {column} from ({_CAUSES}) where cause = 'all'"


# metrics.host_daily is day x host: a month's mean is the days' means weighted by their minutes with data
def _host_mean(column: str) -> str:
    return (f"select sum({column} * minutes_with_data) / nullif(sum(minutes_with_data), 0) "
            f"from metrics.host_daily where {DAYS}")


ADVICE_OUTCOME = """with m as (select cast(? as date) as month),
advice as (
  select a.rank, a.kind, a.gpu_model, a.target, a.quantity, a.unit, a.confidence,
    try_cast(a.whatif_json ->> '$.wait_p95_min.baseline' as double) * 60 as predicted_baseline_wait_p95_s,
    try_cast(a.whatif_json ->> '$.wait_p95_min.changed' as double) * 60 as predicted_wait_p95_s,
    try_cast(a.whatif_json ->> '$.pool_utilisation_pct.changed' as double) as predicted_pool_utilisation_pct,
    -- the fair judge (pipelines/capacity/review.py): this month's demand replayed with and without the advice
    a.whatif_json ->> '$.review.verdict' as review_verdict,
    try_cast(a.whatif_json ->> '$.review.applied' as boolean) as review_applied,
    try_cast(a.whatif_json ->> '$.review.key_wait_p95_min.with_change' as double) * 60 as replayed_wait_p95_with_change_s,
    try_cast(a.whatif_json ->> '$.review.key_wait_p95_min.without_change' as double) * 60
      as replayed_wait_p95_without_change_s
  from metrics.capacity_recommendations a, m where a.period_month = m.month - interval 1 month
),
gpus as (
  select gpu_model,
    max(physical_gpus) filter (where day < m.month) as physical_gpus_previous_month,
    max(physical_gpus) filter (where day >= m.month) as physical_gpus
  from metrics.pool_daily, m where day >= m.month - interval 1 month and day < m.month + interval 1 month
  group by gpu_model
),
observed as (
  select queue_wait_p95_s, pool_utilisation_pct from metrics.pack_month, m where pack_month.month = m.month
)
select a.rank, a.kind, a.target, a.quantity, a.unit, a.confidence, g.physical_gpus_previous_month, g.physical_gpus,
  a.predicted_baseline_wait_p95_s, a.predicted_wait_p95_s, o.queue_wait_p95_s,
  a.predicted_pool_utilisation_pct, o.pool_utilisation_pct, a.gpu_model, a.review_verdict, a.review_applied,
  a.replayed_wait_p95_with_change_s, a.replayed_wait_p95_without_change_s
from advice a left join gpus g using (gpu_model) left join observed o on true
order by a.rank"""

FIGURES: tuple[Figure, ...] = (
    # resources
    Figure("physical_gpus", "resources", "physical_gpus", "pool_daily",
           f"select max(gpus) from (select day, sum(physical_gpus) as gpus from metrics.pool_daily where {DAYS} group by day)"),
    _pm("capacity_gpu_hours", "resources", "capacity_gpu_hours", "capacity_gpu_hours"),
    _pm("allocated_gpu_hours", "resources", "allocated_gpu_hours", "allocated_gpu_hours"),
    _pm("allocation_rate", "resources", "allocation_rate", "allocation_rate_pct"),
    _pm("utilisation_of_allocated", "resources", "utilisation_of_allocated", "utilisation_of_allocated_pct"),
    _pm("pool_utilisation", "resources", "pool_utilisation", "pool_utilisation_pct"),
    _pm("idle_allocated_gpu_hours", "resources", "idle_allocated_gpu_hours", "idle_allocated_gpu_hours"),
    Figure("spec_gap_gpus_peak_hour", "resources", "spec_gap_gpus_peak_hour", "spec_gaps",
           f"select max(gap_gpus_peak_hour) from metrics.spec_gaps where {DAYS}"),
    Figure("host_cpu_utilisation", "resources", "host_cpu_utilisation", "host_daily",
           _host_mean("cpu_busy_pct_mean")),
    # tasks
    _pm("submissions", "tasks", "submissions", "submissions"),
    _pm("failed_jobs", "tasks", "failed_jobs", "failed_jobs"),
    _pm("failure_rate", "tasks", "failure_rate", "failure_rate_pct"),
    # percentiles over the month's jobs, with the waiting work they cannot see beside them
    _pm("queue_wait_p95", "tasks", "queue_wait_p95", "queue_wait_p95_s"),
    _pm("jobs_waiting", "tasks", "jobs_waiting", "jobs_waiting"),
    _pm("waiting_age_max", "tasks", "waiting_age_max", "waiting_age_max_s"),
    _pm("cancelled_while_queued", "tasks", "cancelled_while_queued", "cancelled_while_queued"),
    _pm("cancelled_pending_age_p95", "tasks", "cancelled_pending_age_p95", "cancelled_pending_age_p95_s"),
    _pm("run_time_p95", "tasks", "run_time_p95", "run_time_p95_s"),
    Figure("retries", "tasks", "retries", "task_daily", month_sum("retries", "task_daily")),
    Figure("retry_gpu_hours", "tasks", "retry_gpu_hours", "task_daily", month_sum("retry_gpu_hours", "task_daily")),
    _pm("checkpoint_policy_coverage", "tasks", "checkpoint_policy_coverage", "checkpoint_policy_pct"),
    Figure("attempt_failure_rate", "tasks", "attempt_failure_rate_by_cause", "failure_causes",
           _cause("failure_rate_pct"), True),
    Figure("gpu_hours_lost", "tasks", "gpu_hours_lost_by_cause", "failure_causes", _cause("gpu_hours_lost"), True),
    Figure("not_user_fault_share", "tasks", "not_user_fault_share", "failure_causes",
           _cause("not_user_fault_pct"), True),
    # checkpoints: the month's tenants' rows summed; the rate is the view's definition over the sums
    Figure("checkpoint_policy_breaches", "tasks", "checkpoint_policy_breaches", "checkpoint_policy_breaches",
           "select sum(policy_breaches) from metrics.checkpoint_policy_breaches where month = ?", True),
    Figure("checkpoint_policy_breach_rate", "tasks", "checkpoint_policy_breach_rate", "checkpoint_policy_breaches",
           "select 100.0 * sum(policy_breaches) / nullif(sum(attempts_with_time_policy), 0) "
           "from metrics.checkpoint_policy_breaches where month = ?", True),
    Figure("work_lost_gpu_hours", "tasks", "work_lost_gpu_hours", "work_lost",
           "select sum(work_lost_gpu_hours) from metrics.work_lost where month = ?", True),
    Figure("failed_attempts_without_checkpoint", "tasks", "failed_attempts_without_checkpoint", "work_lost",
           "select sum(attempts_without_checkpoint) from metrics.work_lost where month = ?", True),
    # governance
    Figure("audit_records", "governance", "audit_records", "audit_daily", month_sum("audit_records", "audit_daily")),
    Figure("permission_changes", "governance", "permission_changes", "audit_daily",
           month_sum("permission_changes", "audit_daily")),
    Figure("approvals", "governance", "approvals", "audit_daily", month_sum("approvals", "audit_daily")),
    Figure("enforcement_actions", "governance", "enforcement_actions", "enforcement_daily",
           month_sum("actions", "enforcement_daily")),
    Figure("recovered_gpu_hours", "governance", "recovered_gpu_hours", "enforcement_daily",
           month_sum("recovered_gpu_hours", "enforcement_daily")),
    # the month's applied reminders after which the job ended on its own: the catalog's ratio over the month's sums
    Figure("self_release_rate", "governance", "self_release_rate", "governance_actions",
           f"select 100.0 * sum(released_after_reminder) / nullif(sum(reminders_applied), 0) "
           f"from metrics.governance_actions where {DAYS}"),
    Figure("pool_total_cost", "governance", "pool_total_cost", "cost_attribution",
           "select max(pool_total_cost_usd) from metrics.cost_attribution where month = ?", True),
)

TABLES: tuple[Table, ...] = (
    Table("pool_by_day", "resources", "pool_daily",
          f"select day, sum(capacity_gpu_hours) as capacity_gpu_hours, sum(allocated_gpu_hours) as allocated_gpu_hours, "
          f"sum(active_gpu_hours) as active_gpu_hours from metrics.pool_daily where {DAYS} group by day order by day",
          ("capacity_gpu_hours", "allocated_gpu_hours", "active_gpu_hours"),
          chart=("day", ("capacity_gpu_hours", "allocated_gpu_hours", "active_gpu_hours"), "line"),
          title={"en": "Capacity, allocation and use by day", "zh": "每日容量、分配与使用"}),
    Table("gpu_models", "resources", "pool_daily",
          f"select gpu_model, max(physical_gpus) as physical_gpus, sum(capacity_gpu_hours) as capacity_gpu_hours, "
          f"sum(allocated_gpu_hours) as allocated_gpu_hours, max(peak_allocated_gpus) as peak_allocated_gpus "
          f"from metrics.pool_daily where {DAYS} group by gpu_model order by gpu_model",
          ("physical_gpus", "capacity_gpu_hours", "allocated_gpu_hours", "peak_allocated_gpus"),
          title={"en": "GPU models", "zh": "GPU型号"}),
    # one row per queue and tenant (a shared queue has one per tenant); percentiles over the month's jobs
    Table("queues", "resources", "queue_month",
          "select queue, tenant, submissions, jobs_started, queue_wait_p50_s, queue_wait_p95_s, jobs_waiting, "
          "waiting_age_max_s, cancelled_while_queued, cancelled_pending_age_p95_s, preemptions, requeues, "
          "allocated_gpu_hours from metrics.queue_month where month = ? order by queue, tenant",
          ("submissions", "jobs_started", "queue_wait_p50", "queue_wait_p95", "jobs_waiting", "waiting_age_max",
           "cancelled_while_queued", "cancelled_pending_age_p95", "preemptions", "requeues"), monthly=True,
          title={"en": "Queues and tenants: submissions, waits, waiting work", "zh": "队列与租户：提交、等待与排队作业"}),
    Table("quotas", "resources", "tenant_quota",
          f"select tenant, gpu_model, max(quota_gpus) as quota_gpus, sum(quota_gpu_hours) as quota_gpu_hours, "
          f"sum(allocated_gpu_hours) as allocated_gpu_hours, sum(borrowed_gpu_hours) as borrowed_gpu_hours, "
          f"sum(unused_quota_gpu_hours) as unused_quota_gpu_hours from metrics.tenant_quota where {DAYS} "
          f"group by tenant, gpu_model order by tenant, gpu_model",
          ("quota_gpu_hours", "borrowed_gpu_hours", "unused_quota_gpu_hours"),
          title={"en": "Quotas: use and borrowing", "zh": "配额：使用与借用"}),
    Table("spec_gaps", "resources", "spec_gaps",
          f"select gpu_model, share_mode, gpus_requested, max(gap_gpus_peak_hour) as gap_gpus_peak_hour, "
          f"sum(rightsizable_attempts) as rightsizable_attempts, sum(rightsizable_gpu_hours) as rightsizable_gpu_hours "
          f"from metrics.spec_gaps where {DAYS} group by all order by gap_gpus_peak_hour desc nulls last, gpu_model, share_mode, gpus_requested limit 15",
          ("spec_gap_gpus_peak_hour", "rightsizable_attempts", "rightsizable_gpu_hours"),
          title={"en": "Spec gaps: what jobs asked vs what the pool offers", "zh": "规格缺口：作业申请与资源池供给"}),
    # per host over the month: means weighted by minutes with data, the busiest day's p95, the peak memory
    Table("hosts", "resources", "host_daily",
          f"select host, max(cpus) as cpus, "
          f"sum(cpu_busy_pct_mean * minutes_with_data) / sum(minutes_with_data) as cpu_busy_pct_mean, "
          f"max(cpu_busy_pct_p95) as cpu_busy_pct_p95_max_day, "
          f"sum(memory_used_bytes_mean * minutes_with_data) / sum(minutes_with_data) / 2^30 as memory_used_gib_mean, "
          f"max(memory_used_bytes_peak) / 2^30 as memory_used_gib_peak, "
          f"sum((network_receive_bytes_per_s_mean + network_transmit_bytes_per_s_mean) * minutes_with_data) "
          f"/ sum(minutes_with_data) / 1e6 as network_mb_per_s_mean, "
          f"sum(disk_read_bytes_per_s_mean * minutes_with_data) / sum(minutes_with_data) / 1e6 as disk_read_mb_per_s_mean, "
          f"sum(disk_written_bytes_per_s_mean * minutes_with_data) / sum(minutes_with_data) / 1e6 "
          f"as disk_written_mb_per_s_mean "
          f"from metrics.host_daily where {DAYS} group by host order by cpu_busy_pct_mean desc, host limit 30",
          ("host_cpu_utilisation", "host_cpu_utilisation_p95", "host_memory_usage", "host_memory_peak",
           "host_network_receive_rate", "host_network_transmit_rate", "storage_read_rate", "storage_write_rate"),
          chart=("host", "cpu_busy_pct_mean", "bar"),
          title={"en": "Hosts: CPU, memory, network and disk", "zh": "主机：CPU、内存、网络与磁盘"}),
    Table("templates", "tasks", "task_daily",
          f"select template, sum(submissions) as submissions, sum(finished_jobs) as finished_jobs, "
          f"sum(failed_jobs) as failed_jobs, sum(retries) as retries, sum(retry_gpu_hours) as retry_gpu_hours, "
          f"sum(interruptions_without_checkpoint_policy) as interruptions_without_checkpoint_policy "
          f"from metrics.task_daily where {DAYS} group by template order by submissions desc, template",
          ("submissions", "finished_jobs", "failed_jobs", "retries", "retry_gpu_hours",
           "interruptions_without_checkpoint"),
          title={"en": "Job templates", "zh": "作业模板"}),
    Table("run_times", "tasks", "task_month",
          "select template, finished_jobs, run_time_p50_s, run_time_p95_s from metrics.task_month "
          "where month = ? order by template = 'all', template",
          ("run_time_p50", "run_time_p95", "finished_jobs"), monthly=True,
          title={"en": "Run times by template", "zh": "按模板的运行时长"}),
    # the 14 commonest reasons and the rest summed: a month has a hundred (every run-time cap is its own). A
    # reason is the scheduler's category of the failure (final_state, a key with its labels in
    # pipelines/labels.py) and the program's own message as logged; the allocator's notes on it ("(retry
    # budget of N used)", "run time cap of N s reached") are not shown as text: the first is counted
    # (failed_jobs_retries_exhausted), the second is what the TIMEOUT state says
    Table("failure_reasons", "tasks", "failure_reasons",
          f"with parsed as (select final_state, failed_jobs, allocated_gpu_hours, "
          f"coalesce(regexp_replace(regexp_replace(failure_reason, '{_BUDGET_NOTE}', ''), '{_CAP_NOTE}', ''), '') "
          f"as failure_message, coalesce(regexp_matches(failure_reason, '{_BUDGET_NOTE}'), false) as retries_exhausted "
          f"from metrics.failure_reasons where {DAYS}), "
          f"reasons as (select final_state, failure_message, sum(failed_jobs) as failed_jobs, "
          f"coalesce(sum(failed_jobs) filter (where retries_exhausted), 0) as failed_jobs_retries_exhausted, "
          f"sum(allocated_gpu_hours) as allocated_gpu_hours from parsed group by all), "
          f"ranked as (select *, row_number() over (order by failed_jobs desc, final_state, failure_message) as n "
          f"from reasons) "
          f"select if(n <= 14, final_state, '{OTHER_REASONS}') as final_state, "
          f"if(n <= 14, failure_message, '') as failure_message, sum(failed_jobs) as failed_jobs, "
          f"sum(failed_jobs_retries_exhausted) as failed_jobs_retries_exhausted, "
          f"sum(allocated_gpu_hours) as allocated_gpu_hours from ranked group by all "
          f"order by min(n) > 14, failed_jobs desc, final_state, failure_message",
          ("failures_by_reason",), chart=("final_state", "failed_jobs", "bar"),
          title={"en": "Failed jobs by reason", "zh": "按原因的失败作业"}),
    # the month's pending time by its first applicable cause; the share is the catalog's over the month's sums
    Table("wait_causes", "tasks", "wait_causes",
          f"select cause, sum(waited_hours) as waited_hours, sum(waited_gpu_hours) as waited_gpu_hours, "
          f"100.0 * sum(waited_gpu_hours) / nullif(sum(sum(waited_gpu_hours)) over (), 0) as cause_share_pct "
          f"from metrics.wait_causes where {DAYS} group by cause order by waited_gpu_hours desc, cause",
          ("waited_hours_by_cause", "waited_gpu_hours_by_cause", "wait_cause_share"),
          chart=("cause", "waited_gpu_hours", "bar"),
          title={"en": "Waits by cause", "zh": "按原因的排队等待"}),
    # every ended attempt's cause (hardware, preempted, reclaimed, capped, time limit, OOM, user code, ...)
    Table("failures_by_cause", "tasks", "failure_causes",
          f"select * from ({_CAUSES}) where failures > 0 or cause = 'all' "
          f"order by cause = 'all', failures desc, gpu_hours_lost desc, cause",
          ("attempts_by_cause", "failures_by_cause", "attempt_failure_rate_by_cause", "gpu_hours_lost_by_cause",
           "not_user_fault_share"), monthly=True,
          title={"en": "Ended attempts by cause", "zh": "按原因的结束尝试"}),
    # what the month's finished training jobs left, pool-wide: the share is the view's definition over the
    # tenants' and templates' summed jobs
    Table("artifact_status", "tasks", "artifact_status",
          "select artifact_status, cast(sum(jobs) as bigint) as jobs, "
          "100.0 * sum(jobs) / sum(sum(jobs)) over () as jobs_share_pct, "
          "cast(sum(jobs_with_checkpoint) as bigint) as jobs_with_checkpoint from metrics.artifact_status where month = ? "
          "group by artifact_status order by list_position(['registered', 'logged_only', 'none'], artifact_status)",
          ("artifact_status", "artifact_status_share"), monthly=True, chart=("artifact_status", "jobs_share_pct", "bar"),
          title={"en": "Finished training jobs by artifact status", "zh": "按产出状态的已完成训练作业"}),
    # GPU-hours since the last checkpoint (else since the start) of the month's interrupted or failed attempts
    Table("work_lost_by_cause", "tasks", "work_lost",
          "select cause, cast(sum(attempts) as bigint) as attempts, "
          "cast(sum(attempts_without_checkpoint) as bigint) as attempts_without_checkpoint, "
          "sum(work_lost_gpu_hours) as work_lost_gpu_hours, "
          "sum(work_lost_with_checkpoint_gpu_hours) as work_lost_with_checkpoint_gpu_hours, "
          "sum(work_lost_without_checkpoint_gpu_hours) as work_lost_without_checkpoint_gpu_hours "
          "from metrics.work_lost where month = ? group by cause order by work_lost_gpu_hours desc, cause",
          ("work_lost_gpu_hours", "failed_attempts_without_checkpoint"), monthly=True,
          chart=("cause", "work_lost_gpu_hours", "bar"),
          title={"en": "Work lost at interruptions, by cause", "zh": "按原因的中断损失工作量"}),
    Table("checkpoint_policy_breaches", "tasks", "checkpoint_policy_breaches",
          "select tenant, training_attempts, attempts_with_time_policy, policy_breaches, breaches_without_checkpoint, "
          "jobs_breaching, policy_breach_rate_pct from metrics.checkpoint_policy_breaches where month = ? "
          "order by policy_breaches desc, tenant",
          ("checkpoint_policy_breaches", "jobs_breaching_checkpoint_policy", "checkpoint_policy_breach_rate"),
          monthly=True,
          title={"en": "Checkpoint policy breaches by tenant", "zh": "按租户的检查点策略违规"}),
    # GPUs with hardware faults from the month's first day to its last (a repeat offender first)
    Table("repeat_offender_gpus", "tasks", "gpu_faults",
          "select host, gpu, gpu_model, is_repeat_offender, is_node_repeat_offender, hardware_faults, "
          "first_fault_at, last_fault_at, xids_seen, ecc_dbe_errors from metrics.gpu_faults "
          "where hardware_faults > 0 and last_fault_at >= ? and first_fault_at < ? "
          "order by is_repeat_offender desc, hardware_faults desc, host, gpu limit 20",
          ("gpu_hardware_faults", "repeat_offender_gpu"),
          title={"en": "GPUs with hardware faults", "zh": "出现硬件故障的GPU"}),
    # the month's drains and undrains of the gpu-health policy; mode shadow: what it would have done, nothing sent
    Table("drain_decisions", "tasks", "drain_decisions",
          f"select decided_at, action, mode, target, target_kind, outcome, fault_minutes, faulty_gpus, last_fault_at, "
          f"drains_decided, drains_applied from metrics.drain_decisions where {DAYS} "
          f"order by decided_at, target limit 50",
          ("drains_decided", "drains_applied"),
          title={"en": "Drains and undrains of the GPU-health policy", "zh": "GPU健康策略的排空与恢复"}),
    Table("audit", "governance", "audit_daily",
          f"select source, sum(audit_records) as audit_records, sum(permission_changes) as permission_changes, "
          f"sum(quota_changes) as quota_changes, sum(approvals) as approvals, sum(denied_requests) as denied_requests "
          f"from metrics.audit_daily where {DAYS} group by source order by source",
          ("audit_records", "permission_changes", "quota_changes", "approvals", "denied_requests"),
          title={"en": "Audit records by source", "zh": "按来源的审计记录"}),
    Table("cost_by_tenant", "governance", "cost_attribution",
          "select tenant, allocated_gpu_hours, allocated_cost_usd, shared_unallocated_cost_usd, total_cost_usd, "
          "cost_share_pct from metrics.cost_attribution where month = ? order by total_cost_usd desc, tenant",
          ("allocated_cost", "shared_unallocated_cost", "total_cost", "cost_share"), monthly=True,
          chart=("tenant", "total_cost_usd", "bar"),
          title={"en": "Cost by tenant", "zh": "按租户的成本"}),
    Table("enforcement", "governance", "enforcement_daily",
          f"select action_kind, decision, sum(actions) as actions, sum(gpus_released) as gpus_released, "
          f"sum(recovered_gpu_hours) as recovered_gpu_hours, sum(reused_gpu_hours) as reused_gpu_hours "
          f"from metrics.enforcement_daily where {DAYS} group by action_kind, decision order by action_kind, decision",
          ("enforcement_actions", "recovered_gpu_hours", "reused_gpu_hours"),
          title={"en": "Enforcement actions", "zh": "执行动作"}),
    # reminders the policies sent and how many were followed by the owner releasing the GPUs
    Table("reminders", "governance", "governance_actions",
          f"select policy, sum(reminders_applied) as reminders_applied, "
          f"sum(released_after_reminder) as released_after_reminder, "
          f"100.0 * sum(released_after_reminder) / nullif(sum(reminders_applied), 0) as self_release_rate_pct "
          f"from metrics.governance_actions where {DAYS} group by policy having sum(reminders_applied) > 0 "
          f"order by reminders_applied desc, policy",
          ("self_release_rate",),
          title={"en": "Reminders and self-release", "zh": "提醒与自行释放"}),
    # who carried the month's governance: every actor's audited changes and decisions by kind
    Table("responsibilities", "governance", "audit_events",
          f"select actor_role, actor, category, count(*) as audit_records from metrics.audit_events "
          f"where {DAYS} group by actor_role, actor, category order by audit_records desc, actor, category limit 40",
          ("audit_records",),
          title={"en": "Who did what", "zh": "职责与操作人"}),
    Table("governance_findings", "improvements", "governance_actions",
          # steps, not findings: a finding whose steps fall on two days is in two days' rows
          f"select policy, mode, outcome, sum(actions) as actions, "
          f"sum(recovered_gpu_hours) as recovered_gpu_hours, sum(false_positives) as false_positives "
          f"from metrics.governance_actions where {DAYS} group by policy, mode, outcome order by policy, mode, outcome",
          ("governance_actions_by_outcome", "recovered_gpu_hours"),
          title={"en": "Governance policies' actions by outcome", "zh": "治理策略动作（按结果）"}),
    Table("capacity_recommendations", "improvements", "capacity_recommendations",
          "select rank, kind, gpu_model, quantity, unit, recommendation, recommendation_zh, confidence, "
          "impact_gpu_hours, try_cast(whatif_json ->> '$.confirms' as boolean) as whatif_confirms, "
          "try_cast(whatif_json ->> '$.baseline_within_tolerance' as boolean) as whatif_within_tolerance, "
          # the what-if search's smallest sufficient size, in the advice's unit and GPU model (the columns beside
          # it, labelled in either language); the search's own words for it are English
          "try_cast(whatif_json ->> '$.search.smallest_sufficient' as integer) as smallest_sufficient_quantity "
          "from metrics.capacity_recommendations where period_month = ? order by rank",
          ("capacity_recommendations",), monthly=True,
          title={"en": "Capacity advice of the month", "zh": "本月容量建议"}),
    # last month's advice (with its what-if prediction) against this month's outcome: the model's GPUs
    # (was it applied) and the pool's observed wait p95 and utilisation (the what-if predicts pool-wide ones)
    Table("advice_outcome", "improvements", "capacity_recommendations", ADVICE_OUTCOME,
          ("capacity_recommendations", "physical_gpus", "queue_wait_p95", "pool_utilisation"), monthly=True,
          title={"en": "Last month's advice against this month's outcome", "zh": "上月建议与本月结果对比"}),
    Table("pooling_scorecard", "scorecard", "pooling_scorecard",
          "select stage, criterion, score_pct, first_day, last_day from metrics.pooling_scorecard "
          "where month = ? order by stage_order",
          ("pooling_stage_score",), monthly=True, chart=("stage", "score_pct", "bar"),
          title={"en": "Pooling-stage scorecard", "zh": "资源池化阶段评分"}),
)


@dataclass(frozen=True)
class PackSpec:
    """What one kind of pack reads: the pool's pack (POOL) or a tenant's (pipelines/pack/tenant.py,
    whose queries take the tenant as their last parameter)."""

    kind: str  # "pool" | "tenant"
    parts: tuple[str, ...]
    figures: tuple[Figure, ...]
    tables: tuple[Table, ...]
    part_titles: dict[str, dict[str, str]]  # part -> {"en": ..., "zh": ...}

    def metrics(self) -> list[str]:
        """The catalog metrics its figures and tables carry, in the order they first appear."""
        return list(dict.fromkeys([f.metric for f in self.figures] + [m for t in self.tables for m in t.metrics]))


POOL = PackSpec("pool", PARTS, FIGURES, TABLES, part_titles={
    "resources": {"en": "1. Resources", "zh": "一、资源"}, "tasks": {"en": "2. Tasks", "zh": "二、任务"},
    "governance": {"en": "3. Governance", "zh": "三、治理"},
    "improvements": {"en": "4. Improvements for next month", "zh": "四、下月改进"},
    # {month}: the render writes the pack's month in, so the scorecard's period is on its heading
    "scorecard": {"en": "5. Pooling-stage scorecard, {month}", "zh": "五、资源池化阶段评分（{month}）"},
})


@dataclass
class Figures:
    month: dt.date
    catalog_version: str
    release_id: int  # the warehouse release read: `gpupool pack --as-of` reads it again
    spec: PackSpec = POOL
    tenant: str | None = None  # a tenant pack's tenant
    values: dict[str, float | None] = field(default_factory=dict)
    previous: dict[str, float | None] = field(default_factory=dict)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    catalog: dict[str, dict] = field(default_factory=dict)  # every catalog metric: column labels, glossary
    answers: list = field(default_factory=list)  # page 1: pipelines.pack.answers.Answer
    decisions: list = field(default_factory=list)  # page 1: pipelines.pack.answers.Decision
    # the month's days with data per kind of source (pipelines/coverage.py); None: not read (a test's figures)
    coverage: Coverage | None = None


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> pl.DataFrame:
    frame = pl.from_arrow(con.sql(sql, params=params).to_arrow_table())
    return frame.with_columns(pl.col(pl.Decimal).cast(pl.Float64))


def figure_value(con: duckdb.DuckDBPyConnection, figure: Figure, month: dt.date,
                 tenant: str | None = None) -> float | None:
    """The figure's value for a month (None when the view has no row for it)."""
    rows = con.sql(figure.sql, params=figure.params(month, tenant)).fetchall()
    return _number(rows[0][0] if rows else None)


def _number(value: object) -> float | None:
    return None if value is None else float(value)


def _pack_month_row(con: duckdb.DuckDBPyConnection, month: dt.date) -> dict[str, object]:
    """metrics.pack_month's row for the month by column (empty when it has none)."""
    relation = con.sql("select * from metrics.pack_month where month = ?", params=[month])
    rows = relation.fetchall()
    return dict(zip(relation.columns, rows[0], strict=True)) if rows else {}


def table_frame(con: duckdb.DuckDBPyConnection, table: Table, month: dt.date,
                tenant: str | None = None) -> pl.DataFrame:
    return _frame(con, table.sql, table.params(month, tenant))


def collect(con: duckdb.DuckDBPyConnection, month: dt.date, spec: PackSpec = POOL,
            tenant: str | None = None) -> Figures:
    """Every figure and table of `spec`'s pack for `month` (its first day; a tenant pack's for `tenant`)
    and the previous month's figures."""
    if (spec.kind == "tenant") != (tenant is not None):
        raise ValueError(f"a {spec.kind} pack {'needs' if tenant is None else 'takes no'} tenant")
    month = month.replace(day=1)
    version = con.sql("select catalog_version from metrics.catalog_version").fetchall()[0][0]
    out = Figures(month=month, catalog_version=version, release_id=release_read(con), spec=spec, tenant=tenant,
                  coverage=read_coverage(con, month, next_month(month)))
    prev = previous_month(month)
    pack_month = ({m: _pack_month_row(con, m) for m in (month, prev)}
                  if any(f.pack_month_column for f in spec.figures) else {})
    for f in spec.figures:
        if f.pack_month_column:  # the same value as figure_value's query of the column, read once
            out.values[f.key] = _number(pack_month[month].get(f.pack_month_column))
            out.previous[f.key] = _number(pack_month[prev].get(f.pack_month_column))
        else:
            out.values[f.key] = figure_value(con, f, month, tenant)
            out.previous[f.key] = figure_value(con, f, prev, tenant)
    for t in spec.tables:
        out.tables[t.key] = table_frame(con, t, month, tenant)
    names = sorted(spec.metrics())
    every = _frame(con, "select * from metrics.catalog order by metric_name", [])
    out.catalog = {r["metric_name"]: r for r in every.iter_rows(named=True)}
    missing = set(names) - set(out.catalog)
    if missing:
        raise KeyError(f"review pack: metrics {sorted(missing)} are not in catalog {version}")
    return out
