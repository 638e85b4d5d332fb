with actions as (
  select * from marts.fct_audit_events where category = 'enforcement'
),

allocations as (
  select * from marts.fct_allocations
),

jobs as (
  select * from marts.dim_jobs
),

queue_caps as (
  select queue, min(max_runtime_s) as max_runtime_s
  from marts.dim_queues
  group by queue
),

reclaims as (
  select *
  from actions
  where action = 'enforcement.reclaim' and decision = 'applied' and lower(coalesce(object_kind, 'job')) = 'job'
),

-- the attempt the reclaim ended: running when the action was taken, the first to end after it
-- (five minutes of slack for log ordering); all its GPUs
ended_allocations as (
  select
    r.audit_id,
    a.allocation_id,
    a.source,
    a.job_id,
    a.attempt,
    a.fraction,
    a.started_at,
    a.ended_at
  from reclaims r
  join allocations a
    on a.job_id = r.object_name
    and a.started_at <= r.occurred_at
    and a.ended_at >= r.occurred_at - interval 5 minute
  qualify dense_rank() over (partition by r.audit_id order by a.ended_at, a.source, a.attempt) = 1
),

recovered as (
  select
    e.audit_id,
    any_value(e.job_id) as job_id,
    any_value(e.attempt) as attempt,
    count(*) as allocations_ended,
    sum(e.fraction) as gpus_released,
    max(e.ended_at) as allocation_ended_at,
    -- expected run = the shortest declared bound: expected run time, time limit, queue cap
    any_value(least(j.expected_runtime_s, j.time_limit_s, q.max_runtime_s)) as runtime_bound_s,
    max(e.started_at + to_seconds(least(j.expected_runtime_s, j.time_limit_s, q.max_runtime_s)))
      as expected_end_at,
    sum(
      greatest(
        epoch(e.started_at + to_seconds(least(j.expected_runtime_s, j.time_limit_s, q.max_runtime_s)) - e.ended_at),
        0
      ) / 3600.0 * e.fraction
    ) as recovered_gpu_hours
  from ended_allocations e
  left join jobs j using (source, job_id)
  left join queue_caps q on q.queue = j.queue
  group by e.audit_id
),

final as (
  select
    a.audit_id,
    a.occurred_at,
    a.day,
    a.action,
    replace(a.action, 'enforcement.', '') as action_kind,
    a.decision,
    a.decision = 'applied' as is_applied,
    a.actor,
    a.actor_role,
    a.object_kind,
    a.object_namespace,
    a.object_name,
    case when lower(coalesce(a.object_kind, 'job')) = 'job' then a.object_name end as job_id,
    a.reason,
    a.request_id,
    a.idempotency_key,
    r.attempt as ended_attempt,
    r.allocations_ended,
    r.gpus_released,
    r.allocation_ended_at,
    r.runtime_bound_s,
    r.expected_end_at,
    r.recovered_gpu_hours,
    case
      when a.action <> 'enforcement.reclaim' then 'not a reclaim'
      when a.decision <> 'applied' then 'not applied (' || coalesce(a.decision, 'no decision') || ')'
      when r.audit_id is null then 'no allocation of the job ended at the reclaim'
      when r.runtime_bound_s is null then 'no declared run time, time limit or queue cap: recovery unknown'
      else 'expected end (start + shortest declared run-time bound) - actual end, x fraction'
    end as recovery_basis
  from actions a
  left join recovered r using (audit_id)
)

select * from final
