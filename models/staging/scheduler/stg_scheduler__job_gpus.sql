-- no event id here: the placement of an attempt is replaced as a whole by its latest delivery,
-- which also keeps legitimate repeats (Slurm rows with an unknown GPU index) intact. A Slurm
-- squeue snapshot knows the GPU indices that sacct lacks, so it wins over any sacct delivery.
with source as (
  select * from {{ source('raw', 'job_gpus') }}
),

latest_delivery as (
  select *
  from source
  qualify dense_rank() over (
    partition by source, job_id, attempt
    order by ingest_source = 'slurm_squeue' desc, ingested_at desc, partition_date desc, ingest_source desc
  ) = 1
),

final as (
  select
    job_id,
    attempt,
    host,
    gpu,
    uuid,
    gpu_instance_id,
    gpu_instance_profile,
    gpu_model,
    fraction,
    assigned_at,
    source,
    source_file,
    partition_date,
    ingest_source,
    ingested_at
  from latest_delivery
)

select * from final
