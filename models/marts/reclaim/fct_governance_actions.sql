-- One step of one finding (an idempotency key) as the pipeline decided it, what became of it, and
-- what the engine answered. The engine's own word is the audit log; the decision log's answer
-- line stands in where no audit record carries the key, and any disagreement is flagged.
-- Merged by step (macros/build_window.sql, in_window_governance_steps): a build re-reads the steps with
-- a line or an audit record in the window's days, of a job in the window, or whose audit records or
-- ledger row changed; every other step's row is left as it is.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_governance_steps', window_key='idempotency_key') }}
with log_lines as (
  select * from {{ ref('stg_governance__actions') }}
  where {{ in_window_governance_steps() }}
),

audit_records as (
  select * from {{ ref('fct_audit_events') }}
  where action like 'enforcement.%' and idempotency_key in (select idempotency_key from log_lines)
),

attempts as (
  select * from {{ ref('fct_job_attempts') }}
),

jobs as (
  select * from {{ ref('dim_jobs') }}
),

ledger as (
  select * from {{ ref('fct_reclaim_ledger') }}
  where idempotency_key in (select idempotency_key from log_lines)
),

decisions as (
  select
    idempotency_key,
    min(recorded_at) as decided_at,
    arg_min(finding_id, recorded_at) as finding_id,
    arg_min(policy, recorded_at) as policy,
    arg_min(policy_version, recorded_at) as policy_version,
    arg_min(policy_kind, recorded_at) as policy_kind,
    arg_min(mode, recorded_at) as mode,
    arg_min(step_index, recorded_at) as step_index,
    arg_min(action, recorded_at) as action,
    arg_min(engine, recorded_at) as engine,
    arg_min(job_id, recorded_at) as job_id,
    arg_min(attempt, recorded_at) as attempt,
    arg_min(tenant, recorded_at) as tenant,
    arg_min(queue, recorded_at) as queue,
    arg_min(reason, recorded_at) as reason,
    arg_min(status_reason, recorded_at) as decision_status_reason,
    arg_min(detected_at, recorded_at) as detected_at,
    arg_min(window_start_at, recorded_at) as window_start_at,
    arg_min(window_end_at, recorded_at) as window_end_at,
    arg_min(gpus_flagged, recorded_at) as gpus_flagged,
    arg_min(gpus_held, recorded_at) as gpus_held,
    arg_min(gpu_hours, recorded_at) as evidence_gpu_hours,
    arg_min(recommendation, recorded_at) as recommendation,
    arg_min(evidence_json, recorded_at) as evidence_json
  from log_lines
  where record_type = 'decision'
  group by idempotency_key
),

latest as (
  select idempotency_key, status as final_status, status_reason as final_status_reason, recorded_at as status_at
  from log_lines
  where is_latest_for_key
),

-- the decision log's answer: the latest answer line of the key
log_answers as (
  select
    idempotency_key,
    arg_max(outcome, recorded_at) as log_outcome,
    arg_max(outcome_reason, recorded_at) as log_outcome_reason,
    max(recorded_at) as log_answered_at,
    max(delivery_attempts) as delivery_attempts
  from log_lines
  where record_type = 'answer'
  group by idempotency_key
),

-- the engine's answer in the audit log: the first applied/proposed record of the key (a repeat
-- answers already_done), else its latest record
audit_answers as (
  select
    idempotency_key,
    arg_min(decision, (case when decision in ('applied', 'proposed') then 0 else 1 end,
                       case when decision in ('applied', 'proposed') then epoch(occurred_at)
                         else -epoch(occurred_at) end))
      as audit_outcome,
    arg_min(occurred_at, (case when decision in ('applied', 'proposed') then 0 else 1 end,
                          case when decision in ('applied', 'proposed') then epoch(occurred_at)
                            else -epoch(occurred_at) end))
      as audit_answered_at,
    arg_min(reason, (case when decision in ('applied', 'proposed') then 0 else 1 end,
                     case when decision in ('applied', 'proposed') then epoch(occurred_at)
                       else -epoch(occurred_at) end))
      as audit_reason,
    count(*) as audit_records
  from audit_records
  group by idempotency_key
),

-- the attempt the step acted on, and how it ended
attempt_ends as (
  select
    d.idempotency_key,
    t.ended_at as attempt_ended_at,
    t.end_event_type as attempt_end_event_type,
    t.end_state as attempt_end_state,
    t.end_reason as attempt_end_reason
  from decisions d
  join attempts t on t.source = d.engine and t.job_id = d.job_id and t.attempt = d.attempt
),

joined as (
  select
    d.*,
    l.final_status,
    l.final_status_reason,
    l.status_at,
    la.log_outcome,
    la.log_outcome_reason,
    la.log_answered_at,
    la.delivery_attempts,
    aa.audit_outcome,
    aa.audit_answered_at,
    aa.audit_reason,
    aa.audit_records,
    e.attempt_ended_at,
    e.attempt_end_event_type,
    e.attempt_end_state,
    e.attempt_end_reason,
    j.final_state as job_final_state,
    j.last_ended_at as job_ended_at
  from decisions d
  left join latest l using (idempotency_key)
  left join log_answers la using (idempotency_key)
  left join audit_answers aa using (idempotency_key)
  left join attempt_ends e using (idempotency_key)
  left join jobs j on j.source = d.engine and j.job_id = d.job_id
),

-- one ledger row per applied step (an audit record, else the log's answer)
ledger_by_key as (
  select *
  from ledger
  where idempotency_key is not null
  qualify row_number() over (partition by idempotency_key order by acted_at) = 1
),

final as (
  select
    j.idempotency_key,
    j.finding_id,
    j.policy,
    j.policy_version,
    j.policy_kind,
    j.mode,
    j.step_index,
    j.action,
    j.engine,
    j.job_id,
    j.attempt,
    j.tenant,
    j.queue,
    j.decided_at,
    cast(j.decided_at as date) as day,
    j.reason,
    j.decision_status_reason,
    j.final_status,
    j.final_status_reason,
    j.status_at,
    coalesce(j.audit_outcome, j.log_outcome) as engine_outcome,
    case when j.audit_outcome is not null then 'audit' when j.log_outcome is not null then 'decision_log' end
      as outcome_source,
    j.audit_outcome,
    j.log_outcome,
    -- already_done in the log after an applied audit record is the same answer (a retried delivery)
    coalesce(
      case when j.audit_outcome = 'already_done' then 'applied' else j.audit_outcome end
        <> case when j.log_outcome = 'already_done' then 'applied' else j.log_outcome end,
      false
    ) as has_outcome_disagreement,
    coalesce(j.audit_reason, j.log_outcome_reason) as outcome_reason,
    coalesce(j.audit_answered_at, j.log_answered_at) as answered_at,
    j.delivery_attempts,
    coalesce(j.audit_records, 0) as audit_records,
    -- what a dashboard groups by: the engine's answer, else where the decision stopped
    coalesce(j.audit_outcome, j.log_outcome, j.final_status) as outcome,
    j.detected_at,
    j.window_start_at,
    j.window_end_at,
    epoch(j.window_end_at - j.window_start_at) as window_s,
    j.gpus_flagged,
    j.gpus_held,
    j.evidence_gpu_hours,
    j.recommendation,
    j.evidence_json,
    j.attempt_ended_at,
    j.attempt_end_event_type,
    j.attempt_end_state,
    j.attempt_end_reason,
    j.job_final_state,
    j.job_ended_at,
    coalesce(
      j.action in ('reclaim', 'preempt', 'cap_runtime')
      and coalesce(j.audit_outcome, j.log_outcome) = 'applied'
      and j.attempt_ended_at between coalesce(j.audit_answered_at, j.log_answered_at, j.decided_at) - interval 5 minute
        and coalesce(j.audit_answered_at, j.log_answered_at, j.decided_at) + interval 5 minute,
      false
    ) as is_ended_by_action,
    lg.ledger_id,
    lg.recovered_gpu_hours,
    lg.reused_gpu_hours,
    lg.is_false_positive,
    lg.reminder_due_at,
    lg.is_released_after_reminder
  from joined j
  left join ledger_by_key lg using (idempotency_key)
)

select * from final
