-- the telemetry minutes inside each allocation; the equality on (host, gpu, day) keeps the range
-- join to the few allocations a GPU had that day. An allocation's telemetry is the samples taken at
-- or after its start and before its end: a minute is its own when every sample of the minute is
-- (the minute it began, sampled before it began, belongs to whoever held the GPU then).
-- Built one UTC day at a time (microbatch on day): segments and activity are both cut at midnight.
-- Kept as day files beside the warehouse (day_files, models/macros/day_files.sql).
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='day',
          batch_size='day', begin='2026-01-01', lookback=0, concurrent_batches=false,
          day_files='day') }}
with segments as (
  select * from {{ ref('fct_allocation_segments') }} where gpu is not null
),

activity as (
  select
    host,
    gpu,
    gpu_instance_id,
    activity_date,
    minute_at,
    first_sampled_at,
    last_sampled_at,
    activity,
    activity_source,
    fb_used_mib,
    hpc_job,
    k8s_namespace,
    k8s_pod,
    hpc_jobs,
    k8s_pods
  from {{ ref('fct_gpu_activity') }}
),

final as (
  select
    s.allocation_id,
    s.day,
    t.minute_at,
    t.activity,
    t.activity_source,
    t.fb_used_mib,
    t.hpc_job,
    t.k8s_namespace,
    t.k8s_pod,
    t.hpc_jobs,
    t.k8s_pods
  from segments s
  join activity t
    on t.host = s.host
    and t.gpu = s.gpu
    and t.activity_date = s.day
    and t.gpu_instance_id is not distinct from s.telemetry_instance_id
    and t.minute_at >= date_trunc('minute', s.segment_start_at)
    and t.minute_at < s.segment_end_at
    and t.first_sampled_at >= s.segment_start_at
    and t.last_sampled_at < s.segment_end_at
)

select * from final
