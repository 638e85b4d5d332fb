-- merged by job (macros/build_window.sql): a build re-reads the placements, attempts and job of the
-- jobs the window reaches and of those the last build left running or ending in the window
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_allocation_jobs', window_key='source, job_id') }}
with placements as materialized (
  select * from {{ ref('stg_scheduler__job_gpus') }}
  where {{ in_window_allocation_jobs() }}
),

-- the same jobs' attempts and attributes (only those with a placement make rows)
attempts as (
  select * from {{ ref('fct_job_attempts') }}
  semi join placements using (source, job_id)
),

jobs as (
  select * from {{ ref('dim_jobs') }}
  semi join placements using (source, job_id)
),

gpus as (
  select * from {{ ref('dim_gpus') }}
),

as_of as (
  select max(as_of_at) as as_of_at from {{ ref('dim_days') }}
),

-- Slurm may know only a count of GPUs on a host: number such rows so each stays distinct
numbered as (
  select
    *,
    row_number() over (
      partition by source, job_id, attempt, host, gpu, gpu_instance_id
      order by uuid, fraction
    ) as slot
  from placements
),

joined as (
  select
    p.source,
    p.job_id,
    p.attempt,
    j.tenant,
    j.queue,
    j.template,
    j.user_name,
    p.host,
    p.gpu,
    p.gpu_instance_id,
    coalesce(p.gpu_instance_profile, g.gpu_instance_profile) as gpu_instance_profile,
    coalesce(
      g.share_mode,
      case
        when p.gpu_instance_profile is not null then 'mig'
        when p.fraction < 1 then 'timeslice'
        else 'whole'
      end
    ) as share_mode,
    coalesce(p.gpu_model, g.gpu_model, j.gpu_model, 'unknown') as gpu_model,
    p.fraction,
    coalesce(a.started_at, p.assigned_at) as started_at,
    a.ended_at,
    a.end_event_type,
    a.end_state,
    p.slot,
    g.host is not null as is_in_inventory
  from numbered p
  left join attempts a using (source, job_id, attempt)
  left join jobs j using (source, job_id)
  left join gpus g
    on g.host = p.host
    and g.gpu = p.gpu
    and g.gpu_instance_id is not distinct from p.gpu_instance_id
),

final as (
  select
    concat_ws(
      ':', source, job_id, cast(attempt as varchar), host,
      coalesce(cast(gpu as varchar), '?' || cast(slot as varchar)),
      coalesce(cast(gpu_instance_id as varchar), '-')
    ) as allocation_id,
    j.source,
    j.job_id,
    j.attempt,
    j.tenant,
    j.queue,
    j.template,
    j.user_name,
    j.host,
    j.gpu,
    j.gpu_instance_id,
    j.gpu_instance_profile,
    j.share_mode,
    -- the series this allocation reads: a MIG instance has its own, a time-sliced share reads its GPU's
    case when j.share_mode = 'mig' then j.gpu_instance_id end as telemetry_instance_id,
    j.gpu_model,
    j.fraction,
    j.started_at,
    j.ended_at,
    coalesce(j.ended_at, o.as_of_at) as effective_ended_at,
    j.end_event_type,
    j.end_state,
    j.ended_at is null as is_running,
    j.gpu is not null as has_gpu_index,
    j.is_in_inventory,
    greatest(epoch(coalesce(j.ended_at, o.as_of_at) - j.started_at), 0) / 3600.0 as allocated_hours,
    greatest(epoch(coalesce(j.ended_at, o.as_of_at) - j.started_at), 0) / 3600.0 * j.fraction as allocated_gpu_hours
  from joined j
  cross join as_of o
)

select * from final
