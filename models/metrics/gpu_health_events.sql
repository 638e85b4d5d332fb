-- What the gpu-health policy reads (pipelines/policies/inputs.py HEALTH_SCHEMA): every health event
-- of marts.fct_gpu_health_events, plus one 'telemetry' row per GPU per hour it sent any telemetry,
-- so that a GPU gone silent is never taken for a healthy one. engine: the scheduler that holds the
-- host, as the governance enforcers name it (the inventory's k8s is kueue); allocator when no
-- inventory names the host.
with events as (
  select * from {{ ref('fct_gpu_health_events') }}
),

activity as (
  select * from {{ ref('fct_gpu_activity') }}
),

engines as (
  select
    host,
    min(case inventory_source when 'k8s' then 'kueue' else inventory_source end) as engine
  from {{ ref('dim_gpus') }}
  where inventory_source is not null
  group by host
),

telemetry as (
  select
    host,
    gpu,
    date_trunc('hour', minute_at) as minute_at,
    'telemetry' as signal,
    cast(null as integer) as xid,
    cast(count(distinct minute_at) as double) as event_count,
    'ok' as severity,
    false as is_hardware_fault
  from activity
  group by host, gpu, date_trunc('hour', minute_at)
),

unioned as (
  select host, gpu, minute_at, signal, xid, event_count, severity, is_hardware_fault from events
  union all
  select * from telemetry
),

final as (
  select
    u.host,
    u.gpu,
    u.minute_at,
    u.signal,
    u.xid,
    u.event_count,
    u.severity,
    u.is_hardware_fault,
    coalesce(e.engine, 'allocator') as engine
  from unioned u
  left join engines e using (host)
)

select * from final
