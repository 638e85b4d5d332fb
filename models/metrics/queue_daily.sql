-- Queues per day and tenant: a shared queue has one row per tenant using it, each measure counted
-- for that tenant's jobs, so sums by queue and sums by tenant are both right (never a guessed label).
with jobs as (
  select * from {{ ref('dim_jobs') }}
),

waiting_jobs as (
  select * from {{ ref('fct_waiting_jobs') }}
),

attempts as (
  select a.*, j.queue, j.tenant
  from {{ ref('fct_job_attempts') }} a
  join jobs j using (source, job_id)
),

submissions as (
  select cast(submitted_at as date) as day, queue, tenant, count(*) as submissions
  from jobs
  where submitted_at is not null
  group by all
),

-- a job's queue wait is known when it first starts: reported on that day
first_starts as (
  select
    cast(first_started_at as date) as day,
    queue,
    tenant,
    count(*) as jobs_started,
    quantile_cont(queue_wait_s, 0.5) as queue_wait_p50_s,
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s,
    avg(queue_wait_s) as queue_wait_mean_s
  from jobs
  where first_started_at is not null
  group by all
),

-- waiting work beside the percentiles (PRODUCT.md "Waiting work"): jobs that ended without ever
-- starting (cancelled while queued), on the day they ended, pending age = end - submit ...
cancelled_queued as (
  select
    cast(finished_at as date) as day,
    queue,
    tenant,
    count(*) as cancelled_while_queued,
    quantile_cont(cancelled_pending_age_s, 0.5) as cancelled_pending_age_p50_s,
    quantile_cont(cancelled_pending_age_s, 0.95) as cancelled_pending_age_p95_s
  from jobs
  where is_cancelled_while_queued
  group by all
),

-- ... and jobs still waiting at the day's end ("now" = the day's end, the data's end on the last
-- day): submitted before it, neither started nor ended by it; pending age = day's end - submit
waiting as (
  select
    day,
    queue,
    tenant,
    count(*) as jobs_waiting,
    quantile_cont(pending_age_s, 0.5) as waiting_age_p50_s,
    quantile_cont(pending_age_s, 0.95) as waiting_age_p95_s,
    max(pending_age_s) as waiting_age_max_s
  from waiting_jobs
  group by all
),

admissions as (
  select
    cast(admitted_at as date) as day,
    queue,
    tenant,
    count(*) as admissions,
    quantile_cont(admission_wait_s, 0.5) as admission_wait_p50_s,
    quantile_cont(admission_wait_s, 0.95) as admission_wait_p95_s
  from attempts
  where admitted_at is not null
  group by all
),

interruptions as (
  select
    cast(ended_at as date) as day,
    queue,
    tenant,
    count(*) filter (where end_event_type = 'preempt') as preemptions,
    count(*) filter (where end_event_type = 'requeue') as requeues
  from attempts
  where end_event_type in ('preempt', 'requeue')
  group by all
),

usage as (
  select day, queue, tenant, sum(allocated_gpu_hours) as allocated_gpu_hours
  from {{ ref('fct_allocation_daily') }}
  group by all
),

keys as (
  select day, queue, tenant from submissions
  union select day, queue, tenant from first_starts
  union select day, queue, tenant from cancelled_queued
  union select day, queue, tenant from waiting
  union select day, queue, tenant from admissions
  union select day, queue, tenant from interruptions
  union select day, queue, tenant from usage
),

final as (
  select
    k.day,
    k.queue,
    k.tenant,
    coalesce(s.submissions, 0) as submissions,
    coalesce(f.jobs_started, 0) as jobs_started,
    f.queue_wait_p50_s,
    f.queue_wait_p95_s,
    f.queue_wait_mean_s,
    coalesce(w.jobs_waiting, 0) as jobs_waiting,
    w.waiting_age_p50_s,
    w.waiting_age_p95_s,
    w.waiting_age_max_s,
    coalesce(c.cancelled_while_queued, 0) as cancelled_while_queued,
    c.cancelled_pending_age_p50_s,
    c.cancelled_pending_age_p95_s,
    coalesce(a.admissions, 0) as admissions,
    a.admission_wait_p50_s,
    a.admission_wait_p95_s,
    coalesce(i.preemptions, 0) as preemptions,
    coalesce(i.requeues, 0) as requeues,
    coalesce(u.allocated_gpu_hours, 0) as allocated_gpu_hours
  from keys k
  left join submissions s
    on s.day = k.day and s.queue is not distinct from k.queue and s.tenant is not distinct from k.tenant
  left join first_starts f
    on f.day = k.day and f.queue is not distinct from k.queue and f.tenant is not distinct from k.tenant
  left join waiting w
    on w.day = k.day and w.queue is not distinct from k.queue and w.tenant is not distinct from k.tenant
  left join cancelled_queued c
    on c.day = k.day and c.queue is not distinct from k.queue and c.tenant is not distinct from k.tenant
  left join admissions a
    on a.day = k.day and a.queue is not distinct from k.queue and a.tenant is not distinct from k.tenant
  left join interruptions i
    on i.day = k.day and i.queue is not distinct from k.queue and i.tenant is not distinct from k.tenant
  left join usage u
    on u.day = k.day and u.queue is not distinct from k.queue and u.tenant is not distinct from k.tenant
)

select * from final
