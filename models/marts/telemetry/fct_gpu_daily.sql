-- device-level fields (power, PCIe, NVLink) are per physical GPU even when a MIG GPU repeats them
-- on each instance's series: take the highest per GPU-minute before summing.
-- Built one UTC day at a time (microbatch on day): a day's rows read only that day's activity.
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='day',
          batch_size='day', begin='2026-01-01', lookback=0, concurrent_batches=false) }}
with activity as (
  select
    host,
    gpu,
    gpu_instance_id,
    activity_date,
    minute_at,
    activity,
    activity_source,
    fb_used_mib,
    power_w,
    pcie_tx_bytes,
    pcie_rx_bytes,
    nvlink_tx_bytes,
    nvlink_rx_bytes
  from {{ ref('fct_gpu_activity') }}
),

gpus as (
  select host, gpu, max(gpu_model) as gpu_model
  from {{ ref('dim_gpus') }}
  group by host, gpu
),

-- only a GPU with instance series has several rows a minute; the others' rows are its minutes
shared_gpus as (
  select distinct host, gpu
  from activity
  where gpu_instance_id is not null
),

physical_minutes as (
  select
    host,
    gpu,
    activity_date as day,
    minute_at,
    max(activity) as max_activity,
    max(fb_used_mib) as fb_used_mib,
    max(power_w) as power_w,
    max(pcie_tx_bytes) as pcie_tx_bytes,
    max(pcie_rx_bytes) as pcie_rx_bytes,
    max(nvlink_tx_bytes) as nvlink_tx_bytes,
    max(nvlink_rx_bytes) as nvlink_rx_bytes,
    bool_or(activity_source = 'gr_engine_active') as has_gr_engine_active
  from activity
  semi join shared_gpus using (host, gpu)
  group by host, gpu, activity_date, minute_at
  union all
  select
    host,
    gpu,
    activity_date as day,
    minute_at,
    activity as max_activity,
    fb_used_mib,
    power_w,
    pcie_tx_bytes,
    pcie_rx_bytes,
    nvlink_tx_bytes,
    nvlink_rx_bytes,
    coalesce(activity_source = 'gr_engine_active', false) as has_gr_engine_active
  from activity
  anti join shared_gpus using (host, gpu)
),

final as (
  select
    m.day,
    m.host,
    m.gpu,
    coalesce(g.gpu_model, 'unknown') as gpu_model,
    count(*) as telemetry_minutes,
    count(*) filter (where m.has_gr_engine_active) as gr_engine_active_minutes,
    avg(m.max_activity) as mean_activity,
    max(m.fb_used_mib) as peak_fb_used_mib,
    sum(m.power_w) / 60.0 / 1000.0 as energy_kwh,
    sum(m.pcie_tx_bytes) as pcie_tx_bytes,
    sum(m.pcie_rx_bytes) as pcie_rx_bytes,
    sum(m.nvlink_tx_bytes) as nvlink_tx_bytes,
    sum(m.nvlink_rx_bytes) as nvlink_rx_bytes
  from physical_minutes m
  left join gpus g using (host, gpu)
  group by m.day, m.host, m.gpu, g.gpu_model
)

select * from final
