-- Question: what did each tenant cost per month, its own allocations plus its share of the pool's
-- unallocated capacity (tenants add up to the pool total)?
-- Views: metrics.cost_attribution
-- Columns: month, tenant, allocated_gpu_hours, allocated_cost_usd, shared_unallocated_cost_usd, total_cost_usd, cost_share_pct
select
  month,
  tenant,
  round(allocated_gpu_hours, 1) as allocated_gpu_hours,
  round(allocated_cost_usd, 2) as allocated_cost_usd,
  round(shared_unallocated_cost_usd, 2) as shared_unallocated_cost_usd,
  round(total_cost_usd, 2) as total_cost_usd,
  round(cost_share_pct, 1) as cost_share_pct
from metrics.cost_attribution
order by month, total_cost_usd desc, tenant
