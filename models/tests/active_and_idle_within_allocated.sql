-- Active and idle GPU-hours are parts of the allocated GPU-hours, for the pool and for each tenant.
-- Dagster shows it as an asset check of pool_daily (it reads more than one relation).
{{ config(meta={'dagster': {'ref': {'name': 'pool_daily'}}}) }}
select 'pool_daily' as relation, day, gpu_model, null as tenant, allocated_gpu_hours, active_gpu_hours,
  idle_allocated_gpu_hours
from {{ ref('pool_daily') }}
where active_gpu_hours > allocated_gpu_hours + 1e-6 or idle_allocated_gpu_hours > allocated_gpu_hours + 1e-6
union all
select 'tenant_daily', day, gpu_model, tenant, allocated_gpu_hours, active_gpu_hours, idle_allocated_gpu_hours
from {{ ref('tenant_daily') }}
where active_gpu_hours > allocated_gpu_hours + 1e-6 or idle_allocated_gpu_hours > allocated_gpu_hours + 1e-6
