with quotas as (
  select day, tenant, gpu_model, sum(quota_gpus) as quota_gpus, sum(quota_gpu_hours) as quota_gpu_hours
  from {{ ref('fct_quota_daily') }}
  group by day, tenant, gpu_model
),

levels as (
  select * from {{ ref('fct_allocation_levels') }} where level_scope = 'tenant'
),

-- borrowing is measured moment by moment: GPUs held above quota x the time they were held
usage as (
  select
    l.day,
    l.tenant,
    l.gpu_model,
    sum(l.allocated_gpus * l.hours) as allocated_gpu_hours,
    max(l.allocated_gpus) as peak_allocated_gpus,
    sum(greatest(l.allocated_gpus - coalesce(q.quota_gpus, 0), 0) * l.hours) as borrowed_gpu_hours
  from levels l
  left join quotas q
    on q.day = l.day
    and q.tenant is not distinct from l.tenant
    and q.gpu_model = l.gpu_model
  group by l.day, l.tenant, l.gpu_model
),

keys as (
  select day, tenant, gpu_model from quotas
  union
  select day, tenant, gpu_model from usage
),

final as (
  select
    k.day,
    k.tenant,
    k.gpu_model,
    coalesce(q.quota_gpus, 0) as quota_gpus,
    coalesce(q.quota_gpu_hours, 0) as quota_gpu_hours,
    coalesce(u.allocated_gpu_hours, 0) as allocated_gpu_hours,
    100.0 * coalesce(u.allocated_gpu_hours, 0) / nullif(q.quota_gpu_hours, 0) as quota_usage_pct,
    coalesce(u.peak_allocated_gpus, 0) as peak_allocated_gpus,
    coalesce(u.borrowed_gpu_hours, 0) as borrowed_gpu_hours,
    greatest(coalesce(q.quota_gpu_hours, 0) - coalesce(u.allocated_gpu_hours, 0), 0) as unused_quota_gpu_hours
  from keys k
  left join quotas q
    on q.day = k.day and q.tenant is not distinct from k.tenant and q.gpu_model = k.gpu_model
  left join usage u
    on u.day = k.day and u.tenant is not distinct from k.tenant and u.gpu_model = k.gpu_model
)

select * from final
