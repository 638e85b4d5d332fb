-- how many GPUs (fraction-weighted) a tenant, and the pool, held at each moment
-- (fct_allocation_steps), cut at midnight. Rebuilt by day (macros/build_window.sql): the window's days
-- read the steps that end in or after them
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_days', window_key='day') }}
with levels as (
  select level_scope, tenant, gpu_model, level_start_at, level_end_at, allocated_gpus
  from {{ ref('fct_allocation_steps') }}
  where level_scope in ('tenant', 'pool')
    and {{ in_window_from('level_end_at') }}
),

days as (
  select day, day_start_at from {{ ref('dim_days') }}
  where {{ in_window_days('day') }}
),

final as (
  select
    l.level_scope,
    l.tenant,
    l.gpu_model,
    d.day,
    greatest(l.level_start_at, d.day_start_at) as level_start_at,
    least(l.level_end_at, d.day_start_at + interval 1 day) as level_end_at,
    l.allocated_gpus,
    epoch(least(l.level_end_at, d.day_start_at + interval 1 day) - greatest(l.level_start_at, d.day_start_at))
      / 3600.0 as hours
  from levels l
  join days d
    on d.day_start_at < l.level_end_at
    and d.day_start_at + interval 1 day > l.level_start_at
)

select * from final
