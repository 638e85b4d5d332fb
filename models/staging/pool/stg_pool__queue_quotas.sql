with source as (
  select * from {{ source('raw', 'queue_quotas') }}
),

latest_delivery as (
  select *
  from source
  qualify row_number() over (
    partition by source, snapshot_at, queue, gpu_model
    order by ingested_at desc, partition_date desc, ingest_source desc
  ) = 1
),

final as (
  select
    snapshot_at,
    queue,
    tenant,
    gpu_model,
    quota_gpus,
    priority,
    preemptible,
    max_gpus_per_request,
    max_runtime_s,
    retry_budget,
    source,
    source_file,
    ingested_at
  from latest_delivery
)

select * from final
