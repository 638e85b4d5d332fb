-- Queues per UTC calendar month and tenant, for the monthly review pack: counts are the month's
-- sums of metrics.queue_daily; wait percentiles are computed over the month's jobs (never a max
-- or mean of daily percentiles), and waiting work is reported beside them at the month's end.
with jobs as (
  select * from {{ ref('dim_jobs') }}
),

month_ends as (
  select month, min(day) as first_day, max(day) as last_day
  from {{ ref('dim_days') }}
  group by month
),

sums as (
  select
    cast(date_trunc('month', day) as date) as month,
    queue,
    tenant,
    sum(submissions) as submissions,
    sum(jobs_started) as jobs_started,
    sum(cancelled_while_queued) as cancelled_while_queued,
    sum(admissions) as admissions,
    sum(preemptions) as preemptions,
    sum(requeues) as requeues,
    sum(allocated_gpu_hours) as allocated_gpu_hours
  from {{ ref('queue_daily') }}
  group by all
),

waits as (
  select
    cast(date_trunc('month', first_started_at) as date) as month,
    queue,
    tenant,
    quantile_cont(queue_wait_s, 0.5) as queue_wait_p50_s,
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s
  from jobs
  where first_started_at is not null
  group by all
),

cancelled_queued as (
  select
    cast(date_trunc('month', finished_at) as date) as month,
    queue,
    tenant,
    quantile_cont(cancelled_pending_age_s, 0.95) as cancelled_pending_age_p95_s
  from jobs
  where is_cancelled_while_queued
  group by all
),

-- "now" for a month is its end (the data's end in the last month)
waiting as (
  select
    month,
    queue,
    tenant,
    count(*) as jobs_waiting,
    quantile_cont(pending_age_s, 0.95) as waiting_age_p95_s,
    max(pending_age_s) as waiting_age_max_s
  from {{ ref('fct_waiting_jobs') }}
  where is_month_end
  group by all
),

keys as (
  select month, queue, tenant from sums
  union select month, queue, tenant from waiting
),

final as (
  select
    k.month,
    e.first_day,
    e.last_day,
    k.queue,
    k.tenant,
    coalesce(s.submissions, 0) as submissions,
    coalesce(s.jobs_started, 0) as jobs_started,
    w.queue_wait_p50_s,
    w.queue_wait_p95_s,
    coalesce(p.jobs_waiting, 0) as jobs_waiting,
    p.waiting_age_p95_s,
    p.waiting_age_max_s,
    coalesce(s.cancelled_while_queued, 0) as cancelled_while_queued,
    c.cancelled_pending_age_p95_s,
    coalesce(s.admissions, 0) as admissions,
    coalesce(s.preemptions, 0) as preemptions,
    coalesce(s.requeues, 0) as requeues,
    coalesce(s.allocated_gpu_hours, 0) as allocated_gpu_hours
  from keys k
  join month_ends e using (month)
  left join sums s
    on s.month = k.month and s.queue is not distinct from k.queue and s.tenant is not distinct from k.tenant
  left join waits w
    on w.month = k.month and w.queue is not distinct from k.queue and w.tenant is not distinct from k.tenant
  left join cancelled_queued c
    on c.month = k.month and c.queue is not distinct from k.queue and c.tenant is not distinct from k.tenant
  left join waiting p
    on p.month = k.month and p.queue is not distinct from k.queue and p.tenant is not distinct from k.tenant
)

select * from final
