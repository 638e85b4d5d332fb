-- the live view: each GPU (or share), who holds it at the data's end, and its latest telemetry
with gpus as (
  select * from {{ ref('dim_gpus') }}
),

holders as (
  select host, gpu, gpu_instance_id, allocation_id, job_id, tenant, queue, template, started_at
  from {{ ref('fct_allocations') }}
  where is_running
  qualify row_number() over (partition by host, gpu, gpu_instance_id order by started_at desc) = 1
),

latest_minute as (
  select host, gpu, gpu_instance_id, minute_at, activity, activity_source, fb_used_mib
  from {{ ref('fct_gpu_activity') }}
  qualify row_number() over (partition by host, gpu, gpu_instance_id order by minute_at desc) = 1
),

as_of as (
  select max(as_of_at) as as_of_at from {{ ref('dim_days') }}
),

final as (
  select
    g.host,
    g.gpu,
    g.gpu_instance_id,
    g.gpu_model,
    g.share_mode,
    g.gpu_instance_profile,
    g.fraction,
    g.is_in_inventory,
    h.allocation_id,
    h.job_id,
    h.tenant,
    h.queue,
    h.template,
    h.started_at as held_since_at,
    h.allocation_id is not null as is_allocated,
    m.minute_at as last_telemetry_at,
    m.activity as last_activity,
    m.activity_source as last_activity_source,
    m.fb_used_mib as last_fb_used_mib,
    coalesce(m.minute_at >= o.as_of_at - interval 10 minute, false) as is_reporting,
    o.as_of_at
  from gpus g
  cross join as_of o
  left join holders h
    on h.host = g.host and h.gpu = g.gpu and h.gpu_instance_id is not distinct from g.gpu_instance_id
  left join latest_minute m
    on m.host = g.host
    and m.gpu = g.gpu
    and m.gpu_instance_id is not distinct from (case when g.share_mode = 'mig' then g.gpu_instance_id end)
)

select * from final
