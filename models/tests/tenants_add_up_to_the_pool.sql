-- Per day and GPU model, the tenants' allocated GPU-hours (tenant_daily) add up to the pool's (pool_daily).
-- Dagster shows it as an asset check of tenant_daily (it reads more than one relation).
{{ config(meta={'dagster': {'ref': {'name': 'tenant_daily'}}}) }}
with tenants as (
  select day, gpu_model, sum(allocated_gpu_hours) as allocated_gpu_hours
  from {{ ref('tenant_daily') }}
  group by day, gpu_model
)

select p.day, p.gpu_model, p.allocated_gpu_hours as pool_gpu_hours, t.allocated_gpu_hours as tenants_gpu_hours
from {{ ref('pool_daily') }} p
full join tenants t using (day, gpu_model)
where abs(coalesce(p.allocated_gpu_hours, 0) - coalesce(t.allocated_gpu_hours, 0))
  > 1e-6 * greatest(1, p.allocated_gpu_hours)
