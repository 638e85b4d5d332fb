-- one row per GPU (or MIG instance) per minute; everything else reads activity from here
with samples as (
  select
    host,
    gpu,
    gpu_instance_id,
    gpu_instance_profile,
    uuid,
    model_name,
    metric,
    value,
    sampled_at,
    hpc_job,
    k8s_namespace,
    k8s_pod
  from staging.stg_dcgm__samples
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

per_minute as (
  select
    host,
    gpu,
    gpu_instance_id,
    date_trunc('minute', sampled_at) as minute_at,
    avg(value) filter (where metric = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE') as gr_engine_active,
    avg(value) filter (where metric = 'DCGM_FI_DEV_GPU_UTIL') as gpu_util_pct,
    max(value) filter (where metric = 'DCGM_FI_DEV_FB_USED') as fb_used_mib,
    min(value) filter (where metric = 'DCGM_FI_DEV_FB_FREE') as fb_free_mib,
    avg(value) filter (where metric = 'DCGM_FI_DEV_POWER_USAGE') as power_w,
    -- PROF byte fields are rates (bytes per second): a minute moves 60 x the mean rate
    avg(value) filter (where metric = 'DCGM_FI_PROF_PCIE_TX_BYTES') * 60 as pcie_tx_bytes,
    avg(value) filter (where metric = 'DCGM_FI_PROF_PCIE_RX_BYTES') * 60 as pcie_rx_bytes,
    avg(value) filter (where metric = 'DCGM_FI_PROF_NVLINK_TX_BYTES') * 60 as nvlink_tx_bytes,
    avg(value) filter (where metric = 'DCGM_FI_PROF_NVLINK_RX_BYTES') * 60 as nvlink_rx_bytes,
    min(hpc_job) as hpc_job,
    min(k8s_namespace) as k8s_namespace,
    min(k8s_pod) as k8s_pod,
    -- a shared (time-sliced) GPU carries one series per workload: keep every label for reconciliation
    list(distinct hpc_job) filter (where hpc_job is not null) as hpc_jobs,
    list(distinct k8s_pod) filter (where k8s_pod is not null) as k8s_pods,
    max(uuid) as uuid,
    max(model_name) as model_name,
    max(gpu_instance_profile) as gpu_instance_profile,
    count(*) as samples
  from samples
  group by host, gpu, gpu_instance_id, date_trunc('minute', sampled_at)
),

final as (
  select
    host,
    gpu,
    gpu_instance_id,
    minute_at,
    cast(minute_at as date) as activity_date,
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
    list_sort(hpc_jobs) as hpc_jobs,
    list_sort(k8s_pods) as k8s_pods,
    uuid,
    model_name,
    gpu_instance_profile,
    samples
  from per_minute
)

select * from final
