-- The whole loaded window at once, per GPU model and for the pool ('all'): the figures a
-- summary or a headline shows. Sums the daily GPU-hours, then applies the same ratio definitions.
with daily as (
  select * from {{ ref('pool_daily') }}
),

by_model as (
  select
    gpu_model,
    min(day) as first_day,
    max(day) as last_day,
    max(physical_gpus) as physical_gpus,
    sum(capacity_gpu_hours) as capacity_gpu_hours,
    sum(allocated_gpu_hours) as allocated_gpu_hours,
    sum(active_gpu_hours) as active_gpu_hours,
    sum(idle_allocated_gpu_hours) as idle_allocated_gpu_hours,
    sum(busy_unallocated_gpu_hours) as busy_unallocated_gpu_hours,
    max(peak_allocated_gpus) as peak_allocated_gpus
  from daily
  group by gpu_model
),

pool as (
  select
    'all' as gpu_model,
    min(first_day) as first_day,
    max(last_day) as last_day,
    cast(sum(physical_gpus) as bigint) as physical_gpus,
    sum(capacity_gpu_hours) as capacity_gpu_hours,
    sum(allocated_gpu_hours) as allocated_gpu_hours,
    sum(active_gpu_hours) as active_gpu_hours,
    sum(idle_allocated_gpu_hours) as idle_allocated_gpu_hours,
    sum(busy_unallocated_gpu_hours) as busy_unallocated_gpu_hours,
    cast(null as double) as peak_allocated_gpus
  from by_model
),

unioned as (
  select * from by_model
  union all
  select * from pool where physical_gpus is not null
),

final as (
  select
    gpu_model,
    first_day,
    last_day,
    physical_gpus,
    capacity_gpu_hours,
    allocated_gpu_hours,
    active_gpu_hours,
    idle_allocated_gpu_hours,
    busy_unallocated_gpu_hours,
    100.0 * allocated_gpu_hours / nullif(capacity_gpu_hours, 0) as allocation_rate_pct,
    100.0 * active_gpu_hours / nullif(allocated_gpu_hours, 0) as utilisation_of_allocated_pct,
    100.0 * active_gpu_hours / nullif(capacity_gpu_hours, 0) as pool_utilisation_pct,
    peak_allocated_gpus
  from unioned
)

select * from final
