-- Every enforcement action in the audit log. What an applied reclaim or preemption recovered is
-- defined once, in marts.fct_reclaim_ledger, and read from there.
-- Merged by action (macros/build_window.sql, in_window_enforcement_actions): a build re-reads the
-- actions recorded in the window's days and those whose ledger row the ledger now states otherwise.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_enforcement_actions', window_key='audit_id') }}
with actions as (
  select * from {{ ref('fct_audit_events') }}
  where category = 'enforcement' and {{ in_window_enforcement_actions() }}
),

ledger as (
  select * from {{ ref('fct_reclaim_ledger') }} where record_source = 'audit'
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
    l.policy,
    l.policy_version,
    case when l.action_kind in ('reclaim', 'preempt') then l.attempt end as ended_attempt,
    l.allocations_freed as allocations_ended,
    l.gpus_freed as gpus_released,
    l.would_end_at,
    l.would_end_basis,
    l.recovered_gpu_hours,
    l.reused_gpu_hours,
    l.is_false_positive,
    case
      when a.action not in ('enforcement.reclaim', 'enforcement.preempt') then 'not a reclaim or preemption'
      when a.decision <> 'applied' then 'not applied (' || coalesce(a.decision, 'no decision') || ')'
      when l.allocations_freed is null then 'no allocation of the job was running at the action'
      else 'freed GPUs x (would_end_at - action time): ' || l.would_end_basis
    end as recovery_basis
  from actions a
  left join ledger l on l.ledger_id = a.audit_id
)

select * from final
