-- one row per job attempt per host it holds GPUs on: its share of the host, and the host's CPU,
-- memory, network and disk use attributed to it by that share over its time there.
-- Share = the attempt's GPUs on the host (sum of fractions: a MIG slice k/7, a time-slice share
-- 1/replicas) / the host's physical GPUs in the inventory in effect the day the attempt started;
-- null (and nothing attributed) for a host outside the inventory.
-- A host-saturated minute: the host's CPU busy fraction >= saturated_cpu_busy while every one of the
-- attempt's GPUs on it with telemetry that minute is idle by the idle policy fct_idle_windows
-- applies (activity under the threshold, and under the memory floor where the policy has one):
-- a data-loader-bound job waits on the host, not on its GPUs.
{%- set saturated_cpu_busy = 0.9 %}
with allocations as (
  select * from {{ ref('fct_allocations') }}
  where effective_ended_at > started_at
),

attempt_hosts as (
  select
    source,
    job_id,
    attempt,
    host,
    any_value(tenant) as tenant,
    any_value(queue) as queue,
    any_value(template) as template,
    any_value(gpu_model) as gpu_model,
    min(started_at) as started_at,
    max(effective_ended_at) as ended_at,
    bool_or(is_running) as is_running,
    sum(fraction) as attempt_gpus
  from allocations
  group by source, job_id, attempt, host
),

host_gpus as (
  select day, host, count(*) as host_gpus
  from {{ ref('fct_capacity_daily') }}
  group by day, host
),

shares as (
  select
    a.*,
    g.host_gpus,
    least(a.attempt_gpus / g.host_gpus, 1.0) as gpu_share
  from attempt_hosts a
  left join host_gpus g
    on g.host = a.host
    and g.day = cast(a.started_at as date)
),

-- the idle policy of each allocation, resolved as fct_idle_windows resolves it: queue, then
-- template, then default
resolved_policy as (
  select
    a.allocation_id,
    p.activity_threshold,
    p.memory_floor_mib
  from allocations a
  join {{ ref('idle_policy') }} p
    on (p.scope = 'queue' and p.scope_value = a.queue)
    or (p.scope = 'template' and p.scope_value = a.template)
    or p.scope = 'default'
  qualify row_number() over (
    partition by a.allocation_id
    order by case p.scope when 'queue' then 1 when 'template' then 2 else 3 end
  ) = 1
),

-- per attempt, host and minute: whether all its GPUs with telemetry there were idle
gpu_minutes as (
  select
    a.source,
    a.job_id,
    a.attempt,
    a.host,
    m.minute_at,
    bool_and(
      m.activity < r.activity_threshold
      and (r.memory_floor_mib is null or coalesce(m.fb_used_mib < r.memory_floor_mib, false))
    ) as is_idle
  from {{ ref('fct_allocation_activity') }} m
  join allocations a using (allocation_id)
  join resolved_policy r using (allocation_id)
  group by a.source, a.job_id, a.attempt, a.host, m.minute_at
),

host_minutes as (
  select
    s.source,
    s.job_id,
    s.attempt,
    s.host,
    h.minute_at,
    h.cpu_busy_fraction,
    h.cpu_busy_cores,
    h.memory_used_bytes,
    h.network_receive_bytes_per_s,
    h.network_transmit_bytes_per_s,
    h.disk_read_bytes_per_s,
    h.disk_written_bytes_per_s
  from shares s
  join {{ ref('fct_host_activity') }} h
    on h.host = s.host
    and h.minute_at >= date_trunc('minute', s.started_at)
    and h.minute_at < s.ended_at
),

usage as (
  select
    h.source,
    h.job_id,
    h.attempt,
    h.host,
    count(*) as host_minutes,
    avg(h.cpu_busy_fraction) as host_cpu_busy_fraction_mean,
    avg(h.cpu_busy_cores) as host_cpu_busy_cores_mean,
    sum(h.cpu_busy_cores) / 60.0 as host_cpu_busy_core_hours,
    avg(h.memory_used_bytes) as host_memory_used_bytes_mean,
    max(h.memory_used_bytes) as host_memory_used_bytes_peak,
    -- a minute moves 60 x its mean rate; minutes without a rate (after a gap) add nothing
    sum(h.network_receive_bytes_per_s) * 60 as host_network_receive_bytes,
    sum(h.network_transmit_bytes_per_s) * 60 as host_network_transmit_bytes,
    sum(h.disk_read_bytes_per_s) * 60 as host_disk_read_bytes,
    sum(h.disk_written_bytes_per_s) * 60 as host_disk_written_bytes,
    count(g.minute_at) as observed_minutes,
    count(*) filter (where g.is_idle and h.cpu_busy_fraction >= {{ saturated_cpu_busy }}) as host_saturated_minutes
  from host_minutes h
  left join gpu_minutes g using (source, job_id, attempt, host, minute_at)
  group by h.source, h.job_id, h.attempt, h.host
),

final as (
  select
    s.source,
    s.job_id,
    s.attempt,
    s.host,
    s.tenant,
    s.queue,
    s.template,
    s.gpu_model,
    s.started_at,
    s.ended_at,
    s.is_running,
    s.attempt_gpus,
    s.host_gpus,
    s.gpu_share,
    coalesce(u.host_minutes, 0) as host_minutes,
    coalesce(u.observed_minutes, 0) as observed_minutes,
    u.host_cpu_busy_fraction_mean,
    s.gpu_share * u.host_cpu_busy_cores_mean as attributed_cpu_busy_cores,
    s.gpu_share * u.host_cpu_busy_core_hours as attributed_cpu_busy_core_hours,
    s.gpu_share * u.host_memory_used_bytes_mean as attributed_memory_used_bytes_mean,
    s.gpu_share * u.host_memory_used_bytes_peak as attributed_memory_used_bytes_peak,
    s.gpu_share * u.host_network_receive_bytes as attributed_network_receive_bytes,
    s.gpu_share * u.host_network_transmit_bytes as attributed_network_transmit_bytes,
    s.gpu_share * u.host_disk_read_bytes as attributed_disk_read_bytes,
    s.gpu_share * u.host_disk_written_bytes as attributed_disk_written_bytes,
    coalesce(u.host_saturated_minutes, 0) as host_saturated_minutes
  from shares s
  left join usage u using (source, job_id, attempt, host)
)

select * from final
