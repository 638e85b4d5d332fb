-- one row per host per minute, from node_exporter: CPU busy, memory, network and disk rates.
-- Counters become rates from the difference between consecutive samples of a series (host x
-- metric x cpu x mode x device), booked to the minute of the later sample:
-- - a drop is a counter reset (node or exporter restart): the counter restarted from 0 and grew by
--   its new value, as Prometheus' rate()/increase() count it; never a negative rate;
-- - a sample more than max_gap_minutes after the previous one gives no rate: the gap's traffic is
--   not known to have been steady (5 minutes is Prometheus' staleness window).
-- CPU busy = non-idle CPU-seconds / all CPU-seconds, summed over CPUs and modes; idle, iowait and
-- steal are not busy, as in node_exporter's node-mixin (instance:node_cpu_utilisation:rate5m) and
-- kube-prometheus' node rules: iowait is an idle CPU waiting for I/O, steal is time the hypervisor
-- gave to someone else. The sums make one row per CPU (the exporter) and cpu="all" (the simulator)
-- the same. Devices: see network_devices and disk_devices below.
-- Built one UTC day at a time (microbatch on minute_at). The input is read unfiltered and cut here,
-- max_gap_minutes before the day: the day's first rate needs the day before's last sample.
-- Kept as day files beside the warehouse (day_files, models/macros/day_files.sql).
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='minute_at',
          batch_size='day', begin='2026-01-01', lookback=0, concurrent_batches=false,
          day_files='activity_date') }}
{%- set max_gap_minutes = 5 %}
{%- set batch = model.batch if model.batch else none %}
with samples as (
  select
    sampled_at,
    host,
    metric,
    cpu,
    mode,
    device,
    value
  from {{ ref('stg_node__host_samples').render() }}
  {%- if batch %}
  where sampled_at >= timestamp '{{ batch.event_time_start.strftime("%Y-%m-%d %H:%M:%S") }}' - interval {{ max_gap_minutes }} minute
    and sampled_at < timestamp '{{ batch.event_time_end.strftime("%Y-%m-%d %H:%M:%S") }}'
  {%- endif %}
),

-- NICs counted: the physical ones. Loopback never leaves the host; container, bridge, tunnel and
-- overlay interfaces (veth, docker, br, cali, flannel, cni, vxlan, ...) and bonds/VLANs re-count
-- traffic a physical NIC already counts; ifb mirrors ingress for traffic shaping.
-- Disks counted: whole disks. Partitions (sda1, nvme0n1p2, mmcblk0p1) and device-mapper / software
-- RAID (dm-*, md*) re-count their disks' I/O; loop, ram, zram, fd, sr and nbd are not storage
-- reads the host does from a disk. node_exporter's default diskstats filter already drops
-- partitions, loop and ram; this repeats it for exporters configured otherwise.
counted as (
  select
    *,
    case
      when metric in ('node_network_receive_bytes_total', 'node_network_transmit_bytes_total') then
        device is not null
        and not regexp_matches(device, '^(lo|veth|docker|br|cali|flannel|cni|virbr|vxlan|tunl|tun|tap|kube-|lxc|weave|genev|cilium|ifb|bond|team|dummy|gre|sit|ip6|ipip|wg|nodelocaldns)')  -- noqa: LT05
        and not regexp_matches(device, '[.@]')
      when metric in ('node_disk_read_bytes_total', 'node_disk_written_bytes_total') then
        device is not null
        and not regexp_matches(device, '^((loop|ram|zram|fd|dm-|md|sr|nbd)[0-9]+|(h|s|v|xv)d[a-z]+[0-9]+|nvme[0-9]+n[0-9]+p[0-9]+|mmcblk[0-9]+p[0-9]+)$')  -- noqa: LT05
      when metric = 'node_cpu_seconds_total' then mode is not null
      else true
    end as is_counted
  from samples
),

counters as (
  select
    host,
    metric,
    cpu,
    mode,
    device,
    sampled_at,
    value,
    lag(value) over series as previous_value,
    lag(sampled_at) over series as previous_sampled_at
  from counted
  where is_counted
    and metric in (
      'node_cpu_seconds_total',
      'node_network_receive_bytes_total',
      'node_network_transmit_bytes_total',
      'node_disk_read_bytes_total',
      'node_disk_written_bytes_total'
    )
  window series as (partition by host, metric, cpu, mode, device order by sampled_at)
),

increases as (
  select
    host,
    metric,
    mode,
    device,
    sampled_at,
    date_trunc('minute', sampled_at) as minute_at,
    case when value >= previous_value then value - previous_value else value end as increase,
    epoch(sampled_at - previous_sampled_at) as interval_s
  from counters
  where previous_sampled_at is not null
    and sampled_at - previous_sampled_at <= interval {{ max_gap_minutes }} minute
    {%- if batch %}
    and sampled_at >= timestamp '{{ batch.event_time_start.strftime("%Y-%m-%d %H:%M:%S") }}'
    {%- endif %}
),

-- one row per host per scrape: CPU-seconds over every CPU and mode since the previous scrape
cpu_scrapes as (
  select
    host,
    minute_at,
    sampled_at,
    sum(increase) filter (where mode not in ('idle', 'iowait', 'steal')) as busy_cpu_s,
    sum(increase) as cpu_s,
    max(interval_s) as interval_s
  from increases
  where metric = 'node_cpu_seconds_total'
  group by host, minute_at, sampled_at
),

cpu_minutes as (
  select
    host,
    minute_at,
    sum(coalesce(busy_cpu_s, 0)) / nullif(sum(cpu_s), 0) as cpu_busy_fraction,
    sum(coalesce(busy_cpu_s, 0)) / nullif(sum(interval_s), 0) as cpu_busy_cores,
    sum(cpu_s) / nullif(sum(interval_s), 0) as cpus
  from cpu_scrapes
  group by host, minute_at
),

-- bytes per second of each device over the minute, then summed over devices
device_minutes as (
  select
    host,
    minute_at,
    metric,
    device,
    sum(increase) / nullif(sum(interval_s), 0) as bytes_per_s
  from increases
  where metric <> 'node_cpu_seconds_total'
  group by host, minute_at, metric, device
),

io_minutes as (
  select
    host,
    minute_at,
    sum(bytes_per_s) filter (where metric = 'node_network_receive_bytes_total') as network_receive_bytes_per_s,
    sum(bytes_per_s) filter (where metric = 'node_network_transmit_bytes_total') as network_transmit_bytes_per_s,
    sum(bytes_per_s) filter (where metric = 'node_disk_read_bytes_total') as disk_read_bytes_per_s,
    sum(bytes_per_s) filter (where metric = 'node_disk_written_bytes_total') as disk_written_bytes_per_s
  from device_minutes
  group by host, minute_at
),

-- the minutes with any sample of the day, and the memory gauges (means over the minute)
sample_minutes as (
  select
    host,
    date_trunc('minute', sampled_at) as minute_at,
    avg(value) filter (where metric = 'node_memory_MemTotal_bytes') as memory_total_bytes,
    avg(value) filter (where metric = 'node_memory_MemAvailable_bytes') as memory_available_bytes,
    count(*) as samples
  from samples
  {%- if batch %}
  where sampled_at >= timestamp '{{ batch.event_time_start.strftime("%Y-%m-%d %H:%M:%S") }}'
  {%- endif %}
  group by host, minute_at
),

final as (
  select
    m.host,
    m.minute_at,
    cast(m.minute_at as date) as activity_date,
    c.cpu_busy_fraction,
    c.cpu_busy_cores,
    c.cpus,
    m.memory_total_bytes - m.memory_available_bytes as memory_used_bytes,
    m.memory_total_bytes,
    i.network_receive_bytes_per_s,
    i.network_transmit_bytes_per_s,
    i.disk_read_bytes_per_s,
    i.disk_written_bytes_per_s,
    m.samples
  from sample_minutes m
  left join cpu_minutes c using (host, minute_at)
  left join io_minutes i using (host, minute_at)
)

select * from final
