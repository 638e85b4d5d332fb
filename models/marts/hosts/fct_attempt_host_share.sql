-- one row per job attempt per host it holds GPUs on: its share of the host, and the host's CPU,
-- memory, network and disk use attributed to it by that share over its time there.
-- Share = the attempt's GPUs on the host (sum of fractions: a MIG slice k/7, a time-slice share
-- 1/replicas) / the host's physical GPUs in the inventory in effect the day the attempt started;
-- null (and nothing attributed) for a host outside the inventory.
-- A host-saturated minute: the host's CPU busy fraction >= host_cpu_saturated while the attempt's
-- GPUs on it with telemetry that minute are underused (their mean activity < gpu_underused_activity):
-- a data-loader-bound job waits on the host, not on its GPUs. An idle GPU is underused too; the idle
-- policies' 0.05 threshold alone would never see a loader-bound job working its GPUs at 10-25 %.
--
-- merged by attempt (macros/build_window.sql): a build re-reads the attempts with an allocation alive at or
-- after the window's start, all their minutes (from their first start: a constant, so the per-minute marts
-- prune by zonemaps)
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_allocated_attempts', window_key='source, job_id, attempt') }}
{%- set first_start_at = window_floor_at(
      "select min(date_trunc('minute', started_at)) from " ~ ref('fct_allocations') ~ ' where ' ~ in_window_allocated_attempts()) %}
with allocations as (
  select * from {{ ref('fct_allocations') }}
  where effective_ended_at > started_at
    and {{ in_window_allocated_attempts() }}
),

params as (
  select 0.9 as host_cpu_saturated, 0.3 as gpu_underused_activity
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
    sum(fraction) as attempt_gpus,
    count(*) as attempt_allocations
  from allocations
  group by source, job_id, attempt, host
),

host_gpus as (
  select day, host, count(*) as host_gpus
  from {{ ref('fct_capacity_daily') }}
  where day in (select cast(started_at as date) from allocations)
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

-- per attempt, host and minute: the mean activity of its GPUs with telemetry there
gpu_minutes as (
  select
    a.source,
    a.job_id,
    a.attempt,
    a.host,
    m.minute_at,
    avg(m.activity) as gpu_activity
  from {{ ref('fct_allocation_activity') }} m
  join allocations a using (allocation_id)
  where m.minute_at >= {{ first_start_at }}
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
    and h.minute_at >= {{ first_start_at }}
    and h.minute_at >= date_trunc('minute', s.started_at)
    and h.minute_at < s.ended_at
),

minutes as (
  select
    h.*,
    g.minute_at is not null as is_observed,
    g.gpu_activity,
    h.cpu_busy_fraction >= p.host_cpu_saturated and g.gpu_activity < p.gpu_underused_activity as is_saturated
  from host_minutes h
  left join gpu_minutes g using (source, job_id, attempt, host, minute_at)
  cross join params p
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
    count(*) filter (where h.is_observed) as observed_minutes,
    avg(h.gpu_activity) as gpu_activity_mean,
    count(*) filter (where h.is_saturated) as host_saturated_minutes,
    avg(h.cpu_busy_fraction) filter (where h.is_saturated) as saturated_cpu_busy_fraction_mean,
    avg(h.disk_read_bytes_per_s) filter (where h.is_saturated) as saturated_disk_read_bytes_per_s_mean,
    avg(h.gpu_activity) filter (where h.is_saturated) as saturated_gpu_activity_mean
  from minutes h
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
    s.attempt_allocations,
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
    u.gpu_activity_mean,
    coalesce(u.host_saturated_minutes, 0) as host_saturated_minutes,
    coalesce(u.host_saturated_minutes, 0) * s.attempt_gpus / 60.0 as host_saturated_gpu_hours,
    u.saturated_cpu_busy_fraction_mean,
    u.saturated_disk_read_bytes_per_s_mean,
    u.saturated_gpu_activity_mean
  from shares s
  left join usage u using (source, job_id, attempt, host)
)

select * from final
