-- free capacity per node and shape over time: the state changes only when an allocation of that
-- node's shape starts or ends, and at every UTC hour (inventory snapshots and hourly reports)
--
-- rebuilt from the build window's start to the data's end (macros/build_window.sql): a node's state there
-- is the allocations alive from then on (one started before holds from the window's start, which is an hour
-- mark: every node's interval ends there); a node or shape new to the pool gets its rows from the data's
-- first day (the intervals cover the data window for every node). Rows before the window are kept.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='from_window_start', window_key='day') }}
with days as (
  select * from {{ ref('dim_days') }}
),

window_bounds as (
  select
    min(day_start_at) as window_start_at,
    max(as_of_at) as as_of_at,
    -- where this build's rows begin for the nodes it built before
    {{ 'greatest(' ~ window_start_at() ~ ', min(day_start_at))' if is_incremental() else 'min(day_start_at)' }}
      as cut_at
  from days
),

inventory as (
  select * from {{ ref('stg_pool__gpu_inventory') }}
),

allocations as (
  select * from {{ ref('fct_allocations') }}
),

-- the snapshot in effect each day, per source: the latest taken before the day ends, else the first
snapshot_for_day as (
  select day, source, snapshot_at from {{ ref('dim_snapshots_in_effect') }} where snapshot_table = 'gpu_inventory'
),

-- one row per unit (whole GPU, MIG instance, time-slice share) in effect each day; where sources
-- overlap, the allocator's row wins
units_in_effect as (
  select
    sd.day,
    i.host,
    i.gpu,
    i.gpu_instance_id,
    i.gpu_model,
    coalesce(i.share_mode, 'whole') as share_mode,
    case when i.share_mode = 'mig' then coalesce(i.gpu_instance_profile, '') else '' end as profile,
    i.fraction
  from snapshot_for_day sd
  join inventory i using (source, snapshot_at)
  qualify row_number() over (
    partition by sd.day, i.host, i.gpu, i.gpu_instance_id
    order by case i.source when 'allocator' then 0 else 1 end, i.source
  ) = 1
),

node_units as (
  select
    day,
    host,
    gpu_model,
    share_mode,
    profile,
    count(*) as units,
    sum(fraction) as unit_gpus
  from units_in_effect
  group by all
),

in_data_window as (
  select
    a.host,
    a.gpu_model,
    a.share_mode,
    case when a.share_mode = 'mig' then coalesce(a.gpu_instance_profile, '') else '' end as profile,
    a.started_at,
    a.ended_at,
    a.fraction
  from allocations a
  cross join window_bounds w
  where a.started_at < w.as_of_at
    and coalesce(a.ended_at, w.as_of_at) > w.window_start_at
),

-- the nodes with rows before the cut (the previous builds'): their rows from the cut on; any other from
-- the data's first day
built_shapes as (
  {%- if is_incremental() %}
  select distinct host, gpu_model, share_mode, coalesce(gpu_instance_profile, '') as profile
  from {{ this }}
  where valid_from_at < (select cut_at from window_bounds)
  {%- else %}
  select host, gpu_model, share_mode, '' as profile from in_data_window where false
  {%- endif %}
),

node_shapes as (
  select
    n.*,
    case when b.host is not null then w.cut_at else w.window_start_at end as from_at
  from (
    select distinct host, gpu_model, share_mode, profile from node_units
    union
    select distinct host, gpu_model, share_mode, profile from in_data_window
  ) n
  cross join window_bounds w
  left join built_shapes b using (host, gpu_model, share_mode, profile)
),

-- an allocation alive at a node's from_at holds from then
held as (
  select
    a.host,
    a.gpu_model,
    a.share_mode,
    a.profile,
    greatest(a.started_at, n.from_at) as started_at,
    case when a.ended_at is not null then least(a.ended_at, w.as_of_at) end as ended_at,
    a.fraction
  from in_data_window a
  join node_shapes n using (host, gpu_model, share_mode, profile)
  cross join window_bounds w
  where coalesce(a.ended_at, w.as_of_at) > n.from_at
),

hours as (
  select h.range as hour_at
  from window_bounds w
  cross join range(w.window_start_at, w.as_of_at, interval 1 hour) h
),

changes as (
  select host, gpu_model, share_mode, profile, started_at as changed_at, 1 as held_delta, fraction as held_gpus_delta
  from held
  union all
  select host, gpu_model, share_mode, profile, ended_at, -1, -fraction
  from held
  where ended_at is not null
  union all
  select n.host, n.gpu_model, n.share_mode, n.profile, h.hour_at, 0, 0.0
  from node_shapes n
  join hours h
    on h.hour_at >= n.from_at
),

per_instant as (
  select
    host,
    gpu_model,
    share_mode,
    profile,
    changed_at,
    sum(held_delta) as held_delta,
    sum(held_gpus_delta) as held_gpus_delta
  from changes
  group by all
),

running as (
  select
    p.*,
    sum(held_delta) over w as held_units,
    sum(held_gpus_delta) over w as held_gpus,
    lead(changed_at) over w as next_changed_at
  from per_instant p
  window w as (partition by host, gpu_model, share_mode, profile order by changed_at)
),

final as (
  select
    r.host,
    r.gpu_model,
    r.share_mode,
    nullif(r.profile, '') as gpu_instance_profile,
    r.changed_at as valid_from_at,
    coalesce(r.next_changed_at, w.as_of_at) as valid_to_at,
    cast(date_trunc('hour', r.changed_at) as timestamp) as hour_at,
    cast(r.changed_at as date) as day,
    epoch(coalesce(r.next_changed_at, w.as_of_at) - r.changed_at) as duration_s,
    cast(coalesce(u.units, 0) as bigint) as units,
    coalesce(u.unit_gpus, 0.0) as unit_gpus,
    cast(r.held_units as bigint) as held_units,
    greatest(r.held_gpus, 0.0) as held_gpus,
    cast(greatest(coalesce(u.units, 0) - r.held_units, 0) as bigint) as free_units,
    case
      when coalesce(u.units, 0) > 0
        then greatest(coalesce(u.units, 0) - r.held_units, 0) * u.unit_gpus / u.units
      else 0.0
    end as free_gpus
  from running r
  cross join window_bounds w
  left join node_units u
    on u.day = cast(r.changed_at as date)
    and u.host = r.host
    and u.gpu_model = r.gpu_model
    and u.share_mode = r.share_mode
    and u.profile = r.profile
  where r.changed_at < w.as_of_at
)

select * from final
