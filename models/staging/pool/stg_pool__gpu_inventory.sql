with source as (
  select * from {{ source('raw', 'gpu_inventory') }}
),

latest_delivery as (
  select *
  from source
  qualify row_number() over (
    partition by source, snapshot_at, host, gpu, gpu_instance_id
    order by ingested_at desc, partition_date desc, ingest_source desc
  ) = 1
),

final as (
  select
    snapshot_at,
    host,
    gpu,
    uuid,
    gpu_model,
    model_name,
    memory_mib,
    lower(share_mode) as share_mode,
    gpu_instance_id,
    gpu_instance_profile,
    fraction,
    node_pool,
    source,
    source_file,
    ingested_at
  from latest_delivery
)

select * from final
