-- Work lost when attempts ended in a failure (preempted, reclaimed, capped, hardware, time_limit,
-- out_of_memory, user_code, unknown), per month the attempts ended, tenant, template and cause: GPU-hours since
-- each attempt's last ok checkpoint, else since its start (marts.fct_attempt_checkpoints), split by whether it
-- had written a checkpoint. Sum the causes for a month's total.
with attempts as (
  select
    cast(date_trunc('month', ended_at) as date) as month,
    coalesce(tenant, 'unknown') as tenant,
    coalesce(template, 'unknown') as template,
    cause,
    has_checkpoint,
    work_lost_gpu_hours
  from {{ ref('fct_attempt_checkpoints') }}
  where is_failure
),

final as (
  select
    month,
    tenant,
    template,
    cause,
    count(*) as attempts,
    count(*) filter (where has_checkpoint) as attempts_with_checkpoint,
    count(*) filter (where not has_checkpoint) as attempts_without_checkpoint,
    sum(work_lost_gpu_hours) as work_lost_gpu_hours,
    coalesce(sum(work_lost_gpu_hours) filter (where has_checkpoint), 0) as work_lost_with_checkpoint_gpu_hours,
    coalesce(sum(work_lost_gpu_hours) filter (where not has_checkpoint), 0) as work_lost_without_checkpoint_gpu_hours
  from attempts
  group by month, tenant, template, cause
)

select * from final
