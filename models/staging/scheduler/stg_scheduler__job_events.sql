-- the same event may arrive in several partitions (a running Slurm job is seen every day):
-- keep the latest delivery of each (source, event_id)
with source as (
  select * from {{ source('raw', 'job_events') }}
),

latest_delivery as (
  select *
  from source
  qualify row_number() over (
    partition by source, event_id
    order by ingested_at desc, partition_date desc, ingest_source desc
  ) = 1
),

final as (
  select
    event_id,
    occurred_at,
    lower(event_type) as event_type,
    job_id,
    attempt,
    tenant,
    queue,
    user_name,
    job_name,
    lower(template) as template,
    gpu_model,
    gpus_requested,
    lower(share_mode) as share_mode,
    mig_profile,
    priority,
    -- Slurm writes 'CANCELLED by 1234': the state is the first word
    upper(split_part(trim(state), ' ', 1)) as state,
    reason,
    exit_code,
    spec_json,
    source,
    source_file,
    line_number,
    partition_date,
    ingest_source,
    ingested_at
  from latest_delivery
)

select * from final
