-- Question: why do jobs wait, per GPU model? GPU-hours waited by cause (capacity, fragmentation,
-- quota, ...) over the loaded window, and each cause's share of the model's waiting.
-- Views: metrics.wait_causes
-- Columns: gpu_model, cause, waited_gpu_hours, waited_hours, cause_share_pct
with by_cause as (
  select gpu_model, cause, sum(waited_gpu_hours) as waited_gpu_hours, sum(waited_hours) as waited_hours
  from metrics.wait_causes
  group by gpu_model, cause
),

final as (
  select
    gpu_model,
    cause,
    round(waited_gpu_hours, 1) as waited_gpu_hours,
    round(waited_hours, 1) as waited_hours,
    round(100 * waited_gpu_hours / nullif(sum(waited_gpu_hours) over (partition by gpu_model), 0), 1)
      as cause_share_pct
  from by_cause
)

select * from final order by gpu_model, waited_gpu_hours desc, cause
