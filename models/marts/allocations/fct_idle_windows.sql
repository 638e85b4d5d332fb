-- merged by allocation (macros/build_window.sql): a build re-reads every telemetry minute of the
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

policy as (
  select * from {{ ref('idle_policy') }}
),

-- the most specific policy row wins: queue, then template, then default
resolved_policy as (
  select
    a.allocation_id,
    p.activity_threshold,
    p.window_minutes,
    p.memory_floor_mib,
    case p.scope when 'default' then 'default' else p.scope || ':' || p.scope_value end as policy_scope
  from allocations a
  join policy p
    on (p.scope = 'queue' and p.scope_value = a.queue)
    or (p.scope = 'template' and p.scope_value = a.template)
    or p.scope = 'default'
  qualify row_number() over (
    partition by a.allocation_id
    order by case p.scope when 'queue' then 1 when 'template' then 2 else 3 end
  ) = 1
),

-- a minute without telemetry is not evidence of idleness: it breaks a run
idle_minutes as (
  select
    m.allocation_id,
    m.minute_at,
    m.activity,
    m.fb_used_mib
  from {{ ref('fct_allocation_activity') }} m
  {%- if is_incremental() %}
  semi join allocation_days using (allocation_id, day)
  {%- endif %}
  join resolved_policy r using (allocation_id)
  where m.activity < r.activity_threshold
    and (r.memory_floor_mib is null or coalesce(m.fb_used_mib < r.memory_floor_mib, false))
),

-- gaps and islands: consecutive minutes share minute_at - n minutes
islands as (
  select
    *,
    minute_at - to_minutes(row_number() over (partition by allocation_id order by minute_at)) as island_key
  from idle_minutes
),

windows as (
  select
    allocation_id,
    min(minute_at) as first_minute_at,
    max(minute_at) + interval 1 minute as last_minute_end_at,
    count(*) as idle_minute_count,
    avg(activity) as mean_activity,
    max(fb_used_mib) as peak_fb_used_mib
  from islands
  group by allocation_id, island_key
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
    greatest(w.first_minute_at, a.started_at) as window_start_at,
    least(w.last_minute_end_at, a.effective_ended_at) as window_end_at,
    epoch(least(w.last_minute_end_at, a.effective_ended_at) - greatest(w.first_minute_at, a.started_at)) / 60.0
      as idle_minutes,
    epoch(least(w.last_minute_end_at, a.effective_ended_at) - greatest(w.first_minute_at, a.started_at)) / 3600.0
      * a.fraction as idle_gpu_hours,
    w.mean_activity,
    w.peak_fb_used_mib,
    a.is_running and w.last_minute_end_at >= a.effective_ended_at as is_ongoing,
    r.activity_threshold,
    r.window_minutes,
    r.memory_floor_mib,
    r.policy_scope
  from windows w
  join resolved_policy r using (allocation_id)
  join allocations a using (allocation_id)
  -- "sustained for window_minutes" is elapsed time inside the allocation, not a count of sampled
  -- minutes: a window clipped at the allocation's start or end must still span the whole window
  where epoch(least(w.last_minute_end_at, a.effective_ended_at) - greatest(w.first_minute_at, a.started_at)) / 60.0
    >= r.window_minutes
)

select * from final
