-- per GPU model: mean time between hardware faults = GPU-hours observed / hardware-fault minutes.
-- Observed GPU-hours: each physical GPU (dim_gpus, whole GPUs once) over the loaded window.
with gpus as (
  select distinct host, gpu, gpu_model from {{ ref('dim_gpus') }}
),

window_hours as (
  select sum(hours) as hours from {{ ref('dim_days') }}
),

-- count(distinct (a, b)) counts distinct row values; sqlfluff reads DISTINCT (...) as a call
faults as (
  select gpu_model, count(distinct (host, gpu, minute_at)) as hardware_faults,  -- noqa: ST08, LT01, LT06
    count(distinct (host, gpu)) as gpus_with_faults  -- noqa: ST08, LT01, LT06
  from {{ ref('fct_gpu_health_events') }}
  where is_hardware_fault
  group by gpu_model
),

per_model as (
  select gpu_model, count(*) as gpus
  from gpus
  group by gpu_model
),

final as (
  select
    coalesce(m.gpu_model, f.gpu_model) as gpu_model,
    coalesce(m.gpus, 0) as gpus,
    coalesce(m.gpus, 0) * w.hours as observed_gpu_hours,
    coalesce(f.hardware_faults, 0) as hardware_faults,
    coalesce(f.gpus_with_faults, 0) as gpus_with_faults,
    coalesce(m.gpus, 0) * w.hours / nullif(f.hardware_faults, 0) as mtbf_gpu_hours
  from per_model m
  full join faults f using (gpu_model)
  cross join window_hours w
)

select * from final
