-- Per hour and GPU model, the queue rows of fct_pool_hourly add up to its whole-model row.
with sums as (
  select
    hour_at,
    gpu_model,
    coalesce(sum(allocated_gpu_hours) filter (where level_scope = 'queue'), 0) as queues_gpu_hours,
    sum(allocated_gpu_hours) filter (where level_scope = 'pool') as pool_gpu_hours
  from {{ ref('fct_pool_hourly') }}
  group by hour_at, gpu_model
)

select *
from sums
where pool_gpu_hours is null
  or abs(queues_gpu_hours - pool_gpu_hours) > 1e-6 * greatest(1, pool_gpu_hours)
