-- pool_period's rows are the sums of pool_daily's days (per GPU model, and gpu_model = 'all' for the pool).
-- Dagster shows it as an asset check of pool_period (it reads more than one relation).
{{ config(meta={'dagster': {'ref': {'name': 'pool_period'}}}) }}
with days as (
  select gpu_model, sum(capacity_gpu_hours) as capacity_gpu_hours, sum(allocated_gpu_hours) as allocated_gpu_hours
  from {{ ref('pool_daily') }}
  group by rollup (gpu_model)
)

select p.gpu_model, p.capacity_gpu_hours, d.capacity_gpu_hours as days_capacity, p.allocated_gpu_hours,
  d.allocated_gpu_hours as days_allocated
from {{ ref('pool_period') }} p
left join days d on d.gpu_model is not distinct from nullif(p.gpu_model, 'all')
where d.capacity_gpu_hours is null
  or abs(p.capacity_gpu_hours - d.capacity_gpu_hours) > 1e-6 * greatest(1, d.capacity_gpu_hours)
  or abs(p.allocated_gpu_hours - d.allocated_gpu_hours) > 1e-6 * greatest(1, d.allocated_gpu_hours)
