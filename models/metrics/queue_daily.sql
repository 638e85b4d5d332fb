with jobs as (
  select * from marts.dim_jobs
),

attempts as (
  select a.*, j.queue
  from marts.fct_job_attempts a
  join jobs j using (source, job_id)
),

submissions as (
  select cast(submitted_at as date) as day, queue, count(*) as submissions
  from jobs
  where submitted_at is not null
  group by all
),

-- a job's queue wait is known when it first starts: reported on that day
first_starts as (
  select
    cast(first_started_at as date) as day,
    queue,
    count(*) as jobs_started,
    quantile_cont(queue_wait_s, 0.5) as queue_wait_p50_s,
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s,
    avg(queue_wait_s) as queue_wait_mean_s
  from jobs
  where first_started_at is not null
  group by all
),

admissions as (
  select
    cast(admitted_at as date) as day,
    queue,
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
    count(*) filter (where end_event_type = 'preempt') as preemptions,
    count(*) filter (where end_event_type = 'requeue') as requeues
  from attempts
  where end_event_type in ('preempt', 'requeue')
  group by all
),

usage as (
  select day, queue, sum(allocated_gpu_hours) as allocated_gpu_hours
  from marts.fct_allocation_daily
  group by all
),

queue_tenants as (
  select queue, min(tenant) as tenant from jobs group by queue
),

keys as (
  select day, queue from submissions
  union select day, queue from first_starts
  union select day, queue from admissions
  union select day, queue from interruptions
  union select day, queue from usage
),

final as (
  select
    k.day,
    k.queue,
    t.tenant,
    coalesce(s.submissions, 0) as submissions,
    coalesce(f.jobs_started, 0) as jobs_started,
    f.queue_wait_p50_s,
    f.queue_wait_p95_s,
    f.queue_wait_mean_s,
    coalesce(a.admissions, 0) as admissions,
    a.admission_wait_p50_s,
    a.admission_wait_p95_s,
    coalesce(i.preemptions, 0) as preemptions,
    coalesce(i.requeues, 0) as requeues,
    coalesce(u.allocated_gpu_hours, 0) as allocated_gpu_hours
  from keys k
  left join queue_tenants t on t.queue is not distinct from k.queue
  left join submissions s on s.day = k.day and s.queue is not distinct from k.queue
  left join first_starts f on f.day = k.day and f.queue is not distinct from k.queue
  left join admissions a on a.day = k.day and a.queue is not distinct from k.queue
  left join interruptions i on i.day = k.day and i.queue is not distinct from k.queue
  left join usage u on u.day = k.day and u.queue is not distinct from k.queue
)

select * from final
