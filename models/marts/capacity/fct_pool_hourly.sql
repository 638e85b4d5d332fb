-- the pool hour by hour (fct_pool_hours) with each hour's trailing week, aligned on the data's end: week 0 is
-- the last 7 x 24 h. A view: the data's end moves with every build, and with it every hour's week.
{{ config(materialized='view') }}
with hours as (
  select * from {{ ref('fct_pool_hours') }}
),

data_window as (
  select max(as_of_at) as as_of_at, min(day_start_at) as window_start_at from {{ ref('dim_days') }}
),

hour_weeks as (
  select
    h.*,
    {{ pool_weeks_before_end('h.hour_at', 'w.as_of_at') }} as weeks_before_end,
    w.as_of_at,
    w.window_start_at
  from hours h
  cross join data_window w
),

final as (
  select
    hour_at,
    hour_end_at,
    day,
    hour_hours,
    weeks_before_end,
    as_of_at - to_days(7 * (weeks_before_end + 1)) as week_start_at,
    as_of_at - to_days(7 * weeks_before_end) as week_end_at,
    as_of_at - to_days(7 * (weeks_before_end + 1)) >= window_start_at as is_complete_week,
    level_scope,
    gpu_model,
    queue,
    tenant,
    is_quota_queue,
    capacity_gpus,
    capacity_gpu_hours,
    quota_gpus,
    quota_gpu_hours,
    allocated_gpu_hours,
    mean_allocated_gpus,
    peak_allocated_gpus,
    active_gpu_hours,
    in_quota_gpu_hours,
    borrowed_gpu_hours,
    idle_quota_gpu_hours,
    pending_gpu_hours,
    quota_bound_gpu_hours
  from hour_weeks
)

select * from final
