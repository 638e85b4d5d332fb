with jobs as (
  select * from {{ ref('dim_jobs') }}
),

usage as (
  select
    u.source,
    u.job_id,
    sum(u.allocated_gpu_hours) as allocated_gpu_hours,
    sum(u.active_gpu_hours) as active_gpu_hours,
    sum(u.idle_gpu_hours) as idle_gpu_hours,
    coalesce(sum(u.allocated_gpu_hours) filter (where u.attempt > 1), 0) as retry_gpu_hours,
    coalesce(sum(u.allocated_gpu_hours) filter (where u.end_event_type in ('preempt', 'requeue')), 0)
      as interrupted_gpu_hours,
    max(u.peak_fb_used_mib) as peak_fb_used_mib,
    max(u.peak_fb_used_pct) as peak_fb_used_pct,
    bool_and(u.has_telemetry) as has_telemetry
  from {{ ref('fct_allocation_usage') }} u
  group by u.source, u.job_id
),

gpus_held as (
  select source, job_id, max(gpus) as gpus_held
  from (
    select source, job_id, attempt, sum(fraction) as gpus
    from {{ ref('fct_allocations') }}
    group by source, job_id, attempt
  )
  group by source, job_id
),

final as (
  select
    j.source,
    j.job_id,
    j.tenant,
    j.queue,
    j.user_name,
    j.job_name,
    j.template,
    j.gpu_model,
    j.gpus_requested,
    j.share_mode,
    j.mig_profile,
    j.priority,
    j.expected_runtime_s,
    j.time_limit_s,
    j.checkpoint_policy,
    j.has_checkpoint_policy,
    j.submitted_at,
    j.first_started_at,
    j.finished_at,
    j.status,
    j.final_state,
    j.is_failed,
    j.failure_reason,
    j.attempts,
    j.retries,
    j.preemptions,
    j.requeues,
    j.queue_wait_s,
    j.run_time_s,
    coalesce(h.gpus_held, 0) as gpus_held,
    coalesce(u.allocated_gpu_hours, 0) as allocated_gpu_hours,
    coalesce(u.active_gpu_hours, 0) as active_gpu_hours,
    100.0 * u.active_gpu_hours / nullif(u.allocated_gpu_hours, 0) as utilisation_of_allocated_pct,
    coalesce(u.idle_gpu_hours, 0) as idle_gpu_hours,
    coalesce(u.retry_gpu_hours, 0) as retry_gpu_hours,
    coalesce(u.interrupted_gpu_hours, 0) as interrupted_gpu_hours,
    u.peak_fb_used_mib,
    u.peak_fb_used_pct,
    coalesce(u.has_telemetry, false) as has_telemetry
  from jobs j
  left join usage u using (source, job_id)
  left join gpus_held h using (source, job_id)
)

select * from final
