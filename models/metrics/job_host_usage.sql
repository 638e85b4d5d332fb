-- per job attempt: the host use attributed to it by its GPU share, summed over the hosts it held
-- GPUs on (fct_attempt_host_share has the per-host rows). Means over minutes are weighted by each
-- host's minutes; the saturated_* evidence is over the host-saturated minutes of all its hosts.
with shares as (
  select * from {{ ref('fct_attempt_host_share') }}
),

final as (
  select
    source,
    job_id,
    attempt,
    any_value(tenant) as tenant,
    any_value(queue) as queue,
    any_value(template) as template,
    any_value(gpu_model) as gpu_model,
    min(started_at) as started_at,
    max(ended_at) as ended_at,
    bool_or(is_running) as is_running,
    count(*) as hosts,
    sum(attempt_gpus) as gpus,
    sum(attempt_allocations) as allocations,
    sum(host_minutes) as host_minutes,
    sum(observed_minutes) as observed_minutes,
    sum(attributed_cpu_busy_cores) as attributed_cpu_busy_cores,
    sum(attributed_cpu_busy_core_hours) as attributed_cpu_busy_core_hours,
    sum(attributed_memory_used_bytes_mean) as attributed_memory_used_bytes_mean,
    sum(attributed_memory_used_bytes_peak) as attributed_memory_used_bytes_peak,
    sum(attributed_network_receive_bytes) as attributed_network_receive_bytes,
    sum(attributed_network_transmit_bytes) as attributed_network_transmit_bytes,
    sum(attributed_disk_read_bytes) as attributed_disk_read_bytes,
    sum(attributed_disk_written_bytes) as attributed_disk_written_bytes,
    sum(gpu_activity_mean * observed_minutes) / nullif(sum(observed_minutes), 0) as gpu_activity_mean,
    sum(host_saturated_minutes) as host_saturated_minutes,
    sum(host_saturated_minutes) / nullif(sum(observed_minutes), 0) as host_saturated_share,
    sum(host_saturated_gpu_hours) as host_saturated_gpu_hours,
    -- the host where it waited longest (ties: the last by name)
    arg_max(host, (host_saturated_minutes, host)) filter (where host_saturated_minutes > 0) as saturated_host,
    sum(saturated_cpu_busy_fraction_mean * host_saturated_minutes)
      / nullif(sum(host_saturated_minutes), 0) as saturated_cpu_busy_fraction_mean,
    sum(saturated_disk_read_bytes_per_s_mean * host_saturated_minutes)
      / nullif(sum(host_saturated_minutes), 0) as saturated_disk_read_bytes_per_s_mean,
    sum(saturated_gpu_activity_mean * host_saturated_minutes)
      / nullif(sum(host_saturated_minutes), 0) as saturated_gpu_activity_mean
  from shares
  group by source, job_id, attempt
)

select * from final
