-- The governance pipeline's decisions per day: how many findings and steps each policy produced
-- per tenant and mode, and where they ended (the engine's answer, else the decision's status).
with actions as (
  select * from {{ ref('fct_governance_actions') }}
),

final as (
  select
    day,
    policy,
    tenant,
    mode,
    outcome,
    count(distinct finding_id) as findings,
    count(*) as actions,
    count(*) filter (where engine_outcome = 'applied') as applied,
    count(*) filter (where engine_outcome = 'refused') as refused,
    count(*) filter (where engine_outcome = 'already_done') as already_done,
    count(*) filter (where engine_outcome = 'dry_run') as dry_run,
    count(*) filter (where final_status = 'exempt') as exempt,
    count(*) filter (where final_status = 'rate_limited') as rate_limited,
    count(*) filter (where final_status = 'shadow') as shadow,
    count(*) filter (where final_status = 'recommended') as recommended,
    count(*) filter (where final_status = 'dropped') as dropped,
    count(*) filter (where final_status = 'queued') as queued,
    count(*) filter (where has_outcome_disagreement) as outcome_disagreements,
    count(*) filter (where action = 'remind' and engine_outcome = 'applied') as reminders_applied,
    count(*) filter (where is_released_after_reminder) as released_after_reminder,
    count(*) filter (where action in ('reclaim', 'preempt') and engine_outcome = 'applied') as reclaims_applied,
    count(*) filter (where is_false_positive) as false_positives,
    coalesce(sum(recovered_gpu_hours), 0) as recovered_gpu_hours,
    coalesce(sum(reused_gpu_hours), 0) as reused_gpu_hours,
    coalesce(sum(evidence_gpu_hours), 0) as evidence_gpu_hours
  from actions
  group by day, policy, tenant, mode, outcome
)

select * from final
