-- merged by allocation (macros/build_window.sql): a build re-reads the days and minutes of the
-- allocations the window reaches and of no other
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_allocations_or_gone', window_key='allocation_id') }}
with allocations as materialized (
  select * from {{ ref('fct_allocations') }}
  where {{ in_window_allocations() }}
),

allocation_days as materialized (
  select * from {{ ref('fct_allocation_daily') }}
  semi join allocations using (allocation_id)
),

daily as (
  select
    allocation_id,
    sum(telemetry_minutes) as telemetry_minutes,
    sum(active_gpu_hours) as active_gpu_hours,
    sum(idle_gpu_hours) as idle_gpu_hours,
    max(peak_fb_used_mib) as peak_fb_used_mib,
    max(memory_mib) as memory_mib
  from allocation_days
  group by allocation_id
),

idle as (
  select allocation_id, count(*) as idle_windows
  from {{ ref('fct_idle_windows') }}
  semi join allocations using (allocation_id)
  group by allocation_id
),

-- the workload labels telemetry carried against the job the scheduler says held the GPU, over the
-- minutes the allocation covers whole; a minute matches when any of its labels (a shared GPU has
-- several) names the job
minute_labels as (
  select
    m.allocation_id,
    m.hpc_jobs is not null or m.k8s_pods is not null as is_labelled,
    coalesce(list_contains(m.hpc_jobs, a.job_id), false)
      or coalesce(len(list_filter(m.k8s_pods, lambda p: p = a.job_id or starts_with(p, a.job_id || '-'))) > 0, false)
      as is_match,
    list_filter(m.hpc_jobs, lambda j: j <> a.job_id)[1] as other_hpc_job,
    list_filter(m.k8s_pods, lambda p: p <> a.job_id and not starts_with(p, a.job_id || '-'))[1] as other_k8s_pod
  from {{ ref('fct_allocation_activity') }} m
  join allocations a using (allocation_id)
  {%- if is_incremental() %}
  -- on (allocation_id, day), the per-minute table is read only on those days' row groups
  semi join allocation_days d on d.allocation_id = m.allocation_id and d.day = m.day
  {%- endif %}
  -- the partial first and last minutes also carry the previous or next holder's labels
  where m.minute_at >= a.started_at
    and m.minute_at + interval 1 minute <= a.effective_ended_at
),

labels as (
  select
    allocation_id,
    count(*) filter (where is_labelled) as labelled_minutes,
    count(*) filter (where is_match) as label_match_minutes,
    min(other_hpc_job) filter (where not is_match) as other_hpc_job,
    min(other_k8s_pod) filter (where not is_match) as other_k8s_pod
  from minute_labels
  group by allocation_id
),

final as (
  select
    a.allocation_id,
    a.source,
    a.job_id,
    a.attempt,
    a.tenant,
    a.queue,
    a.template,
    a.user_name,
    a.host,
    a.gpu,
    a.gpu_instance_id,
    a.gpu_instance_profile,
    a.share_mode,
    a.gpu_model,
    a.fraction,
    a.started_at,
    a.ended_at,
    a.effective_ended_at,
    a.is_running,
    a.end_event_type,
    a.allocated_hours,
    a.allocated_gpu_hours,
    coalesce(d.telemetry_minutes, 0) as telemetry_minutes,
    coalesce(d.telemetry_minutes, 0) > 0 as has_telemetry,
    100.0 * coalesce(d.telemetry_minutes, 0) / nullif(ceil(a.allocated_hours * 60), 0) as telemetry_coverage_pct,
    coalesce(d.active_gpu_hours, 0) as active_gpu_hours,
    100.0 * d.active_gpu_hours / nullif(a.allocated_gpu_hours, 0) as utilisation_of_allocated_pct,
    coalesce(d.idle_gpu_hours, 0) as idle_gpu_hours,
    coalesce(i.idle_windows, 0) as idle_windows,
    d.peak_fb_used_mib,
    d.memory_mib,
    100.0 * d.peak_fb_used_mib / nullif(d.memory_mib, 0) as peak_fb_used_pct,
    coalesce(l.labelled_minutes, 0) as labelled_minutes,
    coalesce(l.label_match_minutes, 0) as label_match_minutes,
    l.other_hpc_job,
    l.other_k8s_pod,
    case
      when not a.has_gpu_index then 'no_gpu_index'
      when coalesce(d.telemetry_minutes, 0) = 0 then 'no_telemetry'
      when coalesce(l.labelled_minutes, 0) = 0 then 'unlabelled'
      when l.label_match_minutes = l.labelled_minutes then 'match'
      when l.label_match_minutes = 0 then 'mismatch'
      else 'partial'
    end as label_status
  from allocations a
  left join daily d using (allocation_id)
  left join idle i using (allocation_id)
  left join labels l using (allocation_id)
)

select * from final
