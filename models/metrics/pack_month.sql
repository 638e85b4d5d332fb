-- The monthly review pack's pool-wide ratios, one row per UTC calendar month, computed here in SQL
-- from the daily metric views' numerators and denominators (never from rounded daily ratios and
-- never in Python), with the same definitions as the catalog's daily metrics.
with pool as (
  select
    cast(date_trunc('month', day) as date) as month,
    min(day) as first_day,
    max(day) as last_day,
    count(distinct day) as days,
    sum(capacity_gpu_hours) as capacity_gpu_hours,
    sum(allocated_gpu_hours) as allocated_gpu_hours,
    sum(active_gpu_hours) as active_gpu_hours,
    sum(idle_allocated_gpu_hours) as idle_allocated_gpu_hours
  from {{ ref('pool_daily') }}
  group by 1
),

tasks as (
  select
    cast(date_trunc('month', day) as date) as month,
    sum(submissions) as submissions,
    sum(submissions_with_checkpoint_policy) as submissions_with_checkpoint_policy,
    sum(finished_jobs) as finished_jobs,
    sum(failed_jobs) as failed_jobs
  from {{ ref('task_daily') }}
  group by 1
),

-- percentiles are computed over the month's jobs, never taken from the daily rows (a max or mean
-- of daily percentiles is not the month's percentile)
jobs as (
  select * from {{ ref('dim_jobs') }}
),

waits as (
  select
    cast(date_trunc('month', first_started_at) as date) as month,
    count(*) as jobs_started,
    quantile_cont(queue_wait_s, 0.5) as queue_wait_p50_s,
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s
  from jobs
  where first_started_at is not null
  group by 1
),

run_times as (
  select
    cast(date_trunc('month', finished_at) as date) as month,
    quantile_cont(run_time_s, 0.5) as run_time_p50_s,
    quantile_cont(run_time_s, 0.95) as run_time_p95_s
  from jobs
  where finished_at is not null
  group by 1
),

-- waiting work at the month's end (the data's end in the last month): pending age = end - submit
waiting as (
  select
    month,
    count(*) as jobs_waiting,
    quantile_cont(pending_age_s, 0.95) as waiting_age_p95_s,
    max(pending_age_s) as waiting_age_max_s
  from {{ ref('fct_waiting_jobs') }}
  where is_month_end
  group by 1
),

cancelled_queued as (
  select
    cast(date_trunc('month', finished_at) as date) as month,
    count(*) as cancelled_while_queued,
    quantile_cont(cancelled_pending_age_s, 0.95) as cancelled_pending_age_p95_s
  from jobs
  where is_cancelled_while_queued
  group by 1
),

final as (
  select
    pool.month,
    pool.first_day,
    pool.last_day,
    pool.days,
    pool.capacity_gpu_hours,
    pool.allocated_gpu_hours,
    pool.active_gpu_hours,
    pool.idle_allocated_gpu_hours,
    100.0 * pool.allocated_gpu_hours / nullif(pool.capacity_gpu_hours, 0) as allocation_rate_pct,
    100.0 * pool.active_gpu_hours / nullif(pool.allocated_gpu_hours, 0) as utilisation_of_allocated_pct,
    100.0 * pool.active_gpu_hours / nullif(pool.capacity_gpu_hours, 0) as pool_utilisation_pct,
    coalesce(tasks.submissions, 0) as submissions,
    coalesce(tasks.finished_jobs, 0) as finished_jobs,
    coalesce(tasks.failed_jobs, 0) as failed_jobs,
    100.0 * tasks.failed_jobs / nullif(tasks.finished_jobs, 0) as failure_rate_pct,
    100.0 * tasks.submissions_with_checkpoint_policy / nullif(tasks.submissions, 0) as checkpoint_policy_pct,
    coalesce(waits.jobs_started, 0) as jobs_started,
    waits.queue_wait_p50_s,
    waits.queue_wait_p95_s,
    run_times.run_time_p50_s,
    run_times.run_time_p95_s,
    coalesce(waiting.jobs_waiting, 0) as jobs_waiting,
    waiting.waiting_age_p95_s,
    waiting.waiting_age_max_s,
    coalesce(cancelled_queued.cancelled_while_queued, 0) as cancelled_while_queued,
    cancelled_queued.cancelled_pending_age_p95_s
  from pool
  left join tasks using (month)
  left join waits using (month)
  left join run_times using (month)
  left join waiting using (month)
  left join cancelled_queued using (month)
)

select * from final
