with jobs as (
  select * from {{ ref('dim_jobs') }} where is_failed
),

job_gpu_hours as (
  select source, job_id, sum(allocated_gpu_hours) as allocated_gpu_hours
  from {{ ref('fct_allocations') }}
  group by source, job_id
),

final as (
  select
    cast(j.finished_at as date) as day,
    j.tenant,
    j.template,
    j.final_state,
    j.failure_reason,
    count(*) as failed_jobs,
    coalesce(sum(g.allocated_gpu_hours), 0) as allocated_gpu_hours
  from jobs j
  left join job_gpu_hours g using (source, job_id)
  group by all
)

select * from final
