-- Training attempts against their declared checkpoint policy, per month (of the attempt's end; a running one
-- in the month of the data's end) and tenant (marts.fct_attempt_checkpoints). Only time policies (hourly,
-- every N min/hours) are judged; step and epoch policies have no interval.
with attempts as (
  select
    cast(date_trunc('month', observed_until_at) as date) as month,
    coalesce(tenant, 'unknown') as tenant,
    source,
    job_id,
    checkpoint_policy_kind,
    is_policy_breach,
    policy_breach_kind
  from {{ ref('fct_attempt_checkpoints') }}
  where template = 'training'
),

final as (
  select
    month,
    tenant,
    count(*) as training_attempts,
    count(*) filter (where checkpoint_policy_kind = 'time') as attempts_with_time_policy,
    count(*) filter (where is_policy_breach) as policy_breaches,
    count(*) filter (where policy_breach_kind = 'no_checkpoint') as breaches_without_checkpoint,
    -- count(distinct (a, b)) counts distinct row values; sqlfluff reads DISTINCT (...) as a call
    count(distinct (source, job_id)) filter (where is_policy_breach) as jobs_breaching,  -- noqa: ST08, LT01, LT06
    100.0 * count(*) filter (where is_policy_breach)
      / nullif(count(*) filter (where checkpoint_policy_kind = 'time'), 0) as policy_breach_rate_pct
  from attempts
  group by month, tenant
)

select * from final
