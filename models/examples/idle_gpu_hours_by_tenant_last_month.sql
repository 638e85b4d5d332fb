-- Question: how many allocated GPU-hours sat idle, per tenant, last month (the latest full or
-- partial month loaded), and what share of each tenant's allocation was that?
-- Views: metrics.tenant_daily
-- Columns: month, tenant, allocated_gpu_hours, idle_allocated_gpu_hours, idle_share_pct
with last_month as (
  select date_trunc('month', max(day)) as month from metrics.tenant_daily
),

final as (
  select
    l.month::date as month,
    t.tenant,
    round(sum(t.allocated_gpu_hours), 1) as allocated_gpu_hours,
    round(sum(t.idle_allocated_gpu_hours), 1) as idle_allocated_gpu_hours,
    round(100 * sum(t.idle_allocated_gpu_hours) / nullif(sum(t.allocated_gpu_hours), 0), 1) as idle_share_pct
  from metrics.tenant_daily as t
  join last_month as l on date_trunc('month', t.day) = l.month
  group by l.month, t.tenant
)

select * from final order by idle_allocated_gpu_hours desc, tenant
