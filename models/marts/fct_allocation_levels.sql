-- how many GPUs (fraction-weighted) a tenant, and the pool, held at each moment: a sweep over
-- allocation starts (+fraction) and ends (-fraction), cut at midnight
with allocations as (
  select tenant, gpu_model, fraction, started_at, effective_ended_at
  from marts.fct_allocations
  where effective_ended_at > started_at
),

changes as (
  select 'tenant' as level_scope, tenant, gpu_model, started_at as changed_at, fraction as delta from allocations
  union all
  select 'tenant', tenant, gpu_model, effective_ended_at, -fraction from allocations
  union all
  select 'pool', null, gpu_model, started_at, fraction from allocations
  union all
  select 'pool', null, gpu_model, effective_ended_at, -fraction from allocations
),

net_changes as (
  select level_scope, tenant, gpu_model, changed_at, sum(delta) as delta
  from changes
  group by level_scope, tenant, gpu_model, changed_at
),

levels as (
  select
    level_scope,
    tenant,
    gpu_model,
    changed_at as level_start_at,
    lead(changed_at) over w as level_end_at,
    -- rounding absorbs float residue from sums of sevenths
    round(sum(delta) over (w rows between unbounded preceding and current row), 9) as allocated_gpus
  from net_changes
  window w as (partition by level_scope, tenant, gpu_model order by changed_at)
),

days as (
  select day, day_start_at from marts.dim_days
),

final as (
  select
    l.level_scope,
    l.tenant,
    l.gpu_model,
    d.day,
    greatest(l.level_start_at, d.day_start_at) as level_start_at,
    least(l.level_end_at, d.day_start_at + interval 1 day) as level_end_at,
    l.allocated_gpus,
    epoch(least(l.level_end_at, d.day_start_at + interval 1 day) - greatest(l.level_start_at, d.day_start_at))
      / 3600.0 as hours
  from levels l
  join days d
    on d.day_start_at < l.level_end_at
    and d.day_start_at + interval 1 day > l.level_start_at
  where l.level_end_at is not null
    and l.allocated_gpus > 0
)

select * from final
