-- Job figures for the whole loaded window, per template and for all work ('all').
with jobs as (
  select * from marts.dim_jobs
),

by_template as (
  select
    coalesce(template, 'unknown') as template,
    count(*) as jobs,
    count(*) filter (where is_finished) as finished_jobs,
    count(*) filter (where is_failed) as failed_jobs,
    sum(retries) as retries,
    sum(preemptions) as preemptions,
    quantile_cont(queue_wait_s, 0.5) as queue_wait_p50_s,
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s
  from jobs
  group by 1
),

all_work as (
  select
    'all' as template,
    count(*) as jobs,
    count(*) filter (where is_finished) as finished_jobs,
    count(*) filter (where is_failed) as failed_jobs,
    sum(retries) as retries,
    sum(preemptions) as preemptions,
    quantile_cont(queue_wait_s, 0.5) as queue_wait_p50_s,
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s
  from jobs
  having count(*) > 0
),

unioned as (
  select * from by_template
  union all
  select * from all_work
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
  from unioned
)

select * from final
