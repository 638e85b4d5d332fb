-- Tenants per UTC calendar month, for the tenant review pack: queue-wait percentiles over the tenant's
-- jobs that first started in the month, whatever their queue (metrics.queue_month has one row per queue
-- and tenant, and percentiles of queues cannot be combined into the tenant's), and the waiting work
-- beside them (PRODUCT.md "Waiting work", as metrics.queue_month reports it): the jobs cancelled while
-- queued in the month and the jobs still waiting at its end ("now" = the month's end in the data, the
-- data's end in the last month), each with its pending age.
with jobs as (
  select * from {{ ref('dim_jobs') }}
),

waits as (
  select
    cast(date_trunc('month', first_started_at) as date) as month,
    tenant,
    count(*) as jobs_started,
    quantile_cont(queue_wait_s, 0.5) as queue_wait_p50_s,
    quantile_cont(queue_wait_s, 0.95) as queue_wait_p95_s
  from jobs
  where first_started_at is not null
  group by all
),

cancelled_queued as (
  select
    cast(date_trunc('month', finished_at) as date) as month,
    tenant,
    count(*) as cancelled_while_queued,
    quantile_cont(cancelled_pending_age_s, 0.95) as cancelled_pending_age_p95_s
  from jobs
  where is_cancelled_while_queued
  group by all
),

waiting as (
  select
    month,
    tenant,
    count(*) as jobs_waiting,
    quantile_cont(pending_age_s, 0.95) as waiting_age_p95_s,
    max(pending_age_s) as waiting_age_max_s
  from {{ ref('fct_waiting_jobs') }}
  where is_month_end
  group by all
),

keys as (
  select month, tenant from waits
  union select month, tenant from cancelled_queued
  union select month, tenant from waiting
),

final as (
  select
    k.month,
    k.tenant,
    coalesce(w.jobs_started, 0) as jobs_started,
    w.queue_wait_p50_s,
    w.queue_wait_p95_s,
    coalesce(p.jobs_waiting, 0) as jobs_waiting,
    p.waiting_age_p95_s,
    p.waiting_age_max_s,
    coalesce(c.cancelled_while_queued, 0) as cancelled_while_queued,
    c.cancelled_pending_age_p95_s
  from keys k
  left join waits w
    on w.month = k.month and w.tenant is not distinct from k.tenant
  left join cancelled_queued c
    on c.month = k.month and c.tenant is not distinct from k.tenant
  left join waiting p
    on p.month = k.month and p.tenant is not distinct from k.tenant
)

select * from final
