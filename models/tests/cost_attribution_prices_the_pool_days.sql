-- The pool GPU-hours that cost_attribution prices are pool_daily's, month by month.
-- Dagster shows it as an asset check of cost_attribution (it reads more than one relation).
{{ config(meta={'dagster': {'ref': {'name': 'cost_attribution'}}}) }}
with costs as (
  select month, max(pool_capacity_gpu_hours) as capacity_gpu_hours, max(pool_allocated_gpu_hours) as allocated_gpu_hours
  from {{ ref('cost_attribution') }}
  group by month
),

pool as (
  select date_trunc('month', day) as month, sum(capacity_gpu_hours) as capacity_gpu_hours,
    sum(allocated_gpu_hours) as allocated_gpu_hours
  from {{ ref('pool_daily') }}
  group by 1
)

select costs.*, pool.capacity_gpu_hours as pool_daily_capacity, pool.allocated_gpu_hours as pool_daily_allocated
from costs
left join pool using (month)
where pool.month is null
  or abs(costs.capacity_gpu_hours - pool.capacity_gpu_hours) > 1e-6 * greatest(1, pool.capacity_gpu_hours)
  or abs(costs.allocated_gpu_hours - pool.allocated_gpu_hours) > 1e-6 * greatest(1, pool.allocated_gpu_hours)
