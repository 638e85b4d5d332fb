-- Headroom per GPU model (queue = 'all') and per queue, over the whole window and per trailing
-- week: the hourly peak of GPUs held, read at its maximum and at its 95th percentile over hours,
-- against the model's capacity (and, for a queue, against its quota). Headroom is taken hour by
-- hour (capacity or quota that hour - the hour's peak), so a capacity change inside the window
-- is compared with the hours it applied to.
with hourly as (
  select * from {{ ref('fct_pool_hourly') }}
),

tagged as (
  select 'period' as window_kind, cast(null as integer) as weeks_before_end_key, * from hourly
  union all
  select 'week', weeks_before_end, * from hourly
),

per_hour as (
  select
    *,
    coalesce(queue, 'all') as queue_key,
    pending_gpu_hours / nullif(hour_hours, 0) as mean_pending_gpus,
    capacity_gpus - peak_allocated_gpus as capacity_headroom_gpus,
    100.0 * peak_allocated_gpus / nullif(capacity_gpus, 0) as peak_capacity_pct,
    quota_gpus - peak_allocated_gpus as quota_headroom_gpus,
    100.0 * peak_allocated_gpus / nullif(quota_gpus, 0) as peak_quota_pct
  from tagged
),

windows as (
  select
    window_kind,
    weeks_before_end_key as weeks_before_end,
    min(hour_at) as window_start_at,
    max(hour_end_at) as window_end_at,
    sum(hour_hours) as hours,
    bool_and(is_complete_week) as is_complete_week,
    level_scope,
    gpu_model,
    queue_key as queue,
    any_value(tenant) as tenant,
    arg_max(capacity_gpus, hour_at) as capacity_gpus,
    arg_max(quota_gpus, hour_at) as quota_gpus,
    sum(capacity_gpu_hours) as capacity_gpu_hours,
    sum(allocated_gpu_hours) as allocated_gpu_hours,
    sum(active_gpu_hours) as active_gpu_hours,
    sum(pending_gpu_hours) as pending_gpu_hours,
    max(peak_allocated_gpus) as peak_allocated_gpus,
    quantile_cont(peak_allocated_gpus, 0.95) as p95_allocated_gpus,
    quantile_cont(mean_allocated_gpus + coalesce(mean_pending_gpus, 0), 0.95) as p95_demand_gpus,
    min(capacity_headroom_gpus) as capacity_headroom_at_peak_gpus,
    quantile_cont(capacity_headroom_gpus, 0.05) as capacity_headroom_at_p95_gpus,
    max(peak_capacity_pct) as utilisation_at_peak_pct,
    quantile_cont(peak_capacity_pct, 0.95) as utilisation_at_p95_pct,
    min(quota_headroom_gpus) as quota_headroom_at_peak_gpus,
    quantile_cont(quota_headroom_gpus, 0.05) as quota_headroom_at_p95_gpus,
    max(peak_quota_pct) as quota_usage_at_peak_pct,
    quantile_cont(peak_quota_pct, 0.95) as quota_usage_at_p95_pct
  from per_hour
  group by window_kind, weeks_before_end_key, level_scope, gpu_model, queue_key
),

final as (
  select
    window_kind,
    weeks_before_end,
    window_start_at,
    window_end_at,
    hours,
    case when window_kind = 'week' then is_complete_week end as is_complete_week,
    gpu_model,
    queue,
    tenant,
    capacity_gpus,
    quota_gpus,
    capacity_gpu_hours,
    allocated_gpu_hours,
    allocated_gpu_hours / nullif(hours, 0) as mean_allocated_gpus,
    peak_allocated_gpus,
    p95_allocated_gpus,
    active_gpu_hours,
    100.0 * active_gpu_hours / nullif(allocated_gpu_hours, 0) as utilisation_of_allocated_pct,
    pending_gpu_hours,
    pending_gpu_hours / nullif(hours, 0) as mean_pending_gpus,
    p95_demand_gpus,
    case when level_scope = 'pool' then capacity_headroom_at_peak_gpus end as headroom_at_peak_gpus,
    case when level_scope = 'pool' then capacity_headroom_at_p95_gpus end as headroom_at_p95_gpus,
    utilisation_at_peak_pct,
    utilisation_at_p95_pct,
    case when level_scope = 'queue' then quota_headroom_at_peak_gpus end as quota_headroom_at_peak_gpus,
    case when level_scope = 'queue' then quota_headroom_at_p95_gpus end as quota_headroom_at_p95_gpus,
    case when level_scope = 'queue' then quota_usage_at_peak_pct end as quota_usage_at_peak_pct,
    case when level_scope = 'queue' then quota_usage_at_p95_pct end as quota_usage_at_p95_pct
  from windows
)

select * from final
