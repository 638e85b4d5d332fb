-- Job figures for the whole loaded window, per template and for all work ('all').
with jobs as (
  select * from {{ ref('dim_jobs') }}
),

data_end as (
  select max(as_of_at) as as_of_at from {{ ref('dim_days') }}
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
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s,
    -- waiting work beside the percentiles (dim_jobs defines it): still waiting at the data's end
    -- ("now"), or cancelled while queued; pending age = now or end - submit
    count(*) filter (where pending_ended_at is null and submitted_at is not null) as jobs_waiting,
    quantile_cont(epoch(as_of_at - submitted_at), 0.95) filter (where pending_ended_at is null)
      as waiting_age_p95_s,
    max(epoch(as_of_at - submitted_at)) filter (where pending_ended_at is null) as waiting_age_max_s,
    count(*) filter (where is_cancelled_while_queued) as cancelled_while_queued,
    quantile_cont(cancelled_pending_age_s, 0.95) as cancelled_pending_age_p95_s
  from jobs
  cross join data_end
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
    queue_wait_p95_s,
    jobs_waiting,
    waiting_age_p95_s,
    waiting_age_max_s,
    cancelled_while_queued,
    cancelled_pending_age_p95_s
  from aggregated
)

select * from final
