-- capacity is counted per physical GPU: a MIG or time-sliced GPU is one GPU however it is cut.
-- Rebuilt by day from the window's start (or the previous data's end) on: a snapshot stays in effect
-- until the next one (macros/build_window.sql, in_window_snapshot_days)
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_snapshot_days', window_key='day') }}
with days as (
  select * from {{ ref('dim_days') }} where {{ in_window_snapshot_days() }}
),

inventory as (
  select * from {{ ref('stg_pool__gpu_inventory') }}
),

-- the snapshot in effect each day, per source: the latest taken before the day ends, else the first
snapshot_for_day as (
  select day, source, snapshot_at from {{ ref('dim_snapshots_in_effect') }}
  where snapshot_table = 'gpu_inventory' and {{ in_window_snapshot_days() }}
),

physical_gpus as (
  select
    sd.day,
    i.host,
    i.gpu,
    i.source,
    max(i.gpu_model) as gpu_model,
    max(i.node_pool) as node_pool,
    max(i.share_mode) as share_mode,
    sum(i.fraction) as partitioned_fraction
  from snapshot_for_day sd
  join inventory i using (source, snapshot_at)
  group by sd.day, i.host, i.gpu, i.source
),

one_source_per_gpu as (
  select *
  from physical_gpus
  qualify row_number() over (
    partition by day, host, gpu
    order by case source when 'allocator' then 0 else 1 end, source
  ) = 1
),

final as (
  select
    g.day,
    g.host,
    g.gpu,
    g.gpu_model,
    g.node_pool,
    g.share_mode,
    least(g.partitioned_fraction, 1.0) as partitioned_fraction,
    d.hours,
    d.hours as capacity_gpu_hours
  from one_source_per_gpu g
  join days d using (day)
)

select * from final
