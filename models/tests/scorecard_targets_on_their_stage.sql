-- The pooling scorecard's targets (the thresholds the dashboards draw) are on their stage's rows only,
-- one value for every month, within their units' range: wait p95 target on shared_queues (seconds > 0),
-- utilisation target on elastic_sharing (0 < pct <= 100).
with targets as (
  select
    count(distinct wait_p95_target_s) filter (where stage = 'shared_queues') as wait_values,
    count(*) filter (where stage = 'shared_queues' and (wait_p95_target_s is null or wait_p95_target_s <= 0))
      as wait_bad,
    count(*) filter (where stage <> 'shared_queues' and wait_p95_target_s is not null) as wait_elsewhere,
    count(distinct utilisation_target_pct) filter (where stage = 'elastic_sharing') as util_values,
    count(*) filter (where stage = 'elastic_sharing'
      and (utilisation_target_pct is null or utilisation_target_pct <= 0 or utilisation_target_pct > 100)) as util_bad,
    count(*) filter (where stage <> 'elastic_sharing' and utilisation_target_pct is not null) as util_elsewhere
  from {{ ref('pooling_scorecard') }}
)

select * from targets
where wait_values > 1 or wait_bad > 0 or wait_elsewhere > 0
  or util_values > 1 or util_bad > 0 or util_elsewhere > 0
