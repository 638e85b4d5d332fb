-- Question: which jobs asked for far more than they used? The 20 jobs under 50% utilisation of
-- what they held with the most unused GPU-hours (allocated - active), with their memory watermark:
-- the first candidates for fewer GPUs, a smaller model or a MIG slice.
-- Views: metrics.job_summary
-- Columns: job_id, tenant, queue, gpu_model, gpus_requested, allocated_gpu_hours, active_gpu_hours, unused_gpu_hours, utilisation_of_allocated_pct, peak_fb_used_pct
select
  job_id,
  tenant,
  queue,
  gpu_model,
  gpus_requested,
  round(allocated_gpu_hours, 1) as allocated_gpu_hours,
  round(active_gpu_hours, 1) as active_gpu_hours,
  round(allocated_gpu_hours - active_gpu_hours, 1) as unused_gpu_hours,
  round(utilisation_of_allocated_pct, 1) as utilisation_of_allocated_pct,
  round(peak_fb_used_pct, 1) as peak_fb_used_pct
from metrics.job_summary
where has_telemetry and allocated_gpu_hours > 0 and utilisation_of_allocated_pct < 50
order by unused_gpu_hours desc, job_id
limit 20
