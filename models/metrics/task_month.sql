-- Run times per UTC calendar month and template (and 'all'), for the monthly review pack: the
-- percentiles are computed over the jobs finished in the month, never from daily percentiles.
with jobs as (
  select * from {{ ref('dim_jobs') }}
),

aggregated as (
  select
    cast(date_trunc('month', finished_at) as date) as month,
    case when grouping(template) = 1 then 'all' else coalesce(template, 'unknown') end as template,
    count(*) as finished_jobs,
    count(*) filter (where is_failed) as failed_jobs,
    quantile_cont(run_time_s, 0.5) as run_time_p50_s,
    quantile_cont(run_time_s, 0.95) as run_time_p95_s,
    avg(run_time_s) as run_time_mean_s
  from jobs
  where finished_at is not null
  group by grouping sets ((cast(date_trunc('month', finished_at) as date), template),
                          (cast(date_trunc('month', finished_at) as date)))
),

final as (
  select
    month,
    template,
    finished_jobs,
    failed_jobs,
    run_time_p50_s,
    run_time_p95_s,
    run_time_mean_s
  from aggregated
)

select * from final
