with allocation as (
  select
    day,
    tenant,
    gpu_model,
    count(*) as allocations,
    count(distinct source || ':' || job_id) as jobs,
    sum(allocated_gpu_hours) as allocated_gpu_hours,
    sum(active_gpu_hours) as active_gpu_hours,
    sum(idle_gpu_hours) as idle_allocated_gpu_hours,
    coalesce(sum(allocated_gpu_hours) filter (where not has_telemetry), 0) as allocated_gpu_hours_without_telemetry,
    max(peak_fb_used_mib) as peak_fb_used_mib
  from {{ ref('fct_allocation_daily') }}
  group by day, tenant, gpu_model
),

peaks as (
  select day, tenant, gpu_model, max(allocated_gpus) as peak_allocated_gpus
  from {{ ref('fct_allocation_levels') }}
  where level_scope = 'tenant'
  group by day, tenant, gpu_model
),

final as (
  select
    a.day,
    a.tenant,
    a.gpu_model,
    a.allocations,
    a.jobs,
    a.allocated_gpu_hours,
    a.active_gpu_hours,
    a.idle_allocated_gpu_hours,
    100.0 * a.active_gpu_hours / nullif(a.allocated_gpu_hours, 0) as utilisation_of_allocated_pct,
    100.0 * a.idle_allocated_gpu_hours / nullif(a.allocated_gpu_hours, 0) as idle_share_pct,
    coalesce(p.peak_allocated_gpus, 0) as peak_allocated_gpus,
    a.allocated_gpu_hours_without_telemetry,
    a.peak_fb_used_mib
  from allocation a
  left join peaks p
    on p.day = a.day
    and p.tenant is not distinct from a.tenant
    and p.gpu_model = a.gpu_model
)

select * from final
