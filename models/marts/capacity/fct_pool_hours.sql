-- the pool hour by hour, as stored: GPUs held, active, waiting, quota and capacity per GPU model, for each
-- queue and for the model as a whole. Held GPUs are the step function of fct_allocation_steps
-- cut at the hours, so an hour knows both its GPU-hours and its peak; in-quota and borrowed
-- GPU-hours are taken moment by moment. Read it through fct_pool_hourly, which adds each hour's trailing
-- week: the weeks move with every build's data end, so stored they would change every row of history
-- each day (and every month of it in each release, pipelines/lake/release_chunks.py).
-- Incremental (macros/build_window.sql, in_window_pool_hours): a build replaces the hours of the days from
-- the window's start (or the previous data's end, an earlier snapshot's day, or the first hour waited by a
-- job the window reaches) on, and every hour of a series that is new, gone, or changed owner or quota status.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_pool_hours', window_key='level_scope, gpu_model, queue') }}
{%- set start_day = pool_hours_start_literal() %}
{%- set start_at = 'cast(' ~ start_day ~ ' as timestamp)' %}
with days as (
  select * from {{ ref('dim_days') }}
),

-- series whose every hour is rebuilt (none on a full refresh: every hour is)
changed as (
  {%- if is_incremental() %}
  {{ pool_changed_series() }}
  {%- else %}
  select cast(null as varchar) as level_scope, cast(null as varchar) as gpu_model, cast(null as varchar) as queue_key
  where false
  {%- endif %}
),

all_allocations as (
  select allocation_id, queue, gpu_model, fraction, started_at, effective_ended_at
  from {{ ref('fct_allocations') }}
  where effective_ended_at > started_at
),

changed_allocations as (
  select * from all_allocations a
  where ('queue', a.gpu_model, a.queue) in (select * from changed)
    or ('pool', a.gpu_model, '') in (select * from changed)
),

-- the allocations alive from the start on, and every allocation of a changed series
allocations as (
  select * from all_allocations where effective_ended_at > {{ start_at }}
  union all
  select * from changed_allocations where effective_ended_at <= {{ start_at }}
),

quotas as (
  select day, queue, gpu_model, tenant, quota_gpus from {{ ref('fct_quota_daily') }}
),

capacity as (
  select day, gpu_model, count(*) as capacity_gpus
  from {{ ref('fct_capacity_daily') }}
  group by day, gpu_model
),

-- every hour of the data window; the last one is cut at the data's end
hours as (
  select
    d.day,
    h.range as hour_at,
    least(h.range + interval 1 hour, d.day_end_at) as hour_end_at,
    epoch(least(h.range + interval 1 hour, d.day_end_at) - h.range) / 3600.0 as hour_hours
  from days d
  cross join range(d.day_start_at, d.day_end_at, interval 1 hour) h
),

-- GPUs held per queue and for the whole model
held_levels as (
  select level_scope, queue, gpu_model, level_start_at, level_end_at, allocated_gpus
  from {{ ref('fct_allocation_steps') }}
  where level_scope in ('queue', 'pool') and level_end_at > {{ start_at }}
  union all
  select level_scope, queue, gpu_model, level_start_at, level_end_at, allocated_gpus
  from {{ ref('fct_allocation_steps') }}
  where level_scope in ('queue', 'pool') and level_end_at <= {{ start_at }}
    and (level_scope, gpu_model, coalesce(queue, '')) in (select * from changed)
),

-- each level cut at the hours it overlaps
level_pieces as (
  select
    l.level_scope,
    l.queue,
    l.gpu_model,
    h.range as hour_at,
    l.allocated_gpus,
    epoch(least(l.level_end_at, h.range + interval 1 hour) - greatest(l.level_start_at, h.range)) / 3600.0 as hours
  from held_levels l
  cross join range(date_trunc('hour', l.level_start_at), l.level_end_at, interval 1 hour) h
),

piece_quota as (
  select
    p.*,
    coalesce(q.quota_gpus, 0) as quota_gpus
  from level_pieces p
  left join quotas q
    on p.level_scope = 'queue'
    and q.day = cast(p.hour_at as date)
    and q.queue = p.queue
    and q.gpu_model = p.gpu_model
),

held_hourly as (
  select
    level_scope,
    queue,
    gpu_model,
    hour_at,
    sum(allocated_gpus * hours) as allocated_gpu_hours,
    max(allocated_gpus) as peak_allocated_gpus,
    sum(least(allocated_gpus, quota_gpus) * hours) as in_quota_gpu_hours,
    sum(greatest(allocated_gpus - quota_gpus, 0) * hours) as borrowed_gpu_hours
  from piece_quota
  group by level_scope, queue, gpu_model, hour_at
),

-- active GPU-hours per allocation-hour: the mean activity of its telemetry minutes in the hour x
-- its allocated GPU-hours in the hour (active_gpu_hours' definition at hourly grain)
allocation_pieces as (
  select
    a.allocation_id,
    a.queue,
    a.gpu_model,
    h.range as hour_at,
    epoch(least(a.effective_ended_at, h.range + interval 1 hour) - greatest(a.started_at, h.range)) / 3600.0
      * a.fraction as allocated_gpu_hours
  from allocations a
  cross join range(date_trunc('hour', a.started_at), a.effective_ended_at, interval 1 hour) h
),

-- the minutes from the start on (a range that prunes), and before it those of a changed series' allocations
allocation_minutes as (
  select allocation_id, minute_at, activity from {{ ref('fct_allocation_activity') }}
  where minute_at >= {{ start_at }}
  union all
  select allocation_id, minute_at, activity from {{ ref('fct_allocation_activity') }}
  where minute_at < {{ start_at }}
    and allocation_id in (select allocation_id from changed_allocations)
),

allocation_hour_activity as (
  select allocation_id, date_trunc('hour', minute_at) as hour_at, avg(activity) as mean_activity
  from allocation_minutes
  group by allocation_id, date_trunc('hour', minute_at)
),

active_queue_hourly as (
  select
    p.queue,
    p.gpu_model,
    p.hour_at,
    sum(coalesce(t.mean_activity, 0) * p.allocated_gpu_hours) as active_gpu_hours
  from allocation_pieces p
  left join allocation_hour_activity t using (allocation_id, hour_at)
  group by p.queue, p.gpu_model, p.hour_at
),

active_hourly as (
  select 'queue' as level_scope, queue, gpu_model, hour_at, active_gpu_hours from active_queue_hourly
  union all
  select 'pool', null, gpu_model, hour_at, sum(active_gpu_hours) from active_queue_hourly group by gpu_model, hour_at
),

-- pending demand: the GPU-hours waited per hour, and the quota-bound part of them, as the
-- wait-time decomposition defines them (fct_wait_causes); not recomputed here
pending_queue_hourly as (
  select
    queue,
    gpu_model,
    hour_at,
    sum(waited_gpu_hours) as pending_gpu_hours,
    coalesce(sum(waited_gpu_hours) filter (where cause = 'quota_bound'), 0) as quota_bound_gpu_hours
  from (
    select * from {{ ref('fct_wait_causes') }} where hour_at >= {{ start_at }}
    union all
    select * from {{ ref('fct_wait_causes') }}
    where hour_at < {{ start_at }}
      and (('queue', gpu_model, queue) in (select * from changed) or ('pool', gpu_model, '') in (select * from changed))
  )
  group by queue, gpu_model, hour_at
),

pending_hourly as (
  select 'queue' as level_scope, queue, gpu_model, hour_at, pending_gpu_hours, quota_bound_gpu_hours
  from pending_queue_hourly
  union all
  select 'pool', null, gpu_model, hour_at, sum(pending_gpu_hours), sum(quota_bound_gpu_hours)
  from pending_queue_hourly
  group by gpu_model, hour_at
),

-- every series, with its owner and quota status (over all days)
series as (
  {{ pool_series() }}
),

pool_quota as (
  select day, gpu_model, sum(quota_gpus) as quota_gpus from quotas group by day, gpu_model
),

-- the hours the build replaces: from the first rebuilt day on, and every hour of a changed series
grid as (
  select
    s.level_scope,
    s.queue,
    s.gpu_model,
    w.day,
    w.hour_at,
    w.hour_end_at,
    w.hour_hours
  from series s
  cross join hours w
  where w.day >= {{ start_day }}
    or (s.level_scope, s.gpu_model, coalesce(s.queue, '')) in (select * from changed)
),

final as (
  select
    g.hour_at,
    g.hour_end_at,
    g.day,
    g.hour_hours,
    g.level_scope,
    g.gpu_model,
    g.queue,
    s.tenant,
    s.is_quota_queue,
    coalesce(c.capacity_gpus, 0) as capacity_gpus,
    coalesce(c.capacity_gpus, 0) * g.hour_hours as capacity_gpu_hours,
    coalesce(q.quota_gpus, pq.quota_gpus, 0) as quota_gpus,
    coalesce(q.quota_gpus, pq.quota_gpus, 0) * g.hour_hours as quota_gpu_hours,
    coalesce(hh.allocated_gpu_hours, 0) as allocated_gpu_hours,
    coalesce(hh.allocated_gpu_hours, 0) / nullif(g.hour_hours, 0) as mean_allocated_gpus,
    coalesce(hh.peak_allocated_gpus, 0) as peak_allocated_gpus,
    coalesce(ah.active_gpu_hours, 0) as active_gpu_hours,
    case when g.level_scope = 'queue' then coalesce(hh.in_quota_gpu_hours, 0) end as in_quota_gpu_hours,
    case when g.level_scope = 'queue' then coalesce(hh.borrowed_gpu_hours, 0) end as borrowed_gpu_hours,
    case
      when g.level_scope = 'queue'
        then greatest(coalesce(q.quota_gpus, 0) * g.hour_hours - coalesce(hh.in_quota_gpu_hours, 0), 0)
    end as idle_quota_gpu_hours,
    coalesce(ph.pending_gpu_hours, 0) as pending_gpu_hours,
    coalesce(ph.quota_bound_gpu_hours, 0) as quota_bound_gpu_hours
  from grid g
  left join capacity c on c.day = g.day and c.gpu_model = g.gpu_model
  left join quotas q
    on g.level_scope = 'queue' and q.day = g.day and q.queue = g.queue and q.gpu_model = g.gpu_model
  left join pool_quota pq
    on g.level_scope = 'pool' and pq.day = g.day and pq.gpu_model = g.gpu_model
  join series s
    on s.level_scope = g.level_scope and s.gpu_model = g.gpu_model and s.queue is not distinct from g.queue
  left join held_hourly hh
    on hh.level_scope = g.level_scope
    and hh.queue is not distinct from g.queue
    and hh.gpu_model = g.gpu_model
    and hh.hour_at = g.hour_at
  left join active_hourly ah
    on ah.level_scope = g.level_scope
    and ah.queue is not distinct from g.queue
    and ah.gpu_model = g.gpu_model
    and ah.hour_at = g.hour_at
  left join pending_hourly ph
    on ph.level_scope = g.level_scope
    and ph.queue is not distinct from g.queue
    and ph.gpu_model = g.gpu_model
    and ph.hour_at = g.hour_at
)

select * from final
