-- Weekly series per GPU model (trailing 7 x 24 h weeks ending at the data's end, read from
-- capacity_headroom) and a least-squares straight line through the complete weeks, extended
-- 4 weeks ahead. x is the week's position: 0 = the last complete week, -1 the one before, ...,
-- +1..+4 the forecast weeks, so the intercept is the line's value at the last week.
with weekly as (
  select *
  from {{ ref('capacity_headroom') }}
  where window_kind = 'week' and queue = 'all'
),

observed as (
  select
    gpu_model,
    weeks_before_end,
    -weeks_before_end as week_x,
    window_start_at as week_start_at,
    window_end_at as week_end_at,
    hours,
    is_complete_week,
    capacity_gpus,
    allocated_gpu_hours,
    mean_allocated_gpus,
    peak_allocated_gpus,
    p95_allocated_gpus,
    pending_gpu_hours,
    allocated_gpu_hours + pending_gpu_hours as demand_gpu_hours
  from weekly
),

-- only complete weeks enter the fit: a partial week's GPU-hours are not comparable
fits as (
  select
    gpu_model,
    count(*) as trend_weeks_used,
    regr_slope(allocated_gpu_hours, week_x) as allocated_slope_gpu_hours_per_week,
    regr_intercept(allocated_gpu_hours, week_x) as allocated_intercept_gpu_hours,
    regr_r2(allocated_gpu_hours, week_x) as allocated_trend_r2,
    regr_slope(p95_allocated_gpus, week_x) as p95_slope_gpus_per_week,
    regr_intercept(p95_allocated_gpus, week_x) as p95_intercept_gpus,
    regr_r2(p95_allocated_gpus, week_x) as p95_trend_r2,
    regr_slope(demand_gpu_hours, week_x) as demand_slope_gpu_hours_per_week,
    regr_intercept(demand_gpu_hours, week_x) as demand_intercept_gpu_hours,
    regr_r2(demand_gpu_hours, week_x) as demand_trend_r2
  from observed
  where is_complete_week
  group by gpu_model
),

models as (
  select
    gpu_model,
    arg_max(capacity_gpus, week_end_at) as latest_capacity_gpus,
    max(week_end_at) as as_of_at
  from observed
  group by gpu_model
),

forecast_weeks as (
  select
    m.gpu_model,
    -w.range as weeks_before_end,
    w.range as week_x,
    m.as_of_at + to_days(7 * (w.range - 1)) as week_start_at,
    m.as_of_at + to_days(7 * w.range) as week_end_at,
    168.0 as hours,
    true as is_complete_week,
    m.latest_capacity_gpus as capacity_gpus
  from models m
  cross join range(1, 5) w
),

series as (
  select
    gpu_model, weeks_before_end, week_x, week_start_at, week_end_at, hours, is_complete_week,
    false as is_forecast, capacity_gpus, allocated_gpu_hours, mean_allocated_gpus, peak_allocated_gpus,
    p95_allocated_gpus, pending_gpu_hours, demand_gpu_hours
  from observed
  union all
  select
    gpu_model, weeks_before_end, week_x, week_start_at, week_end_at, hours, is_complete_week,
    true, capacity_gpus, null, null, null, null, null, null
  from forecast_weeks
),

-- the line is drawn (and extended) only from 3 complete weeks up
final as (
  select
    s.gpu_model,
    s.weeks_before_end,
    s.week_x,
    s.week_start_at,
    s.week_end_at,
    s.hours,
    s.is_complete_week,
    s.is_forecast,
    s.capacity_gpus,
    s.allocated_gpu_hours,
    s.mean_allocated_gpus,
    s.peak_allocated_gpus,
    s.p95_allocated_gpus,
    s.pending_gpu_hours,
    s.demand_gpu_hours,
    coalesce(f.trend_weeks_used, 0) as trend_weeks_used,
    f.allocated_slope_gpu_hours_per_week,
    f.allocated_trend_r2,
    f.p95_slope_gpus_per_week,
    f.p95_trend_r2,
    f.demand_slope_gpu_hours_per_week,
    f.demand_trend_r2,
    case when f.trend_weeks_used >= 3 and s.is_complete_week
      then f.allocated_intercept_gpu_hours + f.allocated_slope_gpu_hours_per_week * s.week_x
    end as trend_allocated_gpu_hours,
    case when f.trend_weeks_used >= 3 and s.is_complete_week
      then f.p95_intercept_gpus + f.p95_slope_gpus_per_week * s.week_x end as trend_p95_allocated_gpus,
    case when f.trend_weeks_used >= 3 and s.is_complete_week
      then f.demand_intercept_gpu_hours + f.demand_slope_gpu_hours_per_week * s.week_x end as trend_demand_gpu_hours,
    case when f.trend_weeks_used >= 3 and s.is_complete_week
      then s.capacity_gpus - (f.p95_intercept_gpus + f.p95_slope_gpus_per_week * s.week_x)
    end as trend_headroom_at_p95_gpus,
    case when f.trend_weeks_used >= 3 and s.is_complete_week
      then (f.demand_intercept_gpu_hours + f.demand_slope_gpu_hours_per_week * s.week_x) / s.hours
    end as trend_mean_demand_gpus
  from series s
  left join fits f using (gpu_model)
)

select * from final
