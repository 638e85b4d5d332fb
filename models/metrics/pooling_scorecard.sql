-- The pool scored against the four pooling stages of PRODUCT.md ("The problem"), per UTC calendar
-- month: each stage's inputs read from the metric views over the month's days, each input scored 0..100 by a straight
-- line between the thresholds below (at or past `full` 100, at or past `zero` 0), the stage's
-- score the mean of its inputs' scores. A threshold is an opinion: change it here and in the yml.
-- Two full-score thresholds are the pool's stated targets, carried on their stage's rows for the
-- dashboards' target bands (utilisation_target_pct, wait_p95_target_s): they are not copied elsewhere.
with thresholds as (
  select
    50.0 as reporting_zero_pct,        -- project-owned: GPUs of the inventory that sent telemetry
    95.0 as reporting_full_pct,
    50.0 as idle_visible_zero_pct,     -- project-owned: allocated GPU-hours with telemetry (idleness seen)
    95.0 as idle_visible_full_pct,
    0.0 as rules_zero_pct,             -- shared queues: queues with a quota or a limit
    100.0 as rules_full_pct,
    14400.0 as wait_p95_zero_s,        -- shared queues: queue wait p95 of the month's jobs (4 h ...
    900.0 as wait_p95_full_s,          -- ... to 15 min)
    20.0 as preempted_zero_pct,        -- shared queues: attempts ended by a preemption, of those admitted
    2.0 as preempted_full_pct,
    0.0 as shared_zero_pct,            -- elastic sharing: physical GPUs split by MIG or time-slicing
    25.0 as shared_full_pct,
    20.0 as utilisation_zero_pct,      -- elastic sharing: utilisation of allocated GPUs
    70.0 as utilisation_full_pct
),

months as (
  select * from {{ ref('pack_month') }}
),

daily as (
  select
    cast(date_trunc('month', day) as date) as month,
    sum(allocated_gpu_hours) as allocated_gpu_hours,
    sum(allocated_gpu_hours_without_telemetry) as allocated_gpu_hours_without_telemetry
  from {{ ref('pool_daily') }}
  group by 1
),

-- the physical GPUs of the inventory in effect on the month's days, split or not, and whether
-- they (or any of their MIG instances) sent telemetry that month
gpus as (
  select
    cast(date_trunc('month', c.day) as date) as month,
    c.host,
    c.gpu,
    bool_or(c.share_mode in ('mig', 'timeslice')) as is_shared
  from {{ ref('fct_capacity_daily') }} c
  group by all
),

reporting as (
  select distinct cast(date_trunc('month', day) as date) as month, host, gpu
  from {{ ref('fct_gpu_daily') }}
  where telemetry_minutes > 0
),

gpu_counts as (
  select
    g.month,
    count(*) as physical_gpus,
    count(r.gpu) as reporting_gpus,
    count(*) filter (where g.is_shared) as shared_gpus
  from gpus g
  left join reporting r on r.month = g.month and r.host = g.host and r.gpu = g.gpu
  group by 1
),

-- queue rules are a snapshot (the latest): every month reads the same rules
queue_rules as (
  select
    queue,
    bool_or(coalesce(quota_gpus, 0) > 0 or max_gpus_per_request is not null or max_runtime_s is not null) as has_rules
  from {{ ref('queue_rules') }}
  group by 1
),

queue_counts as (
  select count(*) as queues, count(*) filter (where has_rules) as queues_with_rules from queue_rules
),

queue_activity as (
  select
    cast(date_trunc('month', day) as date) as month,
    cast(sum(admissions) as bigint) as admissions,
    cast(sum(preemptions) as bigint) as preemptions,
    cast(sum(requeues) as bigint) as requeues
  from {{ ref('queue_daily') }}
  group by 1
),

-- metrics.catalog is written at the end of the build, after the views: looked up by name so the
-- view builds before it exists and reads it once it does (0 metrics when it is missing)
catalog as (
  select coalesce(max(estimated_size), 0) as catalog_metrics
  from duckdb_tables()
  where schema_name = 'metrics' and table_name = 'catalog'
),

advice as (
  select period_month as month, count(*) as capacity_recommendations
  from {{ ref('capacity_recommendations') }}
  group by 1
),

enforcement as (
  select cast(date_trunc('month', day) as date) as month, count(*) as applied_enforcement_actions
  from {{ ref('enforcement_actions') }}
  where is_applied and action_kind in ('reclaim', 'preempt', 'remind')
  group by 1
),

ledger as (
  select cast(date_trunc('month', day) as date) as month, count(*) as ledger_entries
  from {{ ref('reclaim_ledger') }}
  where record_source = 'audit'
  group by 1
),

inputs as (
  select
    m.month,
    m.first_day,
    m.last_day,
    coalesce(gpu_counts.physical_gpus, 0) as physical_gpus,
    coalesce(gpu_counts.reporting_gpus, 0) as reporting_gpus,
    100.0 * gpu_counts.reporting_gpus / nullif(gpu_counts.physical_gpus, 0) as gpus_reporting_pct,
    daily.allocated_gpu_hours,
    100.0 * (daily.allocated_gpu_hours - coalesce(daily.allocated_gpu_hours_without_telemetry, 0))
      / nullif(daily.allocated_gpu_hours, 0) as idle_visible_share_pct,
    100.0 * m.idle_allocated_gpu_hours / nullif(m.allocated_gpu_hours, 0) as idle_allocated_share_pct,
    queue_counts.queues,
    queue_counts.queues_with_rules,
    100.0 * queue_counts.queues_with_rules / nullif(queue_counts.queues, 0) as queues_with_rules_pct,
    m.queue_wait_p95_s,
    coalesce(queue_activity.admissions, 0) as admissions,
    coalesce(queue_activity.preemptions, 0) as preemptions,
    coalesce(queue_activity.requeues, 0) as requeues,
    100.0 * queue_activity.preemptions / nullif(queue_activity.admissions, 0) as preempted_attempts_pct,
    coalesce(gpu_counts.shared_gpus, 0) as shared_gpus,
    100.0 * gpu_counts.shared_gpus / nullif(gpu_counts.physical_gpus, 0) as shared_gpus_pct,
    m.utilisation_of_allocated_pct,
    catalog.catalog_metrics,
    coalesce(advice.capacity_recommendations, 0) as capacity_recommendations,
    coalesce(enforcement.applied_enforcement_actions, 0) as applied_enforcement_actions,
    coalesce(ledger.ledger_entries, 0) as ledger_entries,
    100.0 * least(coalesce(ledger.ledger_entries, 0), enforcement.applied_enforcement_actions)
      / nullif(enforcement.applied_enforcement_actions, 0) as ledger_coverage_pct
  from months m
  cross join queue_counts
  cross join catalog
  left join daily using (month)
  left join gpu_counts using (month)
  left join queue_activity using (month)
  left join advice using (month)
  left join enforcement using (month)
  left join ledger using (month)
),

-- each input on a straight line from its zero threshold (0) to its full one (100), clamped;
-- a missing input scores 0 (nothing seen is not a pass)
scored as (
  select
    inputs.*,
    coalesce(greatest(0, least(100, 100 * (gpus_reporting_pct - reporting_zero_pct)
      / (reporting_full_pct - reporting_zero_pct))), 0) as s_reporting,
    coalesce(greatest(0, least(100, 100 * (idle_visible_share_pct - idle_visible_zero_pct)
      / (idle_visible_full_pct - idle_visible_zero_pct))), 0) as s_idle_visible,
    coalesce(greatest(0, least(100, 100 * (queues_with_rules_pct - rules_zero_pct)
      / (rules_full_pct - rules_zero_pct))), 0) as s_rules,
    coalesce(greatest(0, least(100, 100 * (wait_p95_zero_s - queue_wait_p95_s)
      / (wait_p95_zero_s - wait_p95_full_s))), 0) as s_wait,
    coalesce(greatest(0, least(100, 100 * (preempted_zero_pct - preempted_attempts_pct)
      / (preempted_zero_pct - preempted_full_pct))), 0) as s_preempted,
    coalesce(greatest(0, least(100, 100 * (shared_gpus_pct - shared_zero_pct)
      / (shared_full_pct - shared_zero_pct))), 0) as s_shared,
    coalesce(greatest(0, least(100, 100 * (utilisation_of_allocated_pct - utilisation_zero_pct)
      / (utilisation_full_pct - utilisation_zero_pct))), 0) as s_utilisation,
    case when catalog_metrics > 0 then 100.0 else 0.0 end as s_catalog,
    case when capacity_recommendations > 0 then 100.0 else 0.0 end as s_advice,
    coalesce(ledger_coverage_pct, 0) as s_ledger,
    thresholds.*
  from inputs
  cross join thresholds
),

stages as (
  select 1 as stage_order, 'project_owned' as stage, 'visibility' as criterion,
    (s_reporting + s_idle_visible) / 2 as score_pct,
    format('telemetry from GPUs: {:g}% -> 0, {:g}% -> 100; allocated GPU-hours with telemetry: {:g}% -> 0, {:g}% -> 100; mean',  -- noqa: LT05
      reporting_zero_pct, reporting_full_pct, idle_visible_zero_pct, idle_visible_full_pct) as score_rule,
    *
  from scored
  union all
  select 2, 'shared_queues', 'clear rules',
    (s_rules + s_wait + s_preempted) / 3,
    format('queues with a quota or limit: {:g}% -> 0, {:g}% -> 100; wait p95: {:g} s -> 0, {:g} s -> 100; '
      || 'preempted attempts: {:g}% -> 0, {:g}% -> 100; mean',
      rules_zero_pct, rules_full_pct, wait_p95_zero_s, wait_p95_full_s, preempted_zero_pct, preempted_full_pct),
    *
  from scored
  union all
  select 3, 'elastic_sharing', 'higher utilisation',
    (s_shared + s_utilisation) / 2,
    format('GPUs in MIG or time-slicing: {:g}% -> 0, {:g}% -> 100; utilisation of allocated: {:g}% -> 0, {:g}% -> 100; mean',  -- noqa: LT05
      shared_zero_pct, shared_full_pct, utilisation_zero_pct, utilisation_full_pct),
    *
  from scored
  union all
  select 4, 'resource_operations', 'decisions from data',
    (s_catalog + s_advice + s_ledger) / 3,
    'one metric catalog built: 0 or 100; capacity advice for the month: 0 or 100; '
      || 'applied reclaims, preemptions and reminders in the reclaim ledger: its share; mean',
    *
  from scored
),

final as (
  select
    month,
    stage,
    stage_order,
    criterion,
    round(score_pct, 1) as score_pct,
    score_rule,
    first_day,
    last_day,
    -- project-owned
    case when stage = 'project_owned' then physical_gpus end as physical_gpus,
    case when stage = 'project_owned' then reporting_gpus end as reporting_gpus,
    case when stage = 'project_owned' then gpus_reporting_pct end as gpus_reporting_pct,
    case when stage = 'project_owned' then allocated_gpu_hours end as allocated_gpu_hours,
    case when stage = 'project_owned' then idle_visible_share_pct end as idle_visible_share_pct,
    case when stage = 'project_owned' then idle_allocated_share_pct end as idle_allocated_share_pct,
    -- shared queues
    case when stage = 'shared_queues' then queues end as queues,
    case when stage = 'shared_queues' then queues_with_rules end as queues_with_rules,
    case when stage = 'shared_queues' then queues_with_rules_pct end as queues_with_rules_pct,
    case when stage = 'shared_queues' then queue_wait_p95_s end as queue_wait_p95_s,
    case when stage = 'shared_queues' then admissions end as admissions,
    case when stage = 'shared_queues' then preemptions end as preemptions,
    case when stage = 'shared_queues' then requeues end as requeues,
    case when stage = 'shared_queues' then preempted_attempts_pct end as preempted_attempts_pct,
    case when stage = 'shared_queues' then wait_p95_full_s end as wait_p95_target_s,
    -- elastic sharing
    case when stage = 'elastic_sharing' then shared_gpus end as shared_gpus,
    case when stage = 'elastic_sharing' then shared_gpus_pct end as shared_gpus_pct,
    case when stage = 'elastic_sharing' then utilisation_of_allocated_pct end as utilisation_of_allocated_pct,
    case when stage = 'elastic_sharing' then utilisation_full_pct end as utilisation_target_pct,
    -- resource operations
    case when stage = 'resource_operations' then catalog_metrics end as catalog_metrics,
    case when stage = 'resource_operations' then capacity_recommendations end as capacity_recommendations,
    case when stage = 'resource_operations' then applied_enforcement_actions end as applied_enforcement_actions,
    case when stage = 'resource_operations' then ledger_entries end as ledger_entries,
    case when stage = 'resource_operations' then ledger_coverage_pct end as ledger_coverage_pct
  from stages
)

select * from final
