-- each DCGM health series' last sample of each day: the state fct_gpu_health_events carries into its
-- window (a counter's previous value, the last XID code) and which GPUs have the windowed XID gauge,
-- without re-reading the health series of every day.
-- Rebuilt by day (macros/build_window.sql): a day's rows read only that day's samples.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_days', window_key='day') }}
with health as (
  select * from {{ ref('stg_dcgm__health') }}
  where {{ in_window_times('sampled_at') }}
    and metric <> 'DCGM_FI_DEV_GPU_TEMP'
),

final as (
  select
    cast(sampled_at as date) as day,
    host,
    gpu,
    gpu_instance_id,
    metric,
    xid,
    max(sampled_at) as last_sampled_at,
    arg_max(value, sampled_at) as last_value,
    arg_max(source, sampled_at) as last_source
  from health
  group by cast(sampled_at as date), host, gpu, gpu_instance_id, metric, xid
)

select * from final
