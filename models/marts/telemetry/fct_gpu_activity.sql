-- one row per GPU (or MIG instance) per minute; everything else reads activity from here.
-- Built one UTC day at a time (microbatch on sampled_at): a minute never spans two days, so each
-- day aggregates alone, in memory. Kept as day files beside the warehouse (day_files: a view over
-- them, models/macros/day_files.sql): a publish copies their list, not the history.
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='minute_at',
          batch_size='day', begin='2026-01-01', lookback=0, concurrent_batches=false,
          day_files='activity_date') }}
with samples as (
  select
    host,
    gpu,
    gpu_instance_id,
    date_trunc('minute', sampled_at) as minute_at,
    sampled_at,
    gr_engine_active,
    gpu_util_pct,
    fb_used_mib,
    fb_free_mib,
    power_w,
    pcie_tx_bytes_per_s,
    pcie_rx_bytes_per_s,
    nvlink_tx_bytes_per_s,
    nvlink_rx_bytes_per_s,
    hpc_job,
    k8s_namespace,
    k8s_pod,
    samples
  from {{ ref('stg_dcgm__samples') }}
),

per_minute as (
  select
    host,
    gpu,
    gpu_instance_id,
    minute_at,
    -- when the minute's samples were taken: an allocation owns a minute only when they all fall
    -- inside it (a sample from the minute it began, taken before it began, is not its own)
    min(sampled_at) as first_sampled_at,
    max(sampled_at) as last_sampled_at,
    avg(gr_engine_active) as gr_engine_active,
    avg(gpu_util_pct) as gpu_util_pct,
    max(fb_used_mib) as fb_used_mib,
    min(fb_free_mib) as fb_free_mib,
    avg(power_w) as power_w,
    -- PROF byte fields are rates (bytes per second): a minute moves 60 x the mean rate
    avg(pcie_tx_bytes_per_s) * 60 as pcie_tx_bytes,
    avg(pcie_rx_bytes_per_s) * 60 as pcie_rx_bytes,
    avg(nvlink_tx_bytes_per_s) * 60 as nvlink_tx_bytes,
    avg(nvlink_rx_bytes_per_s) * 60 as nvlink_rx_bytes,
    min(hpc_job) as hpc_job,
    min(k8s_namespace) as k8s_namespace,
    min(k8s_pod) as k8s_pod,
    -- a shared (time-sliced) GPU carries one series per workload: keep every label for
    -- reconciliation; a row is one series at one time, so these lists are short
    list(hpc_job) filter (where hpc_job is not null) as hpc_jobs,
    list(k8s_pod) filter (where k8s_pod is not null) as k8s_pods,
    cast(sum(samples) as bigint) as samples
  from samples
  group by host, gpu, gpu_instance_id, minute_at
),

final as (
  select
    host,
    gpu,
    gpu_instance_id,
    minute_at,
    cast(minute_at as date) as activity_date,
    first_sampled_at,
    last_sampled_at,
    least(greatest(coalesce(gr_engine_active, gpu_util_pct / 100.0), 0.0), 1.0) as activity,
    case
      when gr_engine_active is not null then 'gr_engine_active'
      when gpu_util_pct is not null then 'gpu_util'
    end as activity_source,
    gr_engine_active,
    gpu_util_pct,
    fb_used_mib,
    fb_free_mib,
    power_w,
    pcie_tx_bytes,
    pcie_rx_bytes,
    nvlink_tx_bytes,
    nvlink_rx_bytes,
    hpc_job,
    k8s_namespace,
    k8s_pod,
    -- most lists hold one label: sort and deduplicate only the others
    case when len(hpc_jobs) > 1 then list_sort(list_distinct(hpc_jobs)) else hpc_jobs end as hpc_jobs,
    case when len(k8s_pods) > 1 then list_sort(list_distinct(k8s_pods)) else k8s_pods end as k8s_pods,
    samples
  from per_minute
)

select * from final
