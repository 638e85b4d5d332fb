-- the idle rule (marts.dim_idle_rules, from the policy catalog) applied to every allocation's telemetry
-- minutes: the same windows the live idle-allocation policy finds (pipelines/policies/idle.py:idle_windows;
-- tests/models/test_idle_rule_agreement.py holds the two equal).
-- Merged by allocation (macros/build_window.sql): a build re-reads every telemetry minute of the
-- allocations the window reaches (a window can start long before it) and of no other
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_allocations_or_gone', window_key='allocation_id') }}
with allocations as materialized (
  select * from {{ ref('fct_allocations') }}
  where {{ in_window_allocations() }}
),

-- their days: joined on (allocation_id, day), the per-minute table is read only on those days' row groups
allocation_days as (
  select allocation_id, day from {{ ref('fct_allocation_segments') }}
  semi join allocations using (allocation_id)
),

rules as (
  select * from {{ ref('dim_idle_rules') }}
),

-- the most specific row wins (its parameters are already resolved as the policy catalog resolves them):
-- queue and template, then queue, then template, then the default
resolved_rule as (
  select
    a.allocation_id,
    r.policy_scope,
    r.is_enabled,
    r.activity_threshold,
    r.window_minutes,
    r.memory_floor_mib,
    r.spike_max_minutes,
    r.min_coverage
  from allocations a
  join rules r
    on (r.queue is null or r.queue = a.queue)
    and (r.template is null or r.template = a.template)
  qualify row_number() over (
    partition by a.allocation_id
    order by r.queue is null, r.template is null
  ) = 1
),

-- every telemetry minute, idle or not: a busy or missing run of at most spike_max_minutes between
-- idle minutes does not break a window (keep-alive pings, scrape hiccups); a longer one does
minutes as (
  select
    m.allocation_id,
    m.minute_at,
    m.activity,
    m.fb_used_mib,
    r.spike_max_minutes,
    coalesce(
      m.activity < r.activity_threshold
      and (r.memory_floor_mib is null or m.fb_used_mib < r.memory_floor_mib),
      false
    ) as is_idle
  from {{ ref('fct_allocation_activity') }} m
  {%- if is_incremental() %}
  semi join allocation_days using (allocation_id, day)
  {%- endif %}
  join resolved_rule r using (allocation_id)
),

marked as (
  select
    *,
    max(case when is_idle then minute_at end) over (
      partition by allocation_id order by minute_at rows between unbounded preceding and 1 preceding
    ) as previous_idle_at,
    not is_idle
    and coalesce(lag(is_idle) over (partition by allocation_id order by minute_at), false) as is_spike_start
  from minutes
),

-- a run starts at an idle minute with no idle minute in the spike_max_minutes before it
runs as (
  select
    *,
    sum(
      case
        when is_idle and (
          previous_idle_at is null
          or floor(epoch(minute_at - previous_idle_at) / 60) - 1 > spike_max_minutes
        ) then 1 else 0
      end
    ) over (partition by allocation_id order by minute_at rows between unbounded preceding and current row) as run
  from marked
),

run_minutes as (
  select
    *,
    max(case when is_idle then minute_at end) over (partition by allocation_id, run) as run_last_idle_at
  from runs
  where run > 0
),

windows as (
  select
    allocation_id,
    min(minute_at) as first_minute_at,
    max(minute_at) as last_idle_minute_at,
    count(*) as telemetry_minutes,
    count(*) filter (where is_idle) as idle_minute_count,
    count(*) filter (where is_spike_start) as spikes_bridged,
    avg(activity) as mean_activity,
    max(fb_used_mib) as peak_fb_used_mib
  from run_minutes
  where minute_at <= run_last_idle_at
  group by allocation_id, run
),

clipped as (
  select
    w.*,
    greatest(w.first_minute_at, a.started_at) as window_start_at,
    least(w.last_idle_minute_at + interval 1 minute, a.effective_ended_at) as window_end_at,
    floor(epoch(w.last_idle_minute_at - w.first_minute_at) / 60) + 1 as bucket_minutes
  from windows w
  join allocations a using (allocation_id)
),

final as (
  select
    w.allocation_id || '@' || strftime(w.first_minute_at, '%Y-%m-%dT%H:%M') as idle_window_id,
    a.allocation_id,
    a.source,
    a.job_id,
    a.attempt,
    a.tenant,
    a.queue,
    a.template,
    a.user_name,
    a.host,
    a.gpu,
    a.gpu_instance_id,
    a.gpu_model,
    a.fraction,
    w.window_start_at,
    w.window_end_at,
    epoch(w.window_end_at - w.window_start_at) / 60.0 as idle_minutes,
    epoch(w.window_end_at - w.window_start_at) / 3600.0 * a.fraction as idle_gpu_hours,
    w.telemetry_minutes,
    w.telemetry_minutes - w.idle_minute_count as busy_minutes,
    cast(w.bucket_minutes - w.telemetry_minutes as bigint) as missing_minutes,
    w.spikes_bridged,
    w.mean_activity,
    w.peak_fb_used_mib,
    a.is_running and w.last_idle_minute_at + interval 1 minute >= a.effective_ended_at as is_ongoing,
    r.activity_threshold,
    r.window_minutes,
    r.memory_floor_mib,
    r.spike_max_minutes,
    r.min_coverage,
    r.policy_scope,
    r.is_enabled as is_policy_enabled
  from clipped w
  join resolved_rule r using (allocation_id)
  join allocations a using (allocation_id)
  -- "sustained for window_minutes" is elapsed time inside the allocation, not a count of sampled
  -- minutes: a window clipped at the allocation's start or end must still span the whole window;
  -- and min_coverage of its minutes must have telemetry (missing minutes are never taken as idle)
  where epoch(w.window_end_at - w.window_start_at) / 60.0 >= r.window_minutes
    and w.telemetry_minutes >= r.min_coverage * w.bucket_minutes
)

select * from final
