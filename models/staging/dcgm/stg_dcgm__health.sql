-- one row per DCGM health series per sample time: XID reports, ECC and remapped-row counters,
-- clock-event (throttle) reasons, NVLink and PCIe error counters, temperature. A sample can arrive
-- twice (a scrape file and Prometheus history, a re-ingested day): it counts once, with the value
-- from the latest ingest. The XID code of DCGM_EXP_XID_ERRORS_COUNT is a label the contract does
-- not map, so it is read from extra_labels (k="v" joined by commas).
with source as (
  select
    sampled_at,
    host,
    gpu,
    gpu_instance_id,
    uuid,
    model_name,
    metric,
    value,
    try_cast(nullif(regexp_extract(extra_labels, '(^|,)xid="([0-9]+)"', 2), '') as integer) as xid,
    source,
    ingested_at
  from {{ source('raw', 'dcgm_samples') }}
  where metric in (
    'DCGM_EXP_XID_ERRORS_COUNT',
    'DCGM_FI_DEV_XID_ERRORS',
    'DCGM_FI_DEV_ECC_SBE_VOL_TOTAL',
    'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL',
    'DCGM_FI_DEV_ECC_SBE_AGG_TOTAL',
    'DCGM_FI_DEV_ECC_DBE_AGG_TOTAL',
    'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS',
    'DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS',
    'DCGM_FI_DEV_ROW_REMAP_FAILURE',
    'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS',
    'DCGM_FI_DEV_CLOCKS_EVENT_REASONS',
    'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL',
    'DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL',
    'DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL',
    'DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL',
    'DCGM_FI_DEV_PCIE_REPLAY_COUNTER',
    'DCGM_FI_DEV_GPU_TEMP'
  )
),

final as (
  select
    sampled_at,
    host,
    gpu,
    gpu_instance_id,
    metric,
    xid,
    arg_max(value, ingested_at) as value,
    any_value(uuid) as uuid,
    any_value(model_name) as model_name,
    any_value(source) as source,
    count(*) as deliveries,
    max(ingested_at) as ingested_at
  from source
  group by sampled_at, host, gpu, gpu_instance_id, metric, xid
)

select * from final
