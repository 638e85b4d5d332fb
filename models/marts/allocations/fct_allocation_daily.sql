-- merged by allocation (macros/build_window.sql): a build rebuilds every day of the allocations the
-- window reaches (an idle window that ends in it may begin days before), reading only their minutes
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_allocations_or_gone', window_key='allocation_id') }}
with allocations as materialized (
  select * from {{ ref('fct_allocations') }}
  where {{ in_window_allocations() }}
),

segments as materialized (
  select * from {{ ref('fct_allocation_segments') }}
  semi join allocations using (allocation_id)
),

gpus as (
  select host, gpu, gpu_instance_id, memory_mib from {{ ref('dim_gpus') }}
),

segment_telemetry as (
  select
    allocation_id,
    day,
    count(activity) as telemetry_minutes,
    avg(activity) as mean_activity,
    max(fb_used_mib) as peak_fb_used_mib
  from {{ ref('fct_allocation_activity') }}
  {%- if is_incremental() %}
  -- on (allocation_id, day), the per-minute table is read only on those days' row groups
  semi join segments using (allocation_id, day)
  {%- endif %}
  group by allocation_id, day
),

-- idle windows cut at midnight, like everything else per day
segment_idle as (
  select
    s.allocation_id,
    s.day,
    sum(
      epoch(least(w.window_end_at, s.segment_end_at) - greatest(w.window_start_at, s.segment_start_at)) / 3600.0
    ) * any_value(s.fraction) as idle_gpu_hours
  from segments s
  join {{ ref('fct_idle_windows') }} w
    on w.allocation_id = s.allocation_id
    and w.window_start_at < s.segment_end_at
    and w.window_end_at > s.segment_start_at
  group by s.allocation_id, s.day
),

final as (
  select
    s.allocation_id,
    s.day,
    a.source,
    a.job_id,
    a.attempt,
    a.tenant,
    a.queue,
    a.template,
    a.gpu_model,
    a.host,
    a.gpu,
    a.gpu_instance_id,
    a.fraction,
    s.segment_start_at,
    s.segment_end_at,
    s.allocated_hours,
    s.allocated_gpu_hours,
    coalesce(t.telemetry_minutes, 0) as telemetry_minutes,
    coalesce(t.telemetry_minutes, 0) > 0 as has_telemetry,
    t.mean_activity,
    -- active = allocated time weighted by activity: the mean over the segment's telemetry minutes
    -- stands for its unsampled minutes too; no telemetry at all counts as no activity
    coalesce(t.mean_activity, 0) * s.allocated_gpu_hours as active_gpu_hours,
    coalesce(i.idle_gpu_hours, 0) as idle_gpu_hours,
    t.peak_fb_used_mib,
    g.memory_mib
  from segments s
  join allocations a using (allocation_id)
  left join segment_telemetry t using (allocation_id, day)
  left join segment_idle i using (allocation_id, day)
  left join gpus g
    on g.host = a.host
    and g.gpu = a.gpu
    and g.gpu_instance_id is not distinct from a.gpu_instance_id
)

select * from final
