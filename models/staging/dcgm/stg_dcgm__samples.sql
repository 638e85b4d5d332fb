-- one row per DCGM series per sample time, the fields the marts read as columns. A sample can
-- arrive twice (a scrape file and Prometheus history, overlapping files, a re-ingested day): each
-- field counts once, with the value from the latest ingest. Pivoting while deduplicating groups
-- one row per series and time rather than one per field: a third of the groups on a month of data.
-- The descriptive labels are the same in every delivery of a series, so any one will do.
with source as (
  select
    sampled_at,
    host,
    gpu,
    gpu_instance_id,
    k8s_namespace,
    k8s_pod,
    k8s_container,
    hpc_job,
    metric,
    value,
    ingested_at,
    uuid,
    model_name,
    gpu_instance_profile,
    source
  from {{ source('raw', 'dcgm_samples') }}
  where metric in (
    'DCGM_FI_PROF_GR_ENGINE_ACTIVE',
    'DCGM_FI_DEV_GPU_UTIL',
    'DCGM_FI_DEV_FB_USED',
    'DCGM_FI_DEV_FB_FREE',
    'DCGM_FI_DEV_POWER_USAGE',
    'DCGM_FI_PROF_PCIE_TX_BYTES',
    'DCGM_FI_PROF_PCIE_RX_BYTES',
    'DCGM_FI_PROF_NVLINK_TX_BYTES',
    'DCGM_FI_PROF_NVLINK_RX_BYTES'
  )
),

deduplicated as (
  select
    sampled_at,
    host,
    gpu,
    gpu_instance_id,
    k8s_namespace,
    k8s_pod,
    k8s_container,
    hpc_job,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE') as gr_engine_active,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_DEV_GPU_UTIL') as gpu_util_pct,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_used_mib,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_DEV_FB_FREE') as fb_free_mib,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_DEV_POWER_USAGE') as power_w,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_PROF_PCIE_TX_BYTES') as pcie_tx_bytes_per_s,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_PROF_PCIE_RX_BYTES') as pcie_rx_bytes_per_s,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_PROF_NVLINK_TX_BYTES') as nvlink_tx_bytes_per_s,
    arg_max(value, ingested_at) filter (where metric = 'DCGM_FI_PROF_NVLINK_RX_BYTES') as nvlink_rx_bytes_per_s,
    any_value(uuid) as uuid,
    any_value(model_name) as model_name,
    any_value(gpu_instance_profile) as gpu_instance_profile,
    any_value(source) as source,
    count(*) as deliveries,
    max(ingested_at) as ingested_at
  from source
  group by sampled_at, host, gpu, gpu_instance_id, k8s_namespace, k8s_pod, k8s_container, hpc_job
),

final as (
  select
    sampled_at,
    host,
    gpu,
    gpu_instance_id,
    gpu_instance_profile,
    uuid,
    model_name,
    k8s_namespace,
    k8s_pod,
    k8s_container,
    hpc_job,
    gr_engine_active,
    gpu_util_pct,
    fb_used_mib,
    fb_free_mib,
    power_w,
    pcie_tx_bytes_per_s,
    pcie_rx_bytes_per_s,
    nvlink_tx_bytes_per_s,
    nvlink_rx_bytes_per_s,
    (gr_engine_active is not null)::integer + (gpu_util_pct is not null)::integer
      + (fb_used_mib is not null)::integer + (fb_free_mib is not null)::integer + (power_w is not null)::integer
      + (pcie_tx_bytes_per_s is not null)::integer + (pcie_rx_bytes_per_s is not null)::integer
      + (nvlink_tx_bytes_per_s is not null)::integer + (nvlink_rx_bytes_per_s is not null)::integer
      as samples,
    source,
    deliveries,
    ingested_at
  from deduplicated
)

select * from final
