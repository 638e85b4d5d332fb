-- what each GPU telemetry series (a GPU or MIG instance) showed each day: its first and last minute of
-- activity and what its samples say about it (UUID, NVML name, MIG profile). A small summary that
-- dim_gpus and dim_days read instead of every minute and sample of history.
-- Rebuilt by day (macros/build_window.sql): a day's row reads only that day's minutes and samples.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_days', window_key='day') }}
with minutes as (
  select
    cast(minute_at as date) as day,
    host,
    gpu,
    gpu_instance_id,
    min(minute_at) as first_minute_at,
    max(minute_at) as last_minute_at
  from {{ ref('fct_gpu_activity') }}
  where {{ in_window_times('minute_at') }}
  group by all
),

-- the highest value does not care about re-delivered samples: the lake, not deduplicated
described as (
  select
    cast(sampled_at as date) as day,
    host,
    gpu,
    gpu_instance_id,
    max(uuid) as uuid,
    max(model_name) as model_name,
    max(gpu_instance_profile) as gpu_instance_profile
  from {{ source('raw', 'dcgm_samples') }}
  where {{ in_window_times('sampled_at') }}
  group by all
),

unioned as (
  select * from minutes
  union all by name
  select * from described
),

final as (
  select
    day,
    host,
    gpu,
    gpu_instance_id,
    min(first_minute_at) as first_minute_at,
    max(last_minute_at) as last_minute_at,
    max(uuid) as uuid,
    max(model_name) as model_name,
    max(gpu_instance_profile) as gpu_instance_profile
  from unioned
  group by day, host, gpu, gpu_instance_id
)

select * from final
