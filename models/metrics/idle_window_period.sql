-- Idle allocation windows over the whole loaded window, per GPU model and for the pool ('all'): the rows of
-- metrics.idle_allocations counted (a window crossing midnight counts once).
with windows as (
  select * from {{ ref('idle_allocations') }}
),

by_model as (
  select
    gpu_model,
    count(*) as idle_windows,
    count(*) filter (where is_ongoing) as ongoing_idle_windows
  from windows
  group by gpu_model
),

pool as (
  select
    'all' as gpu_model,
    count(*) as idle_windows,
    count(*) filter (where is_ongoing) as ongoing_idle_windows
  from windows
),

final as (
  select * from by_model
  union all
  select * from pool
)

select * from final
