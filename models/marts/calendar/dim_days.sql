-- the data window: from the first day with events or telemetry to the data's end (as_of_at);
-- running allocations are clipped at as_of_at and the last day is cut there. A table, rebuilt whole
-- (as_of_at moves every build): it reads bounds of small inputs, never the per-minute rows
with event_bounds as (
  select min(occurred_at) as first_at, max(occurred_at) as last_at
  from {{ ref('stg_scheduler__job_events') }}
),

telemetry_bounds as (
  -- a sample at minute m stands for the minute [m, m + 1); the per-day summary, not every minute
  select min(first_minute_at) as first_at, max(last_minute_at) + interval 1 minute as last_at
  from {{ ref('fct_gpu_series_daily') }}
),

window_bounds as (
  select
    date_trunc('day', least(e.first_at, t.first_at)) as window_start_at,
    greatest(e.last_at, t.last_at) as as_of_at
  from event_bounds e
  cross join telemetry_bounds t
),

days as (
  select
    cast(d.range as date) as day,
    d.range as day_start_at,
    least(d.range + interval 1 day, w.as_of_at) as day_end_at,
    w.as_of_at
  from window_bounds w
  cross join range(w.window_start_at, w.as_of_at, interval 1 day) d
  where w.as_of_at is not null
),

final as (
  select
    day,
    cast(date_trunc('month', day) as date) as month,
    day_start_at,
    day_end_at,
    epoch(day_end_at - day_start_at) / 3600.0 as hours,
    day_end_at = day_start_at + interval 1 day as is_complete,
    as_of_at
  from days
)

select * from final
