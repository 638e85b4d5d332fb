with jobs as (
  select * from {{ ref('dim_jobs') }}
),

attempts as (
  select a.*, j.tenant, j.template, j.has_checkpoint_policy
  from {{ ref('fct_job_attempts') }} a
  join jobs j using (source, job_id)
),

submitted as (
  select
    cast(submitted_at as date) as day,
    tenant,
    template,
    count(*) as submissions,
    count(*) filter (where has_checkpoint_policy) as submissions_with_checkpoint_policy
  from jobs
  where submitted_at is not null
  group by all
),

finished as (
  select
    cast(finished_at as date) as day,
    tenant,
    template,
    count(*) as finished_jobs,
    count(*) filter (where is_failed) as failed_jobs,
    quantile_cont(run_time_s, 0.5) as run_time_p50_s,
    avg(run_time_s) as run_time_mean_s
  from jobs
  where finished_at is not null
  group by all
),

retried as (
  select cast(started_at as date) as day, tenant, template, count(*) as retries
  from attempts
  where attempt > 1 and started_at is not null
  group by all
),

interrupted as (
  select
    cast(ended_at as date) as day,
    tenant,
    template,
    count(*) filter (where end_event_type = 'preempt') as preemptions,
    count(*) filter (where not has_checkpoint_policy) as interruptions_without_checkpoint_policy
  from attempts
  where end_event_type in ('preempt', 'requeue')
  group by all
),

gpu_hours as (
  select
    d.day,
    d.tenant,
    d.template,
    sum(d.allocated_gpu_hours) as allocated_gpu_hours,
    coalesce(sum(d.allocated_gpu_hours) filter (where d.attempt > 1), 0) as retry_gpu_hours,
    coalesce(sum(d.allocated_gpu_hours) filter (where a.end_event_type in ('preempt', 'requeue')), 0)
      as interrupted_gpu_hours
  from {{ ref('fct_allocation_daily') }} d
  join {{ ref('fct_job_attempts') }} a using (source, job_id, attempt)
  group by all
),

keys as (
  select day, tenant, template from submitted
  union select day, tenant, template from finished
  union select day, tenant, template from retried
  union select day, tenant, template from interrupted
  union select day, tenant, template from gpu_hours
),

joined as (
  select
    k.day,
    k.tenant,
    k.template,
    coalesce(s.submissions, 0) as submissions,
    coalesce(s.submissions_with_checkpoint_policy, 0) as submissions_with_checkpoint_policy,
    coalesce(f.finished_jobs, 0) as finished_jobs,
    coalesce(f.failed_jobs, 0) as failed_jobs,
    f.run_time_p50_s,
    f.run_time_mean_s,
    coalesce(r.retries, 0) as retries,
    coalesce(i.preemptions, 0) as preemptions,
    coalesce(i.interruptions_without_checkpoint_policy, 0) as interruptions_without_checkpoint_policy,
    coalesce(g.allocated_gpu_hours, 0) as allocated_gpu_hours,
    coalesce(g.retry_gpu_hours, 0) as retry_gpu_hours,
    coalesce(g.interrupted_gpu_hours, 0) as interrupted_gpu_hours
  from keys k
  left join submitted s
    on s.day = k.day and s.tenant is not distinct from k.tenant and s.template is not distinct from k.template
  left join finished f
    on f.day = k.day and f.tenant is not distinct from k.tenant and f.template is not distinct from k.template
  left join retried r
    on r.day = k.day and r.tenant is not distinct from k.tenant and r.template is not distinct from k.template
  left join interrupted i
    on i.day = k.day and i.tenant is not distinct from k.tenant and i.template is not distinct from k.template
  left join gpu_hours g
    on g.day = k.day and g.tenant is not distinct from k.tenant and g.template is not distinct from k.template
),

final as (
  select
    day,
    tenant,
    template,
    submissions,
    100.0 * submissions / nullif(sum(submissions) over (partition by day), 0) as submissions_share_pct,
    submissions_with_checkpoint_policy,
    100.0 * submissions_with_checkpoint_policy / nullif(submissions, 0) as checkpoint_policy_pct,
    finished_jobs,
    failed_jobs,
    100.0 * failed_jobs / nullif(finished_jobs, 0) as failure_rate_pct,
    run_time_p50_s,
    run_time_mean_s,
    retries,
    preemptions,
    interruptions_without_checkpoint_policy,
    allocated_gpu_hours,
    100.0 * allocated_gpu_hours / nullif(sum(allocated_gpu_hours) over (partition by day), 0) as gpu_hours_share_pct,
    retry_gpu_hours,
    interrupted_gpu_hours
  from joined
)

select * from final
