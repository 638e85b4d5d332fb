-- tenants pay for what they were allocated, and share what nobody was allocated in proportion to
-- their allocated cost, so the tenants' costs add up to the pool's cost
with days as (
  select day, month from {{ ref('dim_days') }}
),

prices as (
  select gpu_model, price_per_gpu_hour from {{ ref('gpu_models') }}
),

pool as (
  select
    d.month,
    sum(c.capacity_gpu_hours) as pool_capacity_gpu_hours,
    sum(c.capacity_gpu_hours * coalesce(p.price_per_gpu_hour, 0)) as pool_total_cost_usd
  from {{ ref('fct_capacity_daily') }} c
  join days d using (day)
  left join prices p using (gpu_model)
  group by d.month
),

tenant_allocated as (
  select
    d.month,
    a.tenant,
    sum(a.allocated_gpu_hours) as allocated_gpu_hours,
    sum(a.allocated_gpu_hours * coalesce(p.price_per_gpu_hour, 0)) as allocated_cost_usd,
    coalesce(sum(a.allocated_gpu_hours) filter (where p.price_per_gpu_hour is null), 0) as unpriced_gpu_hours
  from {{ ref('fct_allocation_daily') }} a
  join days d using (day)
  left join prices p using (gpu_model)
  group by d.month, a.tenant
),

month_allocated as (
  select month, sum(allocated_gpu_hours) as pool_allocated_gpu_hours, sum(allocated_cost_usd) as pool_allocated_cost_usd
  from tenant_allocated
  group by month
),

attributed as (
  select
    t.month,
    t.tenant,
    t.allocated_gpu_hours,
    t.allocated_cost_usd,
    (coalesce(p.pool_total_cost_usd, 0) - m.pool_allocated_cost_usd)
      * t.allocated_cost_usd / m.pool_allocated_cost_usd as shared_unallocated_cost_usd,
    t.unpriced_gpu_hours
  from tenant_allocated t
  join month_allocated m using (month)
  left join pool p using (month)
  where m.pool_allocated_cost_usd > 0
),

-- a month where nobody was allocated anything priced: its whole cost stays with the pool
unattributed as (
  select
    p.month,
    '(unallocated)' as tenant,
    0.0 as allocated_gpu_hours,
    0.0 as allocated_cost_usd,
    p.pool_total_cost_usd as shared_unallocated_cost_usd,
    0.0 as unpriced_gpu_hours
  from pool p
  left join month_allocated m using (month)
  where coalesce(m.pool_allocated_cost_usd, 0) = 0
),

unioned as (
  select * from attributed
  union all by name
  select * from unattributed
),

final as (
  select
    u.month,
    u.tenant,
    u.allocated_gpu_hours,
    u.allocated_cost_usd,
    u.shared_unallocated_cost_usd,
    u.allocated_cost_usd + u.shared_unallocated_cost_usd as total_cost_usd,
    100.0 * (u.allocated_cost_usd + u.shared_unallocated_cost_usd) / nullif(p.pool_total_cost_usd, 0) as cost_share_pct,
    u.unpriced_gpu_hours,
    coalesce(p.pool_capacity_gpu_hours, 0) as pool_capacity_gpu_hours,
    coalesce(m.pool_allocated_gpu_hours, 0) as pool_allocated_gpu_hours,
    coalesce(p.pool_total_cost_usd, 0) as pool_total_cost_usd
  from unioned u
  left join pool p using (month)
  left join month_allocated m using (month)
)

select * from final
