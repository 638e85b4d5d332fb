-- month x tenant x cause of the attempts that ended in the month, plus cause = 'all' per month x tenant,
-- and tenant = 'all' (the pool) for each month x cause.
-- The failure rate of a cause is over all the month's ended attempts of the tenant (or the pool).
with attempts as (
  select
    cast(date_trunc('month', ended_at) as date) as month,
    coalesce(tenant, 'unknown') as tenant,
    cause,
    is_failure,
    is_user_fault,
    gpu_hours_lost
  from {{ ref('fct_attempt_outcomes') }}
),

outcomes as (
  select * from attempts
  union all
  select month, 'all' as tenant, cause, is_failure, is_user_fault, gpu_hours_lost from attempts
),

by_cause as (
  select
    month,
    tenant,
    cause,
    count(*) as attempts,
    count(*) filter (where is_failure) as failures,
    count(*) filter (where is_failure and not is_user_fault) as failures_not_user_fault,
    sum(gpu_hours_lost) as gpu_hours_lost
  from outcomes
  group by all
  union all
  select
    month,
    tenant,
    'all' as cause,
    count(*) as attempts,
    count(*) filter (where is_failure) as failures,
    count(*) filter (where is_failure and not is_user_fault) as failures_not_user_fault,
    sum(gpu_hours_lost) as gpu_hours_lost
  from outcomes
  group by all
),

final as (
  select
    b.month,
    b.tenant,
    b.cause,
    b.attempts,
    b.failures,
    100.0 * b.failures / t.attempts as failure_rate_pct,
    b.gpu_hours_lost,
    100.0 * b.failures_not_user_fault / nullif(b.failures, 0) as not_user_fault_pct
  from by_cause b
  join by_cause t on t.month = b.month and t.tenant = b.tenant and t.cause = 'all'
)

select * from final
