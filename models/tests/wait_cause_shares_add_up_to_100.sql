-- Per day, queue, tenant and GPU model, the causes' shares of the waited GPU-hours add up to 100 %.
select day, queue, tenant, gpu_model, sum(cause_share_pct) as cause_share_pct
from {{ ref('wait_causes') }}
group by day, queue, tenant, gpu_model
having sum(waited_gpu_hours) > 0 and abs(sum(cause_share_pct) - 100) > 1e-6
