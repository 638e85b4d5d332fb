-- merged by job (macros/build_window.sql): a build re-reads the events and attempts of the jobs the
-- window reaches (an attempt running or ended in it, an event in it) and drops the jobs no event is left of
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_jobs_or_gone', window_key='source, job_id') }}
with events as materialized (
  select * from {{ ref('stg_scheduler__job_events') }}
  where {{ in_window_jobs() }}
),

-- the same jobs' attempts (a job's attempts come from its events)
attempts as (
  select * from {{ ref('fct_job_attempts') }}
  semi join events using (source, job_id)
),

-- job attributes: the earliest event that carries each one (normally the submit)
attributes as (
  select
    source,
    job_id,
    min(occurred_at) filter (where event_type = 'submit') as submitted_at,
    arg_min(tenant, occurred_at) filter (where tenant is not null) as tenant,
    arg_min(queue, occurred_at) filter (where queue is not null) as queue,
    arg_min(user_name, occurred_at) filter (where user_name is not null) as user_name,
    arg_min(job_name, occurred_at) filter (where job_name is not null) as job_name,
    arg_min(template, occurred_at) filter (where template is not null) as template,
    arg_min(gpu_model, occurred_at) filter (where gpu_model is not null) as gpu_model,
    arg_min(gpus_requested, occurred_at) filter (where gpus_requested is not null) as gpus_requested,
    arg_min(share_mode, occurred_at) filter (where share_mode is not null) as share_mode,
    arg_min(mig_profile, occurred_at) filter (where mig_profile is not null) as mig_profile,
    arg_min(priority, occurred_at) filter (where priority is not null) as priority,
    arg_min(spec_json, occurred_at) filter (where spec_json is not null) as spec_json,
    count(*) filter (where event_type = 'preempt') as preemptions,
    count(*) filter (where event_type = 'requeue') as requeues,
    min(occurred_at) filter (where event_type = 'finish') as finished_at,
    arg_min(state, occurred_at) filter (where event_type = 'finish') as finish_state,
    arg_min(reason, occurred_at) filter (where event_type = 'finish') as finish_reason,
    arg_min(exit_code, occurred_at) filter (where event_type = 'finish') as finish_exit_code
  from events
  group by source, job_id
),

attempt_totals as (
  select
    source,
    job_id,
    max(attempt) as attempts,
    min(started_at) as first_started_at,
    max(ended_at) as last_ended_at,
    sum(run_time_s) as run_time_s,
    bool_or(is_running) as is_running
  from attempts
  group by source, job_id
),

final as (
  select
    a.source,
    a.job_id,
    a.tenant,
    a.queue,
    a.user_name,
    a.job_name,
    a.template,
    a.gpu_model,
    a.gpus_requested,
    a.share_mode,
    a.mig_profile,
    a.priority,
    a.spec_json,
    try_cast(json_extract_string(a.spec_json, '$.expected_runtime_s') as bigint) as expected_runtime_s,
    try_cast(json_extract_string(a.spec_json, '$.time_limit_s') as bigint) as time_limit_s,
    json_extract_string(a.spec_json, '$.checkpoint_policy') as checkpoint_policy,
    coalesce(
      lower(json_extract_string(a.spec_json, '$.checkpoint_policy')) not in ('', 'none', 'never', 'false'), false
    ) as has_checkpoint_policy,
    try_cast(json_extract_string(a.spec_json, '$.min_replicas') as integer) as min_replicas,
    json_extract_string(a.spec_json, '$.rollback') as rollback_method,
    json_extract_string(a.spec_json, '$.reservation') as reservation,
    a.submitted_at,
    t.first_started_at,
    a.finished_at,
    coalesce(a.finished_at, t.last_ended_at) as last_ended_at,
    case
      when a.finished_at is not null then coalesce(a.finish_state, 'FINISHED')
      when t.is_running then 'RUNNING'
      else 'PENDING'
    end as status,
    a.finish_state as final_state,
    a.finish_reason as final_reason,
    a.finish_exit_code as exit_code,
    a.finished_at is not null as is_finished,
    coalesce(a.finish_state in ('FAILED', 'TIMEOUT', 'OUT_OF_MEMORY', 'NODE_FAIL', 'BOOT_FAIL', 'DEADLINE'), false)
      as is_failed,
    case
      when a.finish_state in ('FAILED', 'TIMEOUT', 'OUT_OF_MEMORY', 'NODE_FAIL', 'BOOT_FAIL', 'DEADLINE')
        then coalesce(nullif(trim(a.finish_reason), ''), a.finish_state)
    end as failure_reason,
    coalesce(t.attempts, 1) as attempts,
    coalesce(t.attempts, 1) - 1 as retries,
    a.preemptions,
    a.requeues,
    epoch(t.first_started_at - a.submitted_at) as queue_wait_s,
    -- waiting work (PRODUCT.md "Waiting work"), defined here once: a job waits from its submit until
    -- it first starts or ends, whichever comes first; one that ended without ever starting was
    -- cancelled while queued, its pending age = end - submit
    least(t.first_started_at, a.finished_at) as pending_ended_at,
    t.first_started_at is null and a.finished_at is not null and a.submitted_at is not null
      as is_cancelled_while_queued,
    case
      when t.first_started_at is null and a.finished_at is not null and a.submitted_at is not null
        then epoch(a.finished_at - a.submitted_at)
    end as cancelled_pending_age_s,
    t.run_time_s
  from attributes a
  left join attempt_totals t using (source, job_id)
)

select * from final
