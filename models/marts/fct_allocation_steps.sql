-- how many GPUs (fraction-weighted) a tenant, a queue, and the pool held at each moment: a sweep
-- over allocation starts (+fraction) and ends (-fraction). fct_allocation_levels cuts these steps
-- at midnight, fct_pool_hourly at the hours
with allocations as (
  select tenant, queue, gpu_model, fraction, started_at, effective_ended_at
  from {{ ref('fct_allocations') }}
  where effective_ended_at > started_at
),

changes as (
  select
    'tenant' as level_scope,
    tenant,
    cast(null as varchar) as queue,
    gpu_model,
    started_at as changed_at,
    fraction as delta
  from allocations
  union all
  select 'tenant', tenant, null, gpu_model, effective_ended_at, -fraction from allocations
  union all
  select 'queue', null, queue, gpu_model, started_at, fraction from allocations
  union all
  select 'queue', null, queue, gpu_model, effective_ended_at, -fraction from allocations
  union all
  select 'pool', null, null, gpu_model, started_at, fraction from allocations
  union all
  select 'pool', null, null, gpu_model, effective_ended_at, -fraction from allocations
),

net_changes as (
  select level_scope, tenant, queue, gpu_model, changed_at, sum(delta) as delta
  from changes
  group by level_scope, tenant, queue, gpu_model, changed_at
),

levels as (
  select
    level_scope,
    tenant,
    queue,
    gpu_model,
    changed_at as level_start_at,
    lead(changed_at) over w as level_end_at,
    -- rounding absorbs float residue from sums of sevenths
    round(sum(delta) over (w rows between unbounded preceding and current row), 9) as allocated_gpus
  from net_changes
  window w as (partition by level_scope, tenant, queue, gpu_model order by changed_at)
),

final as (
  select
    level_scope,
    tenant,
    queue,
    gpu_model,
    level_start_at,
    level_end_at,
    allocated_gpus
  from levels
  where level_end_at is not null
    and allocated_gpus > 0
)

select * from final
