-- per GPU: its health history over the loaded window. A repeat offender had at least
-- repeat_offender_faults hardware-fault minutes within some repeat_offender_days days; a node is one
-- when its GPUs together were. Its node going down is a hardware fault of each of its GPUs in every
-- minute it is down (marts.fct_host_outages, signal host_down).
with events as (
  select * from {{ ref('fct_gpu_health_events') }}
),

outages as (
  select * from {{ ref('fct_host_outages') }}
),

host_gpus as (
  select host, gpu, min(gpu_model) as gpu_model from {{ ref('dim_gpus') }} group by host, gpu
),

-- each GPU of a host that went down, in each minute it was down
host_down_minutes as (
  select
    g.host,
    g.gpu,
    unnest(generate_series(o.down_from_at, o.back_at - interval 1 minute, interval 1 minute)) as minute_at
  from outages o
  join host_gpus g using (host)
),

host_down as (
  select g.host, g.gpu, count(*) as host_outages, sum(o.down_minutes) as host_down_minutes
  from outages o
  join host_gpus g using (host)
  group by g.host, g.gpu
),

params as (
  -- repeat_offender_days is also the window of gpu_windows and node_windows below
  select 2 as repeat_offender_faults, 30 as repeat_offender_days
),

as_of as (
  select max(as_of_at) as as_of_at from {{ ref('dim_days') }}
),

fault_minutes as (
  select host, gpu, minute_at from events where is_hardware_fault
  union
  select host, gpu, minute_at from host_down_minutes
),

fault_counts as (
  select
    host,
    gpu,
    count(*) as hardware_faults,
    min(minute_at) as first_fault_at,
    max(minute_at) as last_fault_at
  from fault_minutes
  group by host, gpu
),

-- hardware-fault minutes in the repeat_offender_days (30) ending at each fault, per GPU and per node
gpu_windows as (
  select host, gpu, max(faults_in_window) as max_faults_in_window
  from (
    select host, gpu, count(*) over (
      partition by host, gpu order by minute_at range between interval 30 days preceding and current row
    ) as faults_in_window
    from fault_minutes
  ) gpu_counts
  group by host, gpu
),

node_windows as (
  select host, max(faults_in_window) as max_node_faults_in_window
  from (
    select host, count(*) over (
      partition by host order by minute_at range between interval 30 days preceding and current row
    ) as faults_in_window
    from fault_minutes
  ) node_counts
  group by host
),

recent as (
  select f.host, f.gpu, count(*) as hardware_faults_last_30d
  from fault_minutes f
  cross join as_of a
  cross join params p
  where f.minute_at > a.as_of_at - to_days(p.repeat_offender_days)
  group by f.host, f.gpu
),

per_gpu as (
  select
    host,
    gpu,
    min(gpu_model) as gpu_model,
    coalesce(sum(event_count) filter (where signal = 'xid' and is_hardware_fault), 0) as hardware_xids,
    coalesce(sum(event_count) filter (where severity = 'application'), 0) as application_xids,
    coalesce(sum(event_count) filter (where signal = 'ecc_dbe'), 0) as ecc_dbe_errors,
    coalesce(sum(event_count) filter (where signal = 'ecc_sbe'), 0) as ecc_sbe_errors,
    count(*) filter (where severity = 'warning') as warning_minutes,
    string_agg(distinct cast(xid as varchar), ',' order by cast(xid as varchar)) filter (where xid is not null)
      as xids_seen
  from events
  group by host, gpu
),

keys as (
  select host, gpu from per_gpu
  union
  select host, gpu from host_down
),

final as (
  select
    k.host,
    k.gpu,
    coalesce(g.gpu_model, h.gpu_model, 'unknown') as gpu_model,
    coalesce(f.hardware_faults, 0) as hardware_faults,
    f.first_fault_at,
    f.last_fault_at,
    coalesce(r.hardware_faults_last_30d, 0) as hardware_faults_last_30d,
    coalesce(g.hardware_xids, 0) as hardware_xids,
    coalesce(g.application_xids, 0) as application_xids,
    coalesce(g.ecc_dbe_errors, 0) as ecc_dbe_errors,
    coalesce(g.ecc_sbe_errors, 0) as ecc_sbe_errors,
    coalesce(g.warning_minutes, 0) as warning_minutes,
    g.xids_seen,
    coalesce(d.host_outages, 0) as host_outages,
    coalesce(d.host_down_minutes, 0) as host_down_minutes,
    coalesce(w.max_faults_in_window, 0) >= p.repeat_offender_faults as is_repeat_offender,
    coalesce(n.max_node_faults_in_window, 0) >= p.repeat_offender_faults as is_node_repeat_offender
  from keys k
  cross join params p
  left join per_gpu g using (host, gpu)
  left join host_gpus h using (host, gpu)
  left join fault_counts f using (host, gpu)
  left join host_down d using (host, gpu)
  left join recent r using (host, gpu)
  left join gpu_windows w using (host, gpu)
  left join node_windows n using (host)
)

select * from final
