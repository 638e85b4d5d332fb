-- each pending interval cut at every change of its GPU model's pool state (an allocation of the
-- model starting or ending: which also changes the queues' usage of the model) and at every UTC
-- hour; each piece takes the first cause that applies to the state at its start:
-- capacity_bound, fragmentation, quota_bound, policy
--
-- merged by wait (macros/build_window.sql): a build re-judges the waits that reach the window's start, now or
-- as the last build had them, reading the pool's state from the earliest start among them (whole waits: one
-- can appear that began before the window, an attempt first seen by its start in it)
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_waits', window_key='source, job_id, attempt') }}
with intervals as (
  select * from {{ ref('fct_wait_intervals') }}
  where {{ in_window_waits() }}
),

days as (
  select * from {{ ref('dim_days') }}
),

window_bounds as (
  select
    min(day_start_at) as window_start_at,
    max(as_of_at) as as_of_at,
    -- the hour the earliest of these waits began in: the pool's state from there on
    coalesce((select date_trunc('hour', min(pending_from_at)) from intervals), timestamp 'infinity') as cut_at
  from days
),

segments as (
  select
    host,
    gpu_model,
    share_mode,
    coalesce(gpu_instance_profile, '') as profile,
    valid_from_at,
    units,
    free_units,
    free_gpus
  from {{ ref('fct_pool_free_segments') }}
  where valid_from_at >= (select cut_at from window_bounds)
),

-- those alive at the cut or after (one that ended before it adds nothing from then on)
allocations as (
  select * from {{ ref('fct_allocations') }}
  where coalesce(ended_at, timestamp 'infinity') > (select cut_at from window_bounds)
),

quotas as (
  select * from {{ ref('fct_quota_daily') }}
  where day >= cast((select cut_at from window_bounds) as date)
),

hours as (
  select h.range as hour_at
  from window_bounds w
  cross join range(greatest(w.window_start_at, least(w.cut_at, w.as_of_at)), w.as_of_at, interval 1 hour) h
),

-- the pool, per shape (model, whole | mig profile | timeslice), at each change of one of its nodes
node_shapes as (
  select distinct host, gpu_model, share_mode, profile from segments
),

shape_times as (
  select distinct gpu_model, share_mode, profile, valid_from_at as changed_at from segments
),

node_states as (
  select t.gpu_model, t.share_mode, t.profile, t.changed_at, s.units, s.free_units, s.free_gpus
  from shape_times t
  join node_shapes n using (gpu_model, share_mode, profile)
  asof join segments s
    on s.host = n.host
    and s.gpu_model = t.gpu_model
    and s.share_mode = t.share_mode
    and s.profile = t.profile
    and s.valid_from_at <= t.changed_at
),

shape_states as (
  select
    gpu_model,
    share_mode,
    profile,
    changed_at,
    sum(free_units) as free_units,
    sum(free_gpus) as free_gpus,
    max(free_units) as max_node_free_units,
    max(units) as max_node_units
  from node_states
  group by all
),

-- MIG instances of every profile of a model, free, in GPUs (slices / slices per GPU)
mig_states as (
  select gpu_model, changed_at, sum(free_gpus) as mig_free_gpus
  from node_states
  where share_mode = 'mig'
  group by all
),

-- each queue's allocations of each model, by fraction
usage_changes as (
  select a.queue, a.gpu_model, greatest(a.started_at, w.window_start_at, w.cut_at) as changed_at, a.fraction as delta
  from allocations a
  cross join window_bounds w
  union all
  select a.queue, a.gpu_model, a.ended_at, -a.fraction
  from allocations a
  where a.ended_at is not null
),

queue_usage as (
  select
    queue,
    gpu_model,
    changed_at,
    sum(sum(delta)) over (partition by queue, gpu_model order by changed_at) as used_gpus
  from usage_changes
  group by queue, gpu_model, changed_at
),

-- every instant at which anything a waiting job of the model depends on can change
model_times as (
  select distinct gpu_model, valid_from_at as changed_at from segments
  union
  select m.gpu_model, h.hour_at from (select distinct gpu_model from intervals) m cross join hours h
),

timeline as (
  select
    gpu_model,
    changed_at,
    row_number() over w as seq,
    lead(changed_at) over w as next_changed_at
  from model_times
  window w as (partition by gpu_model order by changed_at)
),

first_piece as (
  select i.source, i.job_id, i.attempt, i.gpu_model, i.pending_from_at, i.pending_to_at, t.seq as seq_from
  from intervals i
  asof join timeline t
    on t.gpu_model = i.gpu_model
    and t.changed_at <= i.pending_from_at
),

last_piece as (
  select f.*, t.seq as seq_to
  from first_piece f
  asof join timeline t
    on t.gpu_model = f.gpu_model
    and t.changed_at < f.pending_to_at
),

piece_numbers as (
  select source, job_id, attempt, gpu_model, pending_from_at, pending_to_at, unnest(range(seq_from, seq_to + 1)) as seq
  from last_piece
),

pieces as (
  select
    p.source,
    p.job_id,
    p.attempt,
    i.gpu_model,
    i.share_mode,
    case when i.share_mode = 'mig' then coalesce(i.mig_profile, '') else '' end as profile,
    i.queue,
    i.gpus_requested,
    i.unit_fraction,
    greatest(t.changed_at, p.pending_from_at) as piece_from_at,
    least(coalesce(t.next_changed_at, p.pending_to_at), p.pending_to_at) as piece_to_at
  from piece_numbers p
  join timeline t
    on t.gpu_model = p.gpu_model
    and t.seq = p.seq
  join intervals i
    on i.source = p.source
    and i.job_id = p.job_id
    and i.attempt = p.attempt
),

with_shape as (
  select p.*, s.free_units, s.free_gpus, s.max_node_free_units, s.max_node_units
  from pieces p
  asof left join shape_states s
    on s.gpu_model = p.gpu_model
    and s.share_mode = p.share_mode
    and s.profile = p.profile
    and s.changed_at <= p.piece_from_at
),

with_mig as (
  select w.*, m.mig_free_gpus
  from with_shape w
  asof left join mig_states m
    on m.gpu_model = w.gpu_model
    and m.changed_at <= w.piece_from_at
),

with_usage as (
  select w.*, u.used_gpus
  from with_mig w
  asof left join queue_usage u
    on u.queue = w.queue
    and u.gpu_model = w.gpu_model
    and u.changed_at <= w.piece_from_at
),

evaluated as (
  select
    w.source,
    w.job_id,
    w.attempt,
    cast(date_trunc('hour', w.piece_from_at) as timestamp) as hour_at,
    epoch(w.piece_to_at - w.piece_from_at) as waited_s,
    coalesce(w.free_units, 0) as free_units,
    q.quota_gpus,
    case
      -- a MIG ask with no instance of its profile free while enough slices are free in other layouts
      when w.share_mode = 'mig'
        and coalesce(w.free_units, 0) < w.gpus_requested
        and coalesce(w.mig_free_gpus, 0) - coalesce(w.free_gpus, 0) >= w.gpus_requested * w.unit_fraction - 1e-9
        then 'fragmentation'
      when coalesce(w.free_units, 0) < w.gpus_requested then 'capacity_bound'
      -- a single-node ask (fits one node of the shape) with no node holding enough free
      when w.gpus_requested <= coalesce(w.max_node_units, 0)
        and coalesce(w.max_node_free_units, 0) < w.gpus_requested
        then 'fragmentation'
      -- zero or no quota (backfill, borrow-only): idle capacity only, never quota-bound
      when coalesce(q.quota_gpus, 0) > 0
        and coalesce(w.used_gpus, 0) + w.gpus_requested * w.unit_fraction > q.quota_gpus + 1e-9
        then 'quota_bound'
      else 'policy'
    end as cause
  from with_usage w
  left join quotas q
    on q.day = cast(w.piece_from_at as date)
    and q.queue = w.queue
    and q.gpu_model = w.gpu_model
  where w.piece_to_at > w.piece_from_at
),

per_hour as (
  select
    source,
    job_id,
    attempt,
    hour_at,
    cause,
    sum(waited_s) as waited_s,
    min(free_units) as min_free_units,
    max(quota_gpus) as quota_gpus
  from evaluated
  group by all
),

final as (
  select
    p.source,
    p.job_id,
    p.attempt,
    i.pending_from_at,
    p.hour_at,
    cast(p.hour_at as date) as day,
    p.cause,
    i.tenant,
    i.queue,
    i.template,
    i.gpu_model,
    i.share_mode,
    i.mig_profile,
    i.gpus_requested,
    i.unit_fraction,
    i.asked_gpus,
    p.waited_s,
    p.waited_s / 3600.0 as waited_hours,
    p.waited_s / 3600.0 * i.asked_gpus as waited_gpu_hours,
    p.min_free_units,
    p.quota_gpus
  from per_hour p
  join intervals i
    on i.source = p.source
    and i.job_id = p.job_id
    and i.attempt = p.attempt
)

select * from final
