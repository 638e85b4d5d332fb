-- how many GPUs (fraction-weighted) a tenant, a queue, and the pool held at each moment: a sweep
-- over allocation starts (+fraction) and ends (-fraction). fct_allocation_levels cuts these steps
-- at midnight, fct_pool_hourly at the hours.
-- Rebuilt from the window's start on (macros/build_window.sql): the steps that end at or after it. The
-- level at any moment from then on is a sweep over the allocations alive then, so only the allocations
-- that end at or after the window's start are read
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_from', window_key='level_end_at') }}
with allocations as (
  select tenant, queue, gpu_model, fraction, started_at, effective_ended_at
  from {{ ref('fct_allocations') }}
  where effective_ended_at > started_at
    and {{ in_window_from('effective_ended_at') }}
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

{% if is_incremental() %}
-- the step the window's start cuts began at the last change before it, which may be the end of an
-- allocation not read here: the previous build has that start (nothing before the window changed)
cut_steps as (
  select level_scope, tenant, queue, gpu_model, level_start_at
  from {{ this }}
  where level_start_at < {{ window_start_at() }}
    and level_end_at >= {{ window_start_at() }}
),

{% endif %}
final as (
  select
    l.level_scope,
    l.tenant,
    l.queue,
    l.gpu_model,
    {% if is_incremental() -%}
    case
      when l.level_start_at < {{ window_start_at() }} then coalesce(c.level_start_at, l.level_start_at)
      else l.level_start_at
    end as level_start_at,
    {%- else -%}
    l.level_start_at,
    {%- endif %}
    l.level_end_at,
    l.allocated_gpus
  from levels l
  {%- if is_incremental() %}
  -- read by level_start_at above (sqlfluff checks the two ifs' branches apart)
  left join cut_steps c  -- noqa: ST11
    on c.level_scope = l.level_scope
    and c.tenant is not distinct from l.tenant
    and c.queue is not distinct from l.queue
    and c.gpu_model is not distinct from l.gpu_model
    and l.level_start_at < {{ window_start_at() }}
  {%- endif %}
  where l.level_end_at is not null
    and l.allocated_gpus > 0
    and {{ in_window_from('l.level_end_at') }}
)

select * from final
