-- one row per node_exporter series per sample time, for the metrics the host marts read. A sample
-- can arrive twice (a scrape file and the simulator's Parquet, overlapping files, a re-ingested
-- day): each series and time counts once, with the value from the latest ingest. Kept in long form:
-- the counters are per CPU x mode and per device, and the marts take deltas per series.
with source as (
  select
    sampled_at,
    host,
    metric,
    value,
    cpu,
    mode,
    device,
    source,
    ingested_at
  from {{ source('raw', 'host_samples') }}
  where metric in (
    'node_cpu_seconds_total',
    'node_memory_MemTotal_bytes',
    'node_memory_MemAvailable_bytes',
    'node_network_receive_bytes_total',
    'node_network_transmit_bytes_total',
    'node_disk_read_bytes_total',
    'node_disk_written_bytes_total'
  )
),

deduplicated as (
  select
    sampled_at,
    host,
    metric,
    cpu,
    mode,
    device,
    arg_max(value, ingested_at) as value,
    arg_max(source, ingested_at) as source,
    count(*) as deliveries,
    max(ingested_at) as ingested_at
  from source
  group by sampled_at, host, metric, cpu, mode, device
),

final as (
  select
    sampled_at,
    host,
    metric,
    cpu,
    mode,
    device,
    value,
    source,
    deliveries,
    ingested_at
  from deduplicated
)

select * from final
