-- The monthly review pack's pool-wide ratios, one row per UTC calendar month, computed here in SQL
-- from the daily metric views' numerators and denominators (never from rounded daily ratios and
-- never in Python), with the same definitions as the catalog's daily metrics.
with pool as (
  select
    date_trunc('month', day)::date as month,
    min(day) as first_day,
    max(day) as last_day,
    count(distinct day) as days,
    sum(capacity_gpu_hours) as capacity_gpu_hours,
    sum(allocated_gpu_hours) as allocated_gpu_hours,
    sum(active_gpu_hours) as active_gpu_hours,
    sum(idle_allocated_gpu_hours) as idle_allocated_gpu_hours
  from metrics.pool_daily
  group by 1
),

tasks as (
  select
    date_trunc('month', day)::date as month,
    sum(submissions) as submissions,
    sum(submissions_with_checkpoint_policy) as submissions_with_checkpoint_policy,
    sum(finished_jobs) as finished_jobs,
    sum(failed_jobs) as failed_jobs
  from metrics.task_daily
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
    100.0 * tasks.submissions_with_checkpoint_policy / nullif(tasks.submissions, 0) as checkpoint_policy_pct
  from pool
  left join tasks using (month)
)

select * from final
