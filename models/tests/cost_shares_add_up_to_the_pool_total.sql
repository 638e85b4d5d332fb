-- Each month's tenant costs add up to the pool's total cost and their shares to 100 %.
-- Returns the months where either does not hold.
select
  month,
  sum(total_cost_usd) as tenants_cost_usd,
  max(pool_total_cost_usd) as pool_total_cost_usd,
  sum(cost_share_pct) as cost_share_pct
from {{ ref('cost_attribution') }}
group by month
having abs(sum(total_cost_usd) - max(pool_total_cost_usd)) > 1e-6 * greatest(1, max(pool_total_cost_usd))
  or (max(pool_total_cost_usd) > 0 and abs(sum(cost_share_pct) - 100) > 1e-6)
