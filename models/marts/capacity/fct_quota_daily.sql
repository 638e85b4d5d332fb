-- rebuilt by day from the window's start (or the previous data's end) on: a snapshot stays in effect
-- until the next one (macros/build_window.sql, in_window_snapshot_days)
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_snapshot_days', window_key='day') }}
with days as (
  select * from {{ ref('dim_days') }} where {{ in_window_snapshot_days() }}
),

quotas as (
  select * from {{ ref('stg_pool__queue_quotas') }}
),

-- the snapshot in effect each day, per source: the latest taken before the day ends, else the first
snapshot_for_day as (
  select day, source, snapshot_at from {{ ref('dim_snapshots_in_effect') }}
  where snapshot_table = 'queue_quotas' and {{ in_window_snapshot_days() }}
),

in_effect as (
  select sd.day, q.*
  from snapshot_for_day sd
  join quotas q using (source, snapshot_at)
  qualify row_number() over (
    partition by sd.day, q.queue, q.gpu_model
    order by case q.source when 'allocator' then 0 else 1 end, q.source
  ) = 1
),

final as (
  select
    e.day,
    e.queue,
    e.gpu_model,
    e.tenant,
    e.quota_gpus,
    d.hours,
    e.quota_gpus * d.hours as quota_gpu_hours,
    e.snapshot_at
  from in_effect e
  join days d using (day)
)

select * from final
