-- The reclaim ledger: every applied reclaim, preempt and reminder, whoever asked for it (the
-- governance pipeline's decision log or an operator), with the GPU time it freed, how much of
-- that other work used, whether the owner came back within the hour, and whether a reminder
-- made the user release the GPUs on their own. The one definition of recovered GPU-hours.
-- Merged by job id (macros/build_window.sql, in_window_ledger_jobs): a build re-reads the actions of
-- the jobs the window reaches, with all their inputs, and leaves every other job's rows as they are.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_ledger_jobs', window_key='job_id') }}
with window_job_ids as (
  {{ ledger_window_jobs() }}
),

all_log_lines as (
  select * from {{ ref('stg_governance__actions') }}
),

-- the findings of those jobs: a later step of the finding dates a reminder's due time
window_findings as (
  select distinct finding_id from all_log_lines where {{ in_cte('job_id', 'window_job_ids') }}
),

log_lines as (
  select * from all_log_lines
  where {{ in_cte('job_id', 'window_job_ids') }} or {{ in_cte('finding_id', 'window_findings') }}
),

-- the jobs' enforcement records, and any record that answered one of their steps
audit_records as (
  select * from {{ ref('fct_audit_events') }}
  where {{ in_cte('object_name', 'window_job_ids') }}
    or idempotency_key in (select idempotency_key from log_lines)
),

allocations as (
  select * from {{ ref('fct_allocations') }}
),

attempts as (
  select * from {{ ref('fct_job_attempts') }}
  where {{ in_cte('job_id', 'window_job_ids') }}
),

jobs as (
  select * from {{ ref('dim_jobs') }}
),

queue_caps as (
  select queue, min(max_runtime_s) as max_runtime_s
  from {{ ref('dim_queues') }}
  group by queue
),

as_of as (
  select max(as_of_at) as as_of_at from {{ ref('dim_days') }}
),

-- one row per idempotency key: the step as the pipeline decided it
decided_steps as (
  select
    idempotency_key,
    arg_min(finding_id, recorded_at) as finding_id,
    arg_min(policy, recorded_at) as policy,
    arg_min(policy_version, recorded_at) as policy_version,
    arg_min(policy_kind, recorded_at) as policy_kind,
    arg_min(mode, recorded_at) as mode,
    arg_min(step_index, recorded_at) as step_index,
    arg_min(action, recorded_at) as action,
    arg_min(engine, recorded_at) as engine,
    arg_min(job_id, recorded_at) as job_id,
    arg_min(reason, recorded_at) as reason,
    min(recorded_at) as decided_at
  from log_lines
  where record_type = 'decision'
  group by idempotency_key
),

-- the next step of the same finding, when the log has it: when it was decided
next_steps as (
  select
    d.idempotency_key,
    min(n.decided_at) as next_step_decided_at
  from decided_steps d
  join decided_steps n
    on n.finding_id = d.finding_id
    and n.step_index = d.step_index + 1
  group by d.idempotency_key
),

-- applied answers the decision log has (slurm and kueue may not write the allocator's audit log);
-- already_done alone means the applied answer was lost: the action happened, at the latest then
log_applied as (
  select
    idempotency_key,
    min(recorded_at) as answered_at
  from log_lines
  where record_type = 'answer' and outcome in ('applied', 'already_done') and action in ('reclaim', 'preempt', 'remind')
  group by idempotency_key
),

audit_applied as (
  select *
  from audit_records
  where action in ('enforcement.reclaim', 'enforcement.preempt', 'enforcement.remind')
    and decision = 'applied'
    and lower(coalesce(object_kind, 'job')) = 'job'
),

-- the engine's own word first (the audit log); a decision-log answer only where no audit record has the key
applied as (
  select
    audit_id as ledger_id,
    'audit' as record_source,
    audit_id,
    idempotency_key,
    replace(action, 'enforcement.', '') as action_kind,
    case when source in ('slurm', 'kueue') then source else 'allocator' end as engine,
    object_name as job_id,
    occurred_at as acted_at,
    actor,
    actor_role,
    reason
  from audit_applied
  union all
  select
    'log:' || l.idempotency_key as ledger_id,
    'decision_log' as record_source,
    cast(null as varchar) as audit_id,
    l.idempotency_key,
    d.action as action_kind,
    d.engine,
    d.job_id,
    l.answered_at as acted_at,
    'gpupool-governance' as actor,
    'governance_bot' as actor_role,
    d.reason
  from log_applied l
  join decided_steps d using (idempotency_key)
  -- the audit log answered this key (whatever it said): its word stands
  anti join audit_records a on a.idempotency_key = l.idempotency_key and a.action like 'enforcement.%'
),

-- only the window's jobs (a finding's other jobs were read for their steps' times)
window_applied as (
  select * from applied where {{ in_cte('job_id', 'window_job_ids') }}
),

with_policy as (
  select
    a.*,
    d.idempotency_key is not null as is_from_decision_log,
    -- the allocator writes "(policy <name> <version>)" into the reason of a pipeline action
    coalesce(d.policy, nullif(regexp_extract(a.reason, '\(policy ([^ )]+)', 1), '')) as policy,
    coalesce(d.policy_version, nullif(regexp_extract(a.reason, '\(policy [^ )]+ ([^)]+)\)', 1), '')) as policy_version,
    d.policy_kind,
    d.mode,
    d.finding_id,
    d.step_index,
    d.decided_at,
    n.next_step_decided_at
  from window_applied a
  left join decided_steps d on d.idempotency_key = a.idempotency_key
  left join next_steps n on n.idempotency_key = a.idempotency_key
),

-- the attempt a reclaim or preemption ended: running when the action was taken, the first to end
-- after it (five minutes of slack for log ordering); all its GPUs, slices and shares
freed as (
  select
    w.ledger_id,
    w.acted_at as reclaimed_at,
    al.allocation_id,
    al.source,
    al.job_id,
    al.attempt,
    al.host,
    al.gpu,
    al.gpu_instance_id,
    al.gpu_model,
    al.fraction,
    al.started_at,
    al.ended_at
  from with_policy w
  join allocations al
    on al.source = w.engine
    and al.job_id = w.job_id
    and al.started_at <= w.acted_at
    and coalesce(al.ended_at, w.acted_at) >= w.acted_at - interval 5 minute
  where w.action_kind in ('reclaim', 'preempt')
  qualify dense_rank() over (partition by w.ledger_id order by al.ended_at nulls last, al.attempt) = 1
),

-- run-time caps set on the attempt before the reclaim (enforcement.cap_runtime applied)
runtime_caps as (
  select
    f.ledger_id,
    min(try_cast(json_extract_string(c.after_json, '$.runtime_cap_s') as bigint)) as runtime_cap_s
  from (select distinct ledger_id, reclaimed_at, source, job_id, started_at from freed) f
  join audit_records c
    on c.action = 'enforcement.cap_runtime'
    and c.decision = 'applied'
    and c.object_name = f.job_id
    and c.occurred_at >= f.started_at
    and c.occurred_at <= f.reclaimed_at
  group by f.ledger_id
),

-- when the attempt would have ended without the reclaim: its run-time limit (cap_runtime, the
-- job's time limit, the queue's max run time), or a training job's declared expected run time
-- while that is still ahead; with neither, a 24 h horizon
bounds as (
  select
    f.ledger_id,
    any_value(f.reclaimed_at) as reclaimed_at,
    any_value(f.source) as source,
    any_value(f.job_id) as job_id,
    any_value(f.attempt) as attempt,
    min(f.started_at) as attempt_started_at,
    any_value(f.gpu_model) as gpu_model,
    count(*) as allocations_freed,
    sum(f.fraction) as gpus_freed,
    any_value(c.runtime_cap_s) as runtime_cap_s,
    any_value(j.time_limit_s) as time_limit_s,
    any_value(q.max_runtime_s) as queue_max_runtime_s,
    any_value(j.expected_runtime_s) filter (where j.template = 'training') as expected_runtime_s
  from freed f
  left join runtime_caps c using (ledger_id)
  left join jobs j on j.source = f.source and j.job_id = f.job_id
  left join queue_caps q on q.queue = j.queue
  group by f.ledger_id
),

limits as (
  select
    *,
    least(runtime_cap_s, time_limit_s, queue_max_runtime_s) as runtime_limit_s,
    attempt_started_at + to_seconds(least(runtime_cap_s, time_limit_s, queue_max_runtime_s)) as limit_end_at,
    case
      when attempt_started_at + to_seconds(expected_runtime_s) > reclaimed_at
        then attempt_started_at + to_seconds(expected_runtime_s)
    end as expected_end_at
  from bounds
),

would_end as (
  select
    *,
    greatest(coalesce(least(limit_end_at, expected_end_at), reclaimed_at + interval 24 hour), reclaimed_at)
      as would_end_at,
    case
      when limit_end_at is null and expected_end_at is null then 'no limit: 24 h horizon'
      when expected_end_at is not null and (limit_end_at is null or expected_end_at <= limit_end_at)
        then 'declared expected run time'
      when runtime_limit_s = runtime_cap_s then 'run-time cap set by enforcement'
      when runtime_limit_s = time_limit_s then 'job time limit'
      else 'queue max run time'
    end as would_end_basis
  from limits
),

-- GPU time recovered per freed allocation, and the time other allocations held the same GPU (or
-- slice) inside the recovered window, each at most the freed fraction
per_allocation as (
  select
    f.ledger_id,
    f.allocation_id,
    f.fraction,
    epoch(w.would_end_at - f.reclaimed_at) / 3600.0 * f.fraction as recovered_gpu_hours,
    w.would_end_at
  from freed f
  join would_end w using (ledger_id)
),

reuse_by_allocation as (
  select
    p.ledger_id,
    p.allocation_id,
    sum(
      epoch(least(o.effective_ended_at, p.would_end_at) - greatest(o.started_at, f.reclaimed_at)) / 3600.0
      * least(o.fraction, f.fraction)
    ) as reused_gpu_hours
  from per_allocation p
  join freed f using (ledger_id, allocation_id)
  join allocations o
    on o.host = f.host
    and o.gpu = f.gpu
    -- a whole GPU is reused by anything on it; a slice or share by the same instance or a whole-GPU holder
    and (f.gpu_instance_id is null or o.gpu_instance_id is null or o.gpu_instance_id = f.gpu_instance_id)
    and not (o.source = f.source and o.job_id = f.job_id and o.attempt = f.attempt)
    and o.started_at < p.would_end_at
    and o.effective_ended_at > f.reclaimed_at
  group by p.ledger_id, p.allocation_id
),

recovery as (
  select
    p.ledger_id,
    sum(p.recovered_gpu_hours) as recovered_gpu_hours,
    sum(least(coalesce(r.reused_gpu_hours, 0), p.recovered_gpu_hours)) as reused_gpu_hours
  from per_allocation p
  left join reuse_by_allocation r using (ledger_id, allocation_id)
  group by p.ledger_id
),

-- the owner back within the hour: same tenant and user, another job with the same name or the
-- resubmitted id <job>-r<n>
resubmissions as (
  select
    w.ledger_id,
    min(j2.submitted_at) as resubmitted_at,
    arg_min(j2.job_id, j2.submitted_at) as resubmitted_job_id
  from would_end w
  join jobs j on j.source = w.source and j.job_id = w.job_id
  join jobs j2
    on j2.source = j.source
    and j2.job_id <> j.job_id
    and j2.tenant = j.tenant
    and j2.user_name is not distinct from j.user_name
    and j2.submitted_at >= w.reclaimed_at
    and j2.submitted_at <= w.reclaimed_at + interval 1 hour
    and (
      j2.job_name = j.job_name
      or (
        starts_with(j2.job_id, split_part(j.job_id, '-r', 1) || '-r')
        and regexp_full_match(substr(j2.job_id, length(split_part(j.job_id, '-r', 1)) + 3), '[0-9]+')
      )
    )
  group by w.ledger_id
),

-- job-ending enforcement (reclaim, preempt, a cap already past) applied to a job: not a release by its user
ending_actions as (
  select object_name as job_id, occurred_at
  from audit_records
  where action in ('enforcement.reclaim', 'enforcement.preempt', 'enforcement.cap_runtime') and decision = 'applied'
),

-- reminders: the attempt running when reminded, and whether it ended on its own before the next
-- step was due (the next step's decision in the log, else 1 h after the reminder)
reminders as (
  select
    w.ledger_id,
    w.engine as source,
    w.job_id,
    coalesce(w.next_step_decided_at, w.acted_at + interval 1 hour) as reminder_due_at,
    case when w.next_step_decided_at is not null then 'next step decided' else 'default 1 h' end
      as reminder_due_basis,
    t.attempt,
    t.ended_at,
    t.end_event_type,
    t.end_state,
    t.end_reason
  from with_policy w
  left join attempts t
    on t.source = w.engine
    and t.job_id = w.job_id
    and t.started_at <= w.acted_at
    and (t.ended_at is null or t.ended_at >= w.acted_at)
  where w.action_kind = 'remind'
  qualify row_number() over (partition by w.ledger_id order by t.started_at desc nulls last) = 1
),

reminder_outcomes as (
  select
    r.ledger_id,
    r.attempt,
    r.reminder_due_at,
    r.reminder_due_basis,
    r.ended_at as released_at,
    coalesce(
      r.ended_at <= r.reminder_due_at
      and r.end_event_type = 'finish'
      and coalesce(r.end_state, '') <> 'TIMEOUT'
      and coalesce(r.end_reason, '') not like 'reclaimed%'
      and coalesce(r.end_reason, '') not like 'preempted%'
      and not exists (
        select 1 from ending_actions e
        where e.job_id = r.job_id
          and e.occurred_at between r.ended_at - interval 5 minute and r.ended_at + interval 1 minute
      ),
      false
    ) as is_released_after_reminder
  from reminders r
),

final as (
  select
    w.ledger_id,
    w.record_source,
    w.audit_id,
    w.idempotency_key,
    w.is_from_decision_log,
    w.action_kind,
    w.engine,
    w.actor,
    w.actor_role,
    w.policy,
    w.policy_version,
    w.policy_kind,
    w.mode,
    w.finding_id,
    w.step_index,
    w.reason,
    w.job_id,
    coalesce(b.attempt, m.attempt) as attempt,
    j.tenant,
    j.queue,
    j.template,
    j.user_name,
    j.job_name,
    b.gpu_model,
    w.acted_at,
    cast(w.acted_at as date) as day,
    case when w.action_kind in ('reclaim', 'preempt') then w.acted_at end as reclaimed_at,
    b.attempt_started_at,
    b.allocations_freed,
    b.gpus_freed,
    b.runtime_cap_s,
    b.time_limit_s,
    b.queue_max_runtime_s,
    b.expected_runtime_s,
    b.runtime_limit_s,
    b.expected_end_at,
    b.would_end_at,
    b.would_end_basis,
    24.0 as no_limit_horizon_h,
    rc.recovered_gpu_hours,
    rc.reused_gpu_hours,
    100.0 * rc.reused_gpu_hours / nullif(rc.recovered_gpu_hours, 0) as reuse_share_pct,
    b.would_end_at <= o.as_of_at as is_reuse_window_observed,
    rs.resubmitted_job_id,
    rs.resubmitted_at,
    case when w.action_kind in ('reclaim', 'preempt') then rs.ledger_id is not null end as is_false_positive,
    m.reminder_due_at,
    m.reminder_due_basis,
    m.released_at,
    m.is_released_after_reminder
  from with_policy w
  cross join as_of o
  left join would_end b using (ledger_id)
  left join recovery rc using (ledger_id)
  left join resubmissions rs using (ledger_id)
  left join reminder_outcomes m using (ledger_id)
  left join jobs j on j.source = w.engine and j.job_id = w.job_id
)

select * from final
