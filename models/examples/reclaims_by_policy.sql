-- Question: what did each idle-reclaim policy do: reclaims, GPUs freed, GPU-hours recovered and how
-- much of that other work used, and how many reclaims were false positives?
-- Views: metrics.reclaim_ledger
-- Columns: policy, action_kind, actions, gpus_freed, recovered_gpu_hours, reused_gpu_hours, reuse_share_pct, false_positives
select
  coalesce(policy, '(manual)') as policy,
  action_kind,
  count(*) as actions,
  round(sum(gpus_freed), 1) as gpus_freed,
  round(sum(recovered_gpu_hours), 1) as recovered_gpu_hours,
  round(sum(reused_gpu_hours), 1) as reused_gpu_hours,
  round(100 * sum(reused_gpu_hours) / nullif(sum(recovered_gpu_hours), 0), 1) as reuse_share_pct,
  count(*) filter (where is_false_positive) as false_positives
from metrics.reclaim_ledger
group by all
order by recovered_gpu_hours desc nulls last, policy, action_kind
