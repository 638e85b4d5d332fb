with capacity as (
  select day, gpu_model, count(*) as physical_gpus, sum(capacity_gpu_hours) as capacity_gpu_hours
  from {{ ref('fct_capacity_daily') }}
  group by day, gpu_model
),

allocation as (
  select
    day,
    gpu_model,
    sum(allocated_gpu_hours) as allocated_gpu_hours,
    sum(active_gpu_hours) as active_gpu_hours,
    sum(idle_gpu_hours) as idle_allocated_gpu_hours,
    coalesce(sum(allocated_gpu_hours) filter (where not has_telemetry), 0) as allocated_gpu_hours_without_telemetry
  from {{ ref('fct_allocation_daily') }}
  group by day, gpu_model
),

peaks as (
  select day, gpu_model, max(allocated_gpus) as peak_allocated_gpus
  from {{ ref('fct_allocation_levels') }}
  where level_scope = 'pool'
  group by day, gpu_model
),

telemetry as (
  select
    day,
    gpu_model,
    max(peak_fb_used_mib) as peak_fb_used_mib,
    sum(energy_kwh) as energy_kwh,
    sum(pcie_tx_bytes) as pcie_tx_bytes,
    sum(pcie_rx_bytes) as pcie_rx_bytes,
    sum(nvlink_tx_bytes) as nvlink_tx_bytes,
    sum(nvlink_rx_bytes) as nvlink_rx_bytes
  from {{ ref('fct_gpu_daily') }}
  group by day, gpu_model
),

busy_unallocated as (
  select day, gpu_model, sum(gpu_hours) as busy_unallocated_gpu_hours
  from {{ ref('fct_telemetry_reconciliation') }}
  where finding = 'busy_unallocated'
  group by day, gpu_model
),

keys as (
  select day, gpu_model from capacity
  union
  select day, gpu_model from allocation
  union
  select day, gpu_model from telemetry
),

-- telemetry outside the data window (none by construction) would otherwise add days
window_keys as (
  select * from keys where day in (select day from {{ ref('dim_days') }})
),

final as (
  select
    k.day,
    k.gpu_model,
    coalesce(c.physical_gpus, 0) as physical_gpus,
    coalesce(c.capacity_gpu_hours, 0) as capacity_gpu_hours,
    coalesce(a.allocated_gpu_hours, 0) as allocated_gpu_hours,
    coalesce(a.active_gpu_hours, 0) as active_gpu_hours,
    coalesce(a.idle_allocated_gpu_hours, 0) as idle_allocated_gpu_hours,
    coalesce(c.capacity_gpu_hours, 0) - coalesce(a.allocated_gpu_hours, 0) as unallocated_gpu_hours,
    100.0 * coalesce(a.allocated_gpu_hours, 0) / nullif(c.capacity_gpu_hours, 0) as allocation_rate_pct,
    100.0 * a.active_gpu_hours / nullif(a.allocated_gpu_hours, 0) as utilisation_of_allocated_pct,
    100.0 * coalesce(a.active_gpu_hours, 0) / nullif(c.capacity_gpu_hours, 0) as pool_utilisation_pct,
    coalesce(p.peak_allocated_gpus, 0) as peak_allocated_gpus,
    coalesce(a.allocated_gpu_hours_without_telemetry, 0) as allocated_gpu_hours_without_telemetry,
    coalesce(b.busy_unallocated_gpu_hours, 0) as busy_unallocated_gpu_hours,
    t.peak_fb_used_mib,
    t.energy_kwh,
    t.pcie_tx_bytes,
    t.pcie_rx_bytes,
    t.nvlink_tx_bytes,
    t.nvlink_rx_bytes
  from window_keys k
  left join capacity c using (day, gpu_model)
  left join allocation a using (day, gpu_model)
  left join peaks p using (day, gpu_model)
  left join telemetry t using (day, gpu_model)
  left join busy_unallocated b using (day, gpu_model)
)

select * from final
