with inventory as (
  select * from {{ ref('stg_pool__gpu_inventory') }}
),

gpu_models as (
  select * from {{ ref('gpu_models') }}
),

latest_snapshot as (
  select source, max(snapshot_at) as snapshot_at
  from inventory
  group by source
),

-- the latest snapshot of each source; where sources overlap, the allocator's row wins
in_inventory as (
  select inventory.*
  from inventory
  join latest_snapshot using (source, snapshot_at)
  qualify row_number() over (
    partition by host, gpu, gpu_instance_id
    order by snapshot_at desc, case source when 'allocator' then 0 else 1 end asc, source asc
  ) = 1
),

-- a table rebuilt whole (the latest inventory snapshot may change any GPU): it reads the per-day series
-- summary, not every minute and sample of history
series_days as (
  select * from {{ ref('fct_gpu_series_daily') }}
),

telemetry_minutes as (
  select
    host,
    gpu,
    gpu_instance_id,
    min(first_minute_at) as first_seen_at,
    max(last_minute_at) + interval 1 minute as last_seen_at
  from series_days
  where first_minute_at is not null
  group by host, gpu, gpu_instance_id
),

-- what the GPU's series say about it (UUID, NVML name, MIG profile): the per-minute table does not
-- carry them
described as (
  select
    host,
    gpu,
    gpu_instance_id,
    max(uuid) as uuid,
    max(model_name) as model_name,
    max(gpu_instance_profile) as gpu_instance_profile
  from series_days
  group by host, gpu, gpu_instance_id
),

telemetry as (
  select
    m.host,
    m.gpu,
    m.gpu_instance_id,
    d.uuid,
    d.model_name,
    d.gpu_instance_profile,
    m.first_seen_at,
    m.last_seen_at
  from telemetry_minutes m
  left join described d
    on d.host = m.host
    and d.gpu = m.gpu
    and d.gpu_instance_id is not distinct from m.gpu_instance_id
),

-- a GPU's parent-level series (no instance id) belongs to an inventoried MIG or time-sliced GPU
telemetry_only as (
  select telemetry.*
  from telemetry
  where not exists (
    select 1
    from in_inventory i
    where i.host = telemetry.host
      and i.gpu = telemetry.gpu
      and (telemetry.gpu_instance_id is null or i.gpu_instance_id = telemetry.gpu_instance_id)
  )
),

telemetry_only_described as (
  select
    t.host,
    t.gpu,
    t.gpu_instance_id,
    t.uuid,
    m.gpu_model,
    t.model_name,
    case
      when t.gpu_instance_profile is not null
        then cast(try_cast(regexp_extract(t.gpu_instance_profile, '(\d+)gb$', 1) as integer) * 1024 as integer)
      else m.memory_mib
    end as memory_mib,
    case when t.gpu_instance_id is not null then 'mig' else 'whole' end as share_mode,
    t.gpu_instance_profile,
    case
      when t.gpu_instance_id is not null
        then try_cast(regexp_extract(t.gpu_instance_profile, '^(\d+)g', 1) as double) / m.compute_slices
      else 1.0
    end as fraction,
    cast(null as varchar) as node_pool,
    cast(null as varchar) as inventory_source,
    cast(null as timestamp) as snapshot_at,
    false as is_in_inventory
  from telemetry_only t
  left join gpu_models m
    on regexp_matches(t.model_name, m.model_name_pattern, 'i')
),

inventoried as (
  select
    host,
    gpu,
    gpu_instance_id,
    uuid,
    gpu_model,
    model_name,
    memory_mib,
    share_mode,
    gpu_instance_profile,
    fraction,
    node_pool,
    source as inventory_source,
    snapshot_at,
    true as is_in_inventory
  from in_inventory
),

unioned as (
  select * from inventoried
  union all by name
  select * from telemetry_only_described
),

final as (
  select
    u.host,
    u.gpu,
    u.gpu_instance_id,
    u.uuid,
    coalesce(u.gpu_model, 'unknown') as gpu_model,
    u.model_name,
    u.memory_mib,
    u.share_mode,
    u.gpu_instance_profile,
    u.fraction,
    u.node_pool,
    u.inventory_source,
    u.snapshot_at,
    u.is_in_inventory,
    -- time-sliced shares have no telemetry of their own: they read the physical GPU's series
    coalesce(t.host is not null, false) as has_telemetry,
    t.first_seen_at,
    t.last_seen_at,
    m.price_per_gpu_hour
  from unioned u
  left join telemetry t
    on t.host = u.host
    and t.gpu = u.gpu
    and t.gpu_instance_id is not distinct from (case when u.share_mode = 'mig' then u.gpu_instance_id end)
  left join gpu_models m
    on m.gpu_model = u.gpu_model
)

select * from final
