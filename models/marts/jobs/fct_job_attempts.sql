-- merged by job (macros/build_window.sql): a build re-reads the events of the jobs with an event in the
-- window and of those whose attempt the last build left open or ended in the window
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_attempt_jobs', window_key='source, job_id') }}
with events as (
  select * from {{ ref('stg_scheduler__job_events') }}
  where {{ in_window_attempt_jobs() }}
),

as_of as (
  select max(as_of_at) as as_of_at from {{ ref('dim_days') }}
),

attempt_numbers as (
  select distinct source, job_id, attempt from events
),

submits as (
  select source, job_id, min(occurred_at) as submitted_at
  from events
  where event_type = 'submit'
  group by source, job_id
),

admits as (
  select source, job_id, attempt, min(occurred_at) as admitted_at
  from events
  where event_type = 'admit'
  group by source, job_id, attempt
),

starts as (
  select source, job_id, attempt, min(occurred_at) as started_at
  from events
  where event_type = 'start'
  group by source, job_id, attempt
),

end_events as (
  select
    source,
    job_id,
    attempt,
    occurred_at,
    event_type,
    state,
    reason,
    exit_code,
    -- same instant: the more specific cause first
    case event_type when 'preempt' then 0 when 'requeue' then 1 else 2 end as cause_rank
  from events
  where event_type in ('requeue', 'preempt', 'finish')
),

-- a started attempt ends at the first requeue, preempt or finish at or after its start, whether the
-- source numbers that event with the ending attempt or with the next one
ends_of_started as (
  select
    s.source,
    s.job_id,
    s.attempt,
    arg_min(e.occurred_at, (e.occurred_at, e.cause_rank)) as ended_at,
    arg_min(e.event_type, (e.occurred_at, e.cause_rank)) as end_event_type,
    arg_min_null(e.state, (e.occurred_at, e.cause_rank)) as end_state,
    arg_min_null(e.reason, (e.occurred_at, e.cause_rank)) as end_reason,
    arg_min_null(e.exit_code, (e.occurred_at, e.cause_rank)) as exit_code
  from starts s
  join end_events e
    on e.source = s.source
    and e.job_id = s.job_id
    and e.attempt >= s.attempt
    and e.occurred_at >= s.started_at
  group by s.source, s.job_id, s.attempt
),

-- an attempt that never started (cancelled while queued) ends with its own end event
ends_of_unstarted as (
  select
    e.source,
    e.job_id,
    e.attempt,
    arg_min(e.occurred_at, (e.occurred_at, e.cause_rank)) as ended_at,
    arg_min(e.event_type, (e.occurred_at, e.cause_rank)) as end_event_type,
    arg_min_null(e.state, (e.occurred_at, e.cause_rank)) as end_state,
    arg_min_null(e.reason, (e.occurred_at, e.cause_rank)) as end_reason,
    arg_min_null(e.exit_code, (e.occurred_at, e.cause_rank)) as exit_code
  from end_events e
  anti join starts using (source, job_id, attempt)
  -- an event that already ended a started attempt (numbered with the next attempt) is not this one's end
  anti join ends_of_started used
    on used.source = e.source and used.job_id = e.job_id
    and used.ended_at = e.occurred_at and used.end_event_type = e.event_type
  group by e.source, e.job_id, e.attempt
),

attempt_ends as (
  select * from ends_of_started
  union all
  select * from ends_of_unstarted
),

joined as (
  select
    n.source,
    n.job_id,
    n.attempt,
    sub.submitted_at,
    adm.admitted_at,
    st.started_at,
    en.ended_at,
    en.end_event_type,
    en.end_state,
    en.end_reason,
    en.exit_code,
    lag(en.ended_at) over w as previous_ended_at,
    lag(en.end_event_type) over w as previous_end_event_type,
    max(n.attempt) over (partition by n.source, n.job_id) as last_attempt
  from attempt_numbers n
  left join submits sub using (source, job_id)
  left join admits adm using (source, job_id, attempt)
  left join starts st using (source, job_id, attempt)
  left join attempt_ends en using (source, job_id, attempt)
  window w as (partition by n.source, n.job_id order by n.attempt)
),

-- an attempt queues from the submit (attempt 1) or from the requeue/preemption that ended the previous one
queued as (
  select
    *,
    case
      when attempt = 1 then submitted_at
      when previous_end_event_type in ('requeue', 'preempt') then previous_ended_at
    end as queued_at
  from joined
),

final as (
  select
    q.source,
    q.job_id,
    q.attempt,
    q.submitted_at,
    q.queued_at,
    q.admitted_at,
    q.started_at,
    q.ended_at,
    q.end_event_type,
    q.end_state,
    q.end_reason,
    q.exit_code,
    q.started_at is not null as is_started,
    q.started_at is not null and q.ended_at is null as is_running,
    q.attempt = q.last_attempt as is_last_attempt,
    epoch(q.admitted_at - q.queued_at) as admission_wait_s,
    epoch(q.started_at - q.queued_at) as start_wait_s,
    case
      when q.started_at is not null
        then greatest(epoch(coalesce(q.ended_at, a.as_of_at) - q.started_at), 0)
    end as run_time_s
  from queued q
  cross join as_of a
)

select * from final
