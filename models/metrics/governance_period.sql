-- The whole loaded window, per tenant and for the pool ('all'): the ledger's headline figures
-- (what `gpupool demo` prints). Sums the ledger's rows, then applies the ratio definitions.
with ledger as (
  select * from {{ ref('fct_reclaim_ledger') }}
),

decided as (
  select * from {{ ref('fct_governance_actions') }}
),

window_days as (
  select min(day) as first_day, max(day) as last_day from {{ ref('dim_days') }}
),

ledger_by_tenant as (
  select
    coalesce(tenant, 'unknown') as tenant,
    count(*) filter (where action_kind in ('reclaim', 'preempt')) as reclaims,
    count(*) filter (where action_kind in ('reclaim', 'preempt') and is_from_decision_log) as pipeline_reclaims,
    coalesce(sum(gpus_freed), 0) as gpus_freed,
    coalesce(sum(recovered_gpu_hours), 0) as recovered_gpu_hours,
    coalesce(sum(reused_gpu_hours), 0) as reused_gpu_hours,
    count(*) filter (where is_false_positive) as false_positives,
    count(*) filter (where action_kind = 'remind') as reminders,
    count(*) filter (where is_released_after_reminder) as released_after_reminder
  from ledger
  group by all
),

decided_by_tenant as (
  select
    coalesce(tenant, 'unknown') as tenant,
    count(*) as decided_actions,
    count(*) filter (where engine_outcome = 'applied') as applied,
    count(*) filter (where engine_outcome = 'refused') as refused,
    count(*) filter (where final_status = 'exempt') as exempt,
    count(*) filter (where final_status = 'rate_limited') as rate_limited,
    count(*) filter (where final_status = 'shadow') as shadow
  from decided
  group by all
),

by_tenant as (
  select
    tenant,
    coalesce(l.reclaims, 0) as reclaims,
    coalesce(l.pipeline_reclaims, 0) as pipeline_reclaims,
    coalesce(l.gpus_freed, 0) as gpus_freed,
    coalesce(l.recovered_gpu_hours, 0) as recovered_gpu_hours,
    coalesce(l.reused_gpu_hours, 0) as reused_gpu_hours,
    coalesce(l.false_positives, 0) as false_positives,
    coalesce(l.reminders, 0) as reminders,
    coalesce(l.released_after_reminder, 0) as released_after_reminder,
    coalesce(d.decided_actions, 0) as decided_actions,
    coalesce(d.applied, 0) as applied,
    coalesce(d.refused, 0) as refused,
    coalesce(d.exempt, 0) as exempt,
    coalesce(d.rate_limited, 0) as rate_limited,
    coalesce(d.shadow, 0) as shadow
  from ledger_by_tenant l
  full join decided_by_tenant d using (tenant)
),

pool as (
  select
    'all' as tenant,
    coalesce(sum(reclaims), 0) as reclaims,
    coalesce(sum(pipeline_reclaims), 0) as pipeline_reclaims,
    coalesce(sum(gpus_freed), 0) as gpus_freed,
    coalesce(sum(recovered_gpu_hours), 0) as recovered_gpu_hours,
    coalesce(sum(reused_gpu_hours), 0) as reused_gpu_hours,
    coalesce(sum(false_positives), 0) as false_positives,
    coalesce(sum(reminders), 0) as reminders,
    coalesce(sum(released_after_reminder), 0) as released_after_reminder,
    coalesce(sum(decided_actions), 0) as decided_actions,
    coalesce(sum(applied), 0) as applied,
    coalesce(sum(refused), 0) as refused,
    coalesce(sum(exempt), 0) as exempt,
    coalesce(sum(rate_limited), 0) as rate_limited,
    coalesce(sum(shadow), 0) as shadow
  from by_tenant
),

unioned as (
  select * from by_tenant
  union all by name
  select * from pool
),

final as (
  select
    u.tenant,
    w.first_day,
    w.last_day,
    cast(u.reclaims as bigint) as reclaims,
    cast(u.pipeline_reclaims as bigint) as pipeline_reclaims,
    u.gpus_freed,
    u.recovered_gpu_hours,
    u.reused_gpu_hours,
    100.0 * u.reused_gpu_hours / nullif(u.recovered_gpu_hours, 0) as reuse_share_pct,
    cast(u.false_positives as bigint) as false_positives,
    100.0 * u.false_positives / nullif(u.reclaims, 0) as false_positive_rate_pct,
    cast(u.reminders as bigint) as reminders,
    cast(u.released_after_reminder as bigint) as released_after_reminder,
    100.0 * u.released_after_reminder / nullif(u.reminders, 0) as self_release_rate_pct,
    cast(u.decided_actions as bigint) as decided_actions,
    cast(u.applied as bigint) as applied,
    cast(u.refused as bigint) as refused,
    cast(u.exempt as bigint) as exempt,
    cast(u.rate_limited as bigint) as rate_limited,
    cast(u.shadow as bigint) as shadow
  from unioned u
  cross join window_days w
)

select * from final
