-- The pool's hosts over the whole loaded window (what `gpupool demo` prints): metrics.host_daily's days
-- combined, its daily CPU means weighted by their minutes with data, and the busiest host-day's p95.
with daily as (
  select * from {{ ref('host_daily') }}
),

final as (
  select
    min(day) as first_day,
    max(day) as last_day,
    count(distinct host) as hosts,
    coalesce(sum(minutes_with_data), 0) as minutes_with_data,
    sum(cpu_busy_pct_mean * minutes_with_data) / nullif(sum(minutes_with_data), 0) as cpu_busy_pct_mean,
    max(cpu_busy_pct_p95) as cpu_busy_pct_p95_max_day,
    -- ties: the last host by name
    arg_max(host, (cpu_busy_pct_p95, host)) as busiest_host
  from daily
)

select * from final
