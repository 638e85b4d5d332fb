-- The pool never holds more than it has: per day and GPU model (pool_daily) and per hour and GPU model
-- (fct_pool_hourly, whole-model rows), both in GPU-hours and at the peak.
-- Dagster shows it as an asset check of pool_daily (it reads more than one relation).
{{ config(meta={'dagster': {'ref': {'name': 'pool_daily'}}}) }}
select 'pool_daily' as relation, gpu_model, day::timestamp as at, allocated_gpu_hours, capacity_gpu_hours,
  peak_allocated_gpus, physical_gpus as capacity_gpus
from {{ ref('pool_daily') }}
where allocated_gpu_hours > capacity_gpu_hours + 1e-6
  or peak_allocated_gpus > physical_gpus + 1e-9
union all
select 'fct_pool_hourly', gpu_model, hour_at, allocated_gpu_hours, capacity_gpu_hours,
  peak_allocated_gpus, capacity_gpus
from {{ ref('fct_pool_hourly') }}
where level_scope = 'pool'
  and (allocated_gpu_hours > capacity_gpu_hours + 1e-6 or peak_allocated_gpus > capacity_gpus + 1e-9)
