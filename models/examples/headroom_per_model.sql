-- Question: how much room does each GPU model have over the whole loaded window: capacity, the
-- hourly peak and 95th percentile of allocated GPUs, and the headroom and utilisation at each?
-- Views: metrics.capacity_headroom
-- Columns: gpu_model, capacity_gpus, peak_allocated_gpus, p95_allocated_gpus, headroom_at_peak_gpus, headroom_at_p95_gpus, utilisation_at_p95_pct, p95_demand_gpus
select
  gpu_model,
  capacity_gpus,
  peak_allocated_gpus,
  round(p95_allocated_gpus, 1) as p95_allocated_gpus,
  round(headroom_at_peak_gpus, 1) as headroom_at_peak_gpus,
  round(headroom_at_p95_gpus, 1) as headroom_at_p95_gpus,
  round(utilisation_at_p95_pct, 1) as utilisation_at_p95_pct,
  round(p95_demand_gpus, 1) as p95_demand_gpus
from metrics.capacity_headroom
where window_kind = 'period' and queue = 'all'
order by gpu_model
