-- The pool's checkpoint figures over the whole loaded window (what `gpupool demo` prints): policy breaches
-- (metrics.checkpoint_policy_breaches) and work lost at failures (metrics.work_lost), their months and tenants
-- summed, with the breach rate applied to the sums.
with breaches as (
  select * from {{ ref('checkpoint_policy_breaches') }}
),

lost as (
  select * from {{ ref('work_lost') }}
),

breach_totals as (
  select
    cast(coalesce(sum(training_attempts), 0) as bigint) as training_attempts,
    cast(coalesce(sum(attempts_with_time_policy), 0) as bigint) as attempts_with_time_policy,
    cast(coalesce(sum(policy_breaches), 0) as bigint) as policy_breaches,
    cast(coalesce(sum(breaches_without_checkpoint), 0) as bigint) as breaches_without_checkpoint
  from breaches
),

lost_totals as (
  select
    cast(coalesce(sum(attempts), 0) as bigint) as failed_attempts,
    cast(coalesce(sum(attempts_without_checkpoint), 0) as bigint) as failed_attempts_without_checkpoint,
    coalesce(sum(work_lost_gpu_hours), 0.0) as work_lost_gpu_hours
  from lost
),

final as (
  select
    b.training_attempts,
    b.attempts_with_time_policy,
    b.policy_breaches,
    b.breaches_without_checkpoint,
    100.0 * b.policy_breaches / nullif(b.attempts_with_time_policy, 0) as policy_breach_rate_pct,
    l.failed_attempts,
    l.failed_attempts_without_checkpoint,
    l.work_lost_gpu_hours
  from breach_totals b
  cross join lost_totals l
)

select * from final
