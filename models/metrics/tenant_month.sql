-- Tenants per UTC calendar month, for the tenant review pack: queue-wait percentiles over the tenant's
-- jobs that first started in the month, whatever their queue (metrics.queue_month has one row per queue
-- and tenant, and percentiles of queues cannot be combined into the tenant's).
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

final as (
  select month, tenant, jobs_started, queue_wait_p50_s, queue_wait_p95_s
  from waits
)

select * from final
