-- the inventory and quota snapshots in effect each day, per source: each day uses the latest
-- snapshot taken before the day ends; days before the first snapshot use the first
with days as (
  select day, day_end_at from {{ ref('dim_days') }}
),

snapshots as (
  select distinct 'gpu_inventory' as snapshot_table, source, snapshot_at from {{ ref('stg_pool__gpu_inventory') }}
  union all
  select distinct 'queue_quotas', source, snapshot_at from {{ ref('stg_pool__queue_quotas') }}
),

final as (
  select
    d.day,
    s.snapshot_table,
    s.source,
    coalesce(max(s.snapshot_at) filter (where s.snapshot_at < d.day_end_at), min(s.snapshot_at)) as snapshot_at
  from days d
  cross join snapshots s
  group by d.day, s.snapshot_table, s.source
)

select * from final
