-- checkpoints, artifacts and model versions reported by the allocator (a job's own report) or read from
-- MLflow. A record re-delivered (the same day pulled twice, a run re-read) counts once: keep the latest
-- delivery of each (source, event_id), at the earliest time any delivery gave it (MLflow keeps no time per
-- artifact: a running run's artifacts carry the pull's time, so a later pull must not move them)
with source as (
  select
    * exclude (occurred_at),
    min(occurred_at) over (partition by source, event_id) as occurred_at
  from {{ source('raw', 'artifact_events') }}
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
    job_id,
    attempt,
    lower(kind) as kind,
    lower(status) as status,
    location,
    size_bytes,
    training_step,
    model_name,
    model_version,
    run_id,
    reported_by,
    source,
    -- which scheduler's job ids the record's job_id is: the allocator reports its own jobs; an MLflow run's
    -- tag may name a job of any scheduler (allocator, Slurm, Kueue), so null = any
    case when source = 'allocator' then 'allocator' end as job_source,
    source_file,
    partition_date,
    ingest_source,
    ingested_at
  from latest_delivery
)

select * from final
