-- day x host: the host's CPU, memory, network and disk use over its minutes with node_exporter data
with activity as (
  select * from {{ ref('fct_host_activity') }}
),

final as (
  select
    activity_date as day,
    host,
    100 * avg(cpu_busy_fraction) as cpu_busy_pct_mean,
    100 * quantile_cont(cpu_busy_fraction, 0.95) as cpu_busy_pct_p95,
    avg(cpu_busy_cores) as cpu_busy_cores_mean,
    max(cpus) as cpus,
    avg(memory_used_bytes) as memory_used_bytes_mean,
    max(memory_used_bytes) as memory_used_bytes_peak,
    max(memory_total_bytes) as memory_total_bytes,
    avg(network_receive_bytes_per_s) as network_receive_bytes_per_s_mean,
    avg(network_transmit_bytes_per_s) as network_transmit_bytes_per_s_mean,
    avg(disk_read_bytes_per_s) as disk_read_bytes_per_s_mean,
    avg(disk_written_bytes_per_s) as disk_written_bytes_per_s_mean,
    count(*) as minutes_with_data
  from activity
  group by activity_date, host
)

select * from final
