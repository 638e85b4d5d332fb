-- Quota fit per tenant and GPU model over the loaded window: the quota a tenant's queues held,
-- how much of it they used, how much they ran above it (borrowed) and how much sat idle, all
-- moment by moment per queue (the allocator charges quota per queue). Usage counts against the
-- queue's owner, whoever submitted. Starved tenants need more than their quota gave; donors
-- leave much of theirs idle; quota_fit_pairs matches them hour by hour.
with thresholds as (
  select
    90.0 as starved_quota_used_pct,   -- in-quota use at or above this share of quota ...
    0.25 as starved_need_share,       -- ... or need (borrowed + quota-bound waits) at or above this share of quota
    1.0 as min_need_gpu_hours,        -- and at least this much need
    25.0 as donor_idle_share_pct,     -- a donor leaves at least this share of its quota idle
    1.0 as min_idle_gpu_hours         -- and at least this much
),

hourly as (
  select * from {{ ref('fct_pool_hourly') }} where level_scope = 'queue' and tenant is not null
),

-- quota GPU-hours are already defined per day in metrics.tenant_quota: summed, not recomputed
tenant_quota as (
  select tenant, gpu_model, sum(quota_gpu_hours) as quota_gpu_hours
  from {{ ref('tenant_quota') }}
  group by tenant, gpu_model
),

latest_hour as (
  select max(hour_at) as hour_at from hourly
),

usage as (
  select
    h.tenant,
    h.gpu_model,
    string_agg(distinct h.queue, ',' order by h.queue) as queues,
    min(h.hour_at) as window_start_at,
    max(h.hour_end_at) as window_end_at,
    sum(h.quota_gpus) filter (where h.hour_at = l.hour_at) as quota_gpus,
    sum(h.allocated_gpu_hours) as queue_allocated_gpu_hours,
    sum(h.in_quota_gpu_hours) as in_quota_gpu_hours,
    coalesce(sum(h.borrowed_gpu_hours) filter (where h.is_quota_queue), 0) as borrowed_gpu_hours,
    coalesce(sum(h.allocated_gpu_hours) filter (where not h.is_quota_queue), 0) as quota_less_gpu_hours,
    sum(h.idle_quota_gpu_hours) as idle_quota_gpu_hours,
    coalesce(sum(h.pending_gpu_hours) filter (where h.is_quota_queue), 0) as pending_gpu_hours,
    -- more quota helps only quota-bound waits (the rest waited for capacity, placement or policy)
    coalesce(sum(h.quota_bound_gpu_hours) filter (where h.is_quota_queue), 0) as quota_bound_gpu_hours
  from hourly h
  cross join latest_hour l
  group by h.tenant, h.gpu_model
),

measured as (
  select
    u.tenant,
    u.gpu_model,
    u.queues,
    u.window_start_at,
    u.window_end_at,
    coalesce(u.quota_gpus, 0) as quota_gpus,
    coalesce(q.quota_gpu_hours, 0) as quota_gpu_hours,
    u.queue_allocated_gpu_hours,
    u.in_quota_gpu_hours,
    u.borrowed_gpu_hours,
    u.quota_less_gpu_hours,
    u.idle_quota_gpu_hours,
    u.pending_gpu_hours,
    u.quota_bound_gpu_hours,
    u.borrowed_gpu_hours + u.quota_bound_gpu_hours as need_gpu_hours,
    100.0 * u.in_quota_gpu_hours / nullif(q.quota_gpu_hours, 0) as quota_used_pct,
    100.0 * u.idle_quota_gpu_hours / nullif(q.quota_gpu_hours, 0) as idle_quota_share_pct
  from usage u
  left join tenant_quota q using (tenant, gpu_model)
),

final as (
  select
    m.*,
    m.need_gpu_hours >= t.min_need_gpu_hours
      and (
        coalesce(m.quota_used_pct, 0) >= t.starved_quota_used_pct
        or m.need_gpu_hours >= t.starved_need_share * m.quota_gpu_hours
      ) as is_starved,
    not (
      m.need_gpu_hours >= t.min_need_gpu_hours
      and (
        coalesce(m.quota_used_pct, 0) >= t.starved_quota_used_pct
        or m.need_gpu_hours >= t.starved_need_share * m.quota_gpu_hours
      )
    )
      and m.idle_quota_gpu_hours >= t.min_idle_gpu_hours
      and coalesce(m.idle_quota_share_pct, 0) >= t.donor_idle_share_pct as is_donor
  from measured m
  cross join thresholds t
)

select * from final
