-- an allocation crossing midnight counts in both days: cut it at each UTC midnight
-- (event_time: a day-by-day model reads only the batch's day). Merged by allocation
-- (macros/build_window.sql): a build rebuilds every day of the allocations the window reaches
{{ config(event_time='day', materialized='incremental', incremental_strategy='replace_window',
          window='in_window_allocations_or_gone', window_key='allocation_id') }}
with allocations as (
  select
    allocation_id,
    host,
    gpu,
    telemetry_instance_id,
    fraction,
    started_at,
    effective_ended_at
  from {{ ref('fct_allocations') }}
  where effective_ended_at > started_at
    and {{ in_window_allocations() }}
),

days as (
  select day, day_start_at from {{ ref('dim_days') }}
),

final as (
  select
    a.allocation_id,
    d.day,
    a.host,
    a.gpu,
    a.telemetry_instance_id,
    a.fraction,
    greatest(a.started_at, d.day_start_at) as segment_start_at,
    least(a.effective_ended_at, d.day_start_at + interval 1 day) as segment_end_at,
    epoch(least(a.effective_ended_at, d.day_start_at + interval 1 day) - greatest(a.started_at, d.day_start_at))
      / 3600.0 as allocated_hours,
    epoch(least(a.effective_ended_at, d.day_start_at + interval 1 day) - greatest(a.started_at, d.day_start_at))
      / 3600.0 * a.fraction as allocated_gpu_hours
  from allocations a
  join days d
    on d.day_start_at < a.effective_ended_at
    and d.day_start_at + interval 1 day > a.started_at
)

select * from final
