-- a job attempt waits from its submit (attempt 1) or from the requeue/preemption that ended the
-- previous attempt, to its start, or to the finish/cancel that ended it while pending, or to the
-- data's end
--
-- merged by attempt (macros/build_window.sql): a build re-reads the attempts whose wait is not over before
-- the window's start (the queued ones grow to the data's end)
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_waiting_attempts', window_key='source, job_id, attempt') }}
with attempts as (
  select * from {{ ref('fct_job_attempts') }}
  where {{ in_window_waiting_attempts() }}
),

jobs as (
  select * from {{ ref('dim_jobs') }}
  where (source, job_id) in (select source, job_id from attempts)
),

days as (
  select * from {{ ref('dim_days') }}
),

inventory as (
  select * from {{ ref('stg_pool__gpu_inventory') }}
),

gpu_models as (
  select * from {{ ref('gpu_models') }}
),

as_of as (
  select max(as_of_at) as as_of_at from days
),

-- the share of one physical GPU that one unit of a shape is (MIG 3g on a 7-slice GPU: 3/7;
-- a time-slice share: 1/replicas), from the inventory
shape_fractions as (
  select
    gpu_model,
    coalesce(share_mode, 'whole') as share_mode,
    case when share_mode = 'mig' then coalesce(gpu_instance_profile, '') else '' end as profile,
    avg(fraction) as unit_fraction
  from inventory
  group by all
),

asked as (
  select
    a.source,
    a.job_id,
    a.attempt,
    j.tenant,
    j.queue,
    j.template,
    coalesce(j.gpu_model, 'unknown') as gpu_model,
    coalesce(j.share_mode, case when j.mig_profile is not null then 'mig' else 'whole' end) as share_mode,
    j.mig_profile,
    coalesce(j.gpus_requested, 1) as gpus_requested,
    j.priority,
    a.queued_at,
    a.started_at,
    a.ended_at,
    a.end_event_type,
    a.end_state
  from attempts a
  join jobs j using (source, job_id)
  where a.queued_at is not null
),

bounded as (
  select
    k.*,
    least(coalesce(k.started_at, k.ended_at, o.as_of_at), o.as_of_at) as pending_to_at,
    case
      when k.started_at is not null and k.started_at <= o.as_of_at then 'start'
      when k.ended_at is not null and k.ended_at <= o.as_of_at
        then case when k.end_state in ('CANCELLED', 'CANCELED') then 'cancel' else 'finish' end
      else 'data_end'
    end as ended_by
  from asked k
  cross join as_of o
),

shaped as (
  select
    b.*,
    coalesce(
      f.unit_fraction,
      case
        when b.share_mode = 'mig'
          then try_cast(regexp_extract(b.mig_profile, '^(\d+)g', 1) as double) / nullif(m.compute_slices, 0)
      end,
      1.0
    ) as unit_fraction
  from bounded b
  left join shape_fractions f
    on f.gpu_model = b.gpu_model
    and f.share_mode = b.share_mode
    and f.profile = case when b.share_mode = 'mig' then coalesce(b.mig_profile, '') else '' end
  left join gpu_models m
    on m.gpu_model = b.gpu_model
  where b.pending_to_at > b.queued_at
),

final as (
  select
    source,
    job_id,
    attempt,
    queued_at as pending_from_at,
    pending_to_at,
    ended_by,
    tenant,
    queue,
    template,
    gpu_model,
    share_mode,
    mig_profile,
    gpus_requested,
    priority,
    unit_fraction,
    gpus_requested * unit_fraction as asked_gpus,
    epoch(pending_to_at - queued_at) as pending_s,
    epoch(pending_to_at - queued_at) / 3600.0 * gpus_requested * unit_fraction as pending_gpu_hours
  from shaped
)

select * from final
