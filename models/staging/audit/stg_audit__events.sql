-- re-delivered records: keep the latest ingest of each (source, audit_id, stage)
with source as (
  select * from {{ source('raw', 'audit_events') }}
),

latest_delivery as (
  select *
  from source
  qualify row_number() over (
    partition by source, audit_id, stage
    order by ingested_at desc, partition_date desc, ingest_source desc
  ) = 1
),

final as (
  select
    audit_id,
    occurred_at,
    actor,
    actor_role,
    action,
    object_kind,
    object_namespace,
    object_name,
    before_json,
    after_json,
    lower(decision) as decision,
    reason,
    stage,
    response_code,
    request_id,
    idempotency_key,
    api_version,
    source,
    source_file,
    line_number,
    ingested_at
  from latest_delivery
)

select * from final
