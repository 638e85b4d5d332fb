-- Job figures for the whole loaded window, per template and for all work ('all').
with jobs as (
  select * from marts.dim_jobs
),

aggregated as (
  select
    case when grouping(template) = 1 then 'all' else coalesce(template, 'unknown') end as template,
    count(*) as jobs,
    count(*) filter (where is_finished) as finished_jobs,
    count(*) filter (where is_failed) as failed_jobs,
    cast(sum(retries) as bigint) as retries,
    cast(sum(preemptions) as bigint) as preemptions,
    quantile_cont(queue_wait_s, 0.5) as queue_wait_p50_s,
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s
  from jobs
  group by grouping sets ((template), ())
  having count(*) > 0
),

final as (
  select
    template,
    jobs,
    finished_jobs,
    failed_jobs,
    100.0 * failed_jobs / nullif(finished_jobs, 0) as failure_rate_pct,
    retries,
    preemptions,
    queue_wait_p50_s,
    queue_wait_p95_s
  from aggregated
)

select * from final
