-- what telemetry and the schedulers disagree on: GPUs working for nobody, allocations nobody sees.
-- Merged (macros/build_window.sql): a GPU's busy minutes nobody held by the window's days, an
-- allocation's findings by the allocations the window reaches
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_findings', window_key='day, allocation_id') }}
with busy_threshold as (
  select activity_threshold from {{ ref('dim_idle_rules') }} where queue is null and template is null
),

gpus as (
  select * from {{ ref('dim_gpus') }}
),

busy_minutes as (
  select a.*
  from {{ ref('fct_gpu_activity') }} a
  where a.activity >= (select max(activity_threshold) from busy_threshold)
    and {{ in_window_days('a.activity_date') }}
    and {{ in_window_times('a.minute_at') }}
),

segments as (
  select * from {{ ref('fct_allocation_segments') }}
  where {{ in_window_days('day') }}
),

window_allocations as materialized (
  select allocation_id from {{ ref('fct_allocations') }}
  where {{ in_window_allocations() }}
),

-- a GPU-level series is covered by any allocation on the GPU (whole or time-sliced), an instance
-- series by an allocation of that instance (an anti join: `not exists` here is decorrelated through
-- a group-by of every busy minute, ten times slower on a month)
busy_unallocated_minutes as (
  select b.*
  from busy_minutes b
  anti join segments s
    on s.host = b.host
    and s.gpu = b.gpu
    and s.day = b.activity_date
    and b.minute_at >= date_trunc('minute', s.segment_start_at)
    and b.minute_at < s.segment_end_at
    -- covered when a sample of the minute was taken while the allocation held the GPU
    and b.last_sampled_at >= s.segment_start_at
    and b.first_sampled_at < s.segment_end_at
    and (b.gpu_instance_id is null or s.telemetry_instance_id = b.gpu_instance_id)
),

busy_unallocated as (
  select
    'busy_unallocated' as finding,
    b.activity_date as day,
    b.host,
    b.gpu,
    b.gpu_instance_id,
    coalesce(max(g.gpu_model), 'unknown') as gpu_model,
    cast(null as varchar) as allocation_id,
    cast(null as varchar) as source,
    cast(null as varchar) as job_id,
    cast(null as varchar) as tenant,
    min(b.minute_at) as first_at,
    max(b.minute_at) + interval 1 minute as last_at,
    count(*) as minutes,
    count(*) / 60.0 * coalesce(max(g.fraction), 1.0) as gpu_hours,
    avg(b.activity) as mean_activity,
    min(b.hpc_job) as telemetry_hpc_job,
    min(b.k8s_pod) as telemetry_k8s_pod,
    'GPU busy (activity >= ' || cast(max(t.activity_threshold) as varchar)
      || ') with no allocation covering these minutes' as detail
  from busy_unallocated_minutes b
  cross join busy_threshold t
  left join gpus g
    on g.host = b.host
    and g.gpu = b.gpu
    and g.gpu_instance_id is not distinct from b.gpu_instance_id
  group by b.activity_date, b.host, b.gpu, b.gpu_instance_id
),

allocation_days as (
  select * from {{ ref('fct_allocation_daily') }}
  semi join window_allocations using (allocation_id)
),

without_telemetry as (
  select
    case when d.gpu is null then 'allocation_without_gpu_index' else 'allocation_without_telemetry' end as finding,
    d.day,
    d.host,
    d.gpu,
    d.gpu_instance_id,
    d.gpu_model,
    d.allocation_id,
    d.source,
    d.job_id,
    d.tenant,
    d.segment_start_at as first_at,
    d.segment_end_at as last_at,
    d.allocated_hours * 60.0 as minutes,
    d.allocated_gpu_hours as gpu_hours,
    cast(null as double) as mean_activity,
    cast(null as varchar) as telemetry_hpc_job,
    cast(null as varchar) as telemetry_k8s_pod,
    case
      when d.gpu is null then 'allocation has no GPU index: it cannot be matched to telemetry'
      else 'allocation held the GPU this day but no telemetry arrived for it'
    end as detail
  from allocation_days d
  where not d.has_telemetry
),

label_mismatches as (
  select
    'label_mismatch' as finding,
    cast(u.started_at as date) as day,
    u.host,
    u.gpu,
    u.gpu_instance_id,
    u.gpu_model,
    u.allocation_id,
    u.source,
    u.job_id,
    u.tenant,
    u.started_at as first_at,
    u.effective_ended_at as last_at,
    cast(u.labelled_minutes - u.label_match_minutes as double) as minutes,
    (u.labelled_minutes - u.label_match_minutes) / 60.0 * u.fraction as gpu_hours,
    cast(null as double) as mean_activity,
    u.other_hpc_job as telemetry_hpc_job,
    u.other_k8s_pod as telemetry_k8s_pod,
    'telemetry labels name another workload than the job holding the GPU (' || u.label_status || ')' as detail
  from {{ ref('fct_allocation_usage') }} u
  semi join window_allocations using (allocation_id)
  where u.label_status in ('mismatch', 'partial')
),

unioned as (
  select * from busy_unallocated
  union all by name
  select * from without_telemetry
  union all by name
  select * from label_mismatches
),

final as (
  select
    finding,
    day,
    host,
    gpu,
    gpu_instance_id,
    gpu_model,
    allocation_id,
    source,
    job_id,
    tenant,
    first_at,
    last_at,
    minutes,
    gpu_hours,
    mean_activity,
    telemetry_hpc_job,
    telemetry_k8s_pod,
    detail
  from unioned
)

select * from final
