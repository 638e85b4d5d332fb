-- Question: what is the 95th-percentile queue wait (first start - submit) of each queue, week by
-- week? The view carries a daily p95 per queue and tenant (a shared queue has a row per tenant);
-- worst_daily_p95_wait_min is the worst of those in the week, only a hint: the true weekly
-- percentile needs the per-job waits (metrics.job_summary.queue_wait_s), weekly_p95_wait_min.
-- Views: metrics.queue_daily, metrics.job_summary
-- Columns: week, queue, jobs_started, worst_daily_p95_wait_min, weekly_p95_wait_min
with daily as (
  select date_trunc('week', day)::date as week, queue, jobs_started, queue_wait_p95_s
  from metrics.queue_daily
),

jobs as (
  select date_trunc('week', first_started_at)::date as week, queue, queue_wait_s
  from metrics.job_summary
  where first_started_at is not null
),

weekly as (
  select week, queue, quantile_cont(queue_wait_s, 0.95) as p95_s from jobs group by week, queue
),

final as (
  select
    d.week,
    d.queue,
    sum(d.jobs_started)::bigint as jobs_started,
    round(max(d.queue_wait_p95_s) / 60, 1) as worst_daily_p95_wait_min,
    round(any_value(w.p95_s) / 60, 1) as weekly_p95_wait_min
  from daily as d
  left join weekly as w on w.week = d.week and w.queue = d.queue
  group by d.week, d.queue
)

select * from final order by week, queue
