-- per GPU model: mean time between hardware faults = GPU-hours observed / hardware-fault minutes (each GPU's,
-- metrics.gpu_faults: its node going down counts every minute it is down).
-- Observed GPU-hours: each physical GPU (dim_gpus, whole GPUs once) over the loaded window.
with gpus as (
  select distinct host, gpu, gpu_model from {{ ref('dim_gpus') }}
),

window_hours as (
  select sum(hours) as hours from {{ ref('dim_days') }}
),

-- hardware-fault minutes as metrics.gpu_faults counts them (a node down included: cause host_down)
faults as (
  select
    gpu_model,
    sum(hardware_faults) as hardware_faults,
    count(*) filter (where hardware_faults > 0) as gpus_with_faults
  from {{ ref('gpu_faults') }}
  where hardware_faults > 0
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
