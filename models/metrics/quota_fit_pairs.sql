-- Starved tenant x donor tenant x GPU model: the GPU-hours of the donor's idle quota that fell in
-- hours when the starved tenant was borrowing or waiting on its quota on that model. Each hour the match is
-- min(starved need, donor idle) over all starved and donor tenants of the model, split over the
-- pairs in proportion to each starved tenant's need and each donor's idle quota; the pairs'
-- hours are summed over the window.
with fit as (
  select tenant, gpu_model, is_starved, is_donor, quota_gpus, need_gpu_hours, idle_quota_gpu_hours
  from {{ ref('quota_fit') }}
),

-- need and idle quota are differences of float sums: below 1e-9 GPU-hours they are rounding residue, not
-- an hour of need or of idle quota (counting them made matched_hours depend on summation order)
hourly as (
  select
    tenant,
    gpu_model,
    hour_at,
    any_value(hour_hours) as hour_hours,
    sum(borrowed_gpu_hours + quota_bound_gpu_hours) filter (where is_quota_queue) as need_gpu_hours,
    sum(idle_quota_gpu_hours) as idle_quota_gpu_hours
  from {{ ref('fct_pool_hourly') }}
  where level_scope = 'queue' and tenant is not null
  group by tenant, gpu_model, hour_at
),

starved as (
  select h.tenant, h.gpu_model, h.hour_at, h.hour_hours, h.need_gpu_hours
  from hourly h
  join fit f using (tenant, gpu_model)
  where f.is_starved and h.need_gpu_hours > 1e-9
),

donors as (
  select h.tenant, h.gpu_model, h.hour_at, h.idle_quota_gpu_hours
  from hourly h
  join fit f using (tenant, gpu_model)
  where f.is_donor and h.idle_quota_gpu_hours > 1e-9
),

starved_totals as (
  select gpu_model, hour_at, sum(need_gpu_hours) as need_gpu_hours from starved group by gpu_model, hour_at
),

donor_totals as (
  select gpu_model, hour_at, sum(idle_quota_gpu_hours) as idle_quota_gpu_hours from donors group by gpu_model, hour_at
),

matched as (
  select
    s.tenant as starved_tenant,
    d.tenant as donor_tenant,
    s.gpu_model,
    s.hour_at,
    least(st.need_gpu_hours, dt.idle_quota_gpu_hours)
      * (s.need_gpu_hours / st.need_gpu_hours)
      * (d.idle_quota_gpu_hours / dt.idle_quota_gpu_hours) as movable_gpu_hours,
    s.hour_hours
  from starved s
  join donors d using (gpu_model, hour_at)
  join starved_totals st using (gpu_model, hour_at)
  join donor_totals dt using (gpu_model, hour_at)
),

pairs as (
  select
    starved_tenant,
    donor_tenant,
    gpu_model,
    sum(movable_gpu_hours) as movable_gpu_hours,
    count(*) as matched_hours,
    max(movable_gpu_hours / hour_hours) as peak_movable_gpus
  from matched
  group by starved_tenant, donor_tenant, gpu_model
),

window_hours as (
  select sum(hour_hours) as hours
  from (select distinct hour_at, hour_hours from {{ ref('fct_pool_hourly') }})
),

final as (
  select
    p.starved_tenant,
    p.donor_tenant,
    p.gpu_model,
    p.movable_gpu_hours,
    p.movable_gpu_hours / nullif(w.hours, 0) as mean_movable_gpus,
    p.peak_movable_gpus,
    p.matched_hours,
    s.need_gpu_hours as starved_need_gpu_hours,
    d.idle_quota_gpu_hours as donor_idle_quota_gpu_hours,
    d.quota_gpus as donor_quota_gpus
  from pairs p
  cross join window_hours w
  join fit s on s.tenant = p.starved_tenant and s.gpu_model = p.gpu_model
  join fit d on d.tenant = p.donor_tenant and d.gpu_model = p.gpu_model
)

select * from final
