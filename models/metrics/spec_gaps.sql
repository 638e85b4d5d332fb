-- pending demand per GPU model and request size against the model's free capacity, per UTC day,
-- and the attempts of that size whose measured use fits a smaller request
with causes as (
  select * from {{ ref('fct_wait_causes') }}
),

segments as (
  select * from {{ ref('fct_pool_free_segments') }}
),

usage as (
  select * from {{ ref('fct_allocation_usage') }}
),

jobs as (
  select * from {{ ref('dim_jobs') }}
),

gpus as (
  select * from {{ ref('dim_gpus') }}
),

gpu_models as (
  select * from {{ ref('gpu_models') }}
),

days as (
  select * from {{ ref('dim_days') }}
),

as_of as (
  select max(as_of_at) as as_of_at from days
),

-- GPUs asked by pending attempts, on average over each hour
pending_hourly as (
  select
    c.day,
    c.hour_at,
    c.gpu_model,
    c.share_mode,
    coalesce(c.mig_profile, '') as profile,
    c.gpus_requested,
    sum(c.waited_gpu_hours) as waited_gpu_hours,
    sum(c.waited_gpu_hours) filter (where c.cause = 'capacity_bound') as capacity_bound_gpu_hours,
    sum(c.waited_gpu_hours) filter (where c.cause = 'fragmentation') as fragmentation_gpu_hours,
    sum(c.waited_gpu_hours) / (epoch(least(c.hour_at + interval 1 hour, any_value(o.as_of_at)) - c.hour_at) / 3600.0)
      as pending_gpus
  from causes c
  cross join as_of o
  group by c.day, c.hour_at, c.gpu_model, c.share_mode, coalesce(c.mig_profile, ''), c.gpus_requested
),

-- free GPUs (fraction-weighted) of each model and shape, on average over each hour
free_hourly as (
  select
    s.hour_at,
    s.gpu_model,
    s.share_mode,
    coalesce(s.gpu_instance_profile, '') as profile,
    sum(s.free_gpus * s.duration_s) / (epoch(least(s.hour_at + interval 1 hour, any_value(o.as_of_at)) - s.hour_at))
      as free_gpus
  from segments s
  cross join as_of o
  group by s.hour_at, s.gpu_model, s.share_mode, coalesce(s.gpu_instance_profile, '')
),

free_daily as (
  select gpu_model, share_mode, profile, cast(hour_at as date) as day, avg(free_gpus) as free_gpus_avg
  from free_hourly
  group by all
),

pending_daily as (
  select
    p.day,
    p.gpu_model,
    p.share_mode,
    p.profile,
    p.gpus_requested,
    sum(p.waited_gpu_hours) as waited_gpu_hours,
    coalesce(sum(p.capacity_bound_gpu_hours), 0) as capacity_bound_gpu_hours,
    coalesce(sum(p.fragmentation_gpu_hours), 0) as fragmentation_gpu_hours,
    sum(p.waited_gpu_hours) / any_value(d.hours) as pending_gpus_avg,
    max(p.pending_gpus) as pending_gpus_peak_hour,
    -- the busiest hour; on a tie (equal to 1e-9 GPUs: sums differ in the last bits with their order)
    -- the earliest, so the answer does not depend on row or summation order
    arg_min(p.hour_at, (-round(p.pending_gpus, 9), p.hour_at)) as peak_hour_at
  from pending_hourly p
  join days d using (day)
  group by p.day, p.gpu_model, p.share_mode, p.profile, p.gpus_requested
),

-- what each attempt used: a GPU is used when its mean activity over the allocation is >= 5 %
attempt_use as (
  select
    u.source,
    u.job_id,
    u.attempt,
    cast(min(u.started_at) as date) as day,
    any_value(u.gpu_model) as gpu_model,
    any_value(u.share_mode) as share_mode,
    count(*) as gpus_held,
    count(*) filter (where u.utilisation_of_allocated_pct >= 5) as gpus_used,
    bool_and(u.has_telemetry) as has_telemetry,
    max(u.utilisation_of_allocated_pct) as top_utilisation_pct,
    max(u.peak_fb_used_mib) as peak_fb_used_mib,
    max(u.memory_mib) as memory_mib,
    sum(u.allocated_gpu_hours) as allocated_gpu_hours
  from usage u
  group by u.source, u.job_id, u.attempt
),

-- the cheapest whole-GPU model of the pool with its memory, to test "fits a smaller model"
whole_models as (
  select g.gpu_model, max(g.memory_mib) as memory_mib, max(m.price_per_gpu_hour) as price_per_gpu_hour
  from gpus g
  left join gpu_models m using (gpu_model)
  where g.share_mode = 'whole' and g.is_in_inventory
  group by g.gpu_model
),

rightsized as (
  select
    a.*,
    j.gpus_requested,
    coalesce(j.mig_profile, '') as profile,
    case
      when a.share_mode = 'whole' and a.gpus_held = 1 and coalesce(m.compute_slices, 1) > 1
        and a.top_utilisation_pct <= 100.0 * 3 / 7
        and a.peak_fb_used_mib * 1.2 <= a.memory_mib / 2
        then 'mig_slice'
      when a.share_mode = 'whole' and a.gpus_held > 1 and a.gpus_used < a.gpus_held
        then 'fewer_gpus'
      when a.share_mode = 'whole' and a.gpus_held = 1 and a.top_utilisation_pct <= 50
        and exists (
          select 1 from whole_models w
          where w.price_per_gpu_hour < m.price_per_gpu_hour
            and a.peak_fb_used_mib * 1.2 <= w.memory_mib
        )
        then 'smaller_model'
    end as rightsize_to
  from attempt_use a
  join jobs j using (source, job_id)
  left join gpu_models m on m.gpu_model = a.gpu_model
  where a.has_telemetry
),

rightsized_daily as (
  select
    day,
    gpu_model,
    share_mode,
    profile,
    gpus_requested,
    count(*) as attempts_measured,
    count(*) filter (where rightsize_to is not null) as rightsizable_attempts,
    count(*) filter (where rightsize_to = 'mig_slice') as rightsizable_to_mig_slice,
    count(*) filter (where rightsize_to = 'smaller_model') as rightsizable_to_smaller_model,
    count(*) filter (where rightsize_to = 'fewer_gpus') as rightsizable_to_fewer_gpus,
    coalesce(sum(allocated_gpu_hours) filter (where rightsize_to is not null), 0) as rightsizable_gpu_hours
  from rightsized
  group by all
),

sizes as (
  select day, gpu_model, share_mode, profile, gpus_requested from pending_daily
  union
  select day, gpu_model, share_mode, profile, gpus_requested from rightsized_daily
),

final as (
  select
    s.day,
    s.gpu_model,
    s.share_mode,
    nullif(s.profile, '') as mig_profile,
    s.gpus_requested,
    coalesce(p.waited_gpu_hours, 0) as waited_gpu_hours,
    coalesce(p.capacity_bound_gpu_hours, 0) as capacity_bound_gpu_hours,
    coalesce(p.fragmentation_gpu_hours, 0) as fragmentation_gpu_hours,
    coalesce(p.pending_gpus_avg, 0) as pending_gpus_avg,
    coalesce(p.pending_gpus_peak_hour, 0) as pending_gpus_peak_hour,
    p.peak_hour_at,
    coalesce(fd.free_gpus_avg, 0) as free_gpus_avg,
    coalesce(fh.free_gpus, 0) as free_gpus_at_peak_hour,
    greatest(coalesce(p.pending_gpus_avg, 0) - coalesce(fd.free_gpus_avg, 0), 0) as gap_gpus_avg,
    greatest(coalesce(p.pending_gpus_peak_hour, 0) - coalesce(fh.free_gpus, 0), 0) as gap_gpus_peak_hour,
    coalesce(r.attempts_measured, 0) as attempts_measured,
    coalesce(r.rightsizable_attempts, 0) as rightsizable_attempts,
    coalesce(r.rightsizable_to_mig_slice, 0) as rightsizable_to_mig_slice,
    coalesce(r.rightsizable_to_smaller_model, 0) as rightsizable_to_smaller_model,
    coalesce(r.rightsizable_to_fewer_gpus, 0) as rightsizable_to_fewer_gpus,
    coalesce(r.rightsizable_gpu_hours, 0) as rightsizable_gpu_hours
  from sizes s
  left join pending_daily p using (day, gpu_model, share_mode, profile, gpus_requested)
  left join free_daily fd using (day, gpu_model, share_mode, profile)
  left join free_hourly fh
    on fh.hour_at = p.peak_hour_at
    and fh.gpu_model = s.gpu_model
    and fh.share_mode = s.share_mode
    and fh.profile = s.profile
  left join rightsized_daily r using (day, gpu_model, share_mode, profile, gpus_requested)
)

select * from final
