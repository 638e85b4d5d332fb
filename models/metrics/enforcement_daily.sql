with actions as (
  select * from {{ ref('fct_enforcement_actions') }}
),

final as (
  select
    day,
    action_kind,
    decision,
    count(*) as actions,
    coalesce(sum(gpus_released), 0) as gpus_released,
    coalesce(sum(recovered_gpu_hours), 0) as recovered_gpu_hours,
    coalesce(sum(reused_gpu_hours), 0) as reused_gpu_hours,
    count(*) filter (where action_kind in ('reclaim', 'preempt') and is_applied and recovered_gpu_hours is null)
      as reclaims_with_unknown_recovery
  from actions
  group by day, action_kind, decision
)

select * from final
