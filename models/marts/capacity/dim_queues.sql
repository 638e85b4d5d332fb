with quotas as (
  select * from {{ ref('stg_pool__queue_quotas') }}
),

latest_snapshot as (
  select source, max(snapshot_at) as snapshot_at
  from quotas
  group by source
),

final as (
  select
    q.queue,
    q.gpu_model,
    q.tenant,
    q.quota_gpus,
    q.priority,
    q.preemptible,
    q.max_gpus_per_request,
    q.max_runtime_s,
    q.retry_budget,
    q.source,
    q.snapshot_at
  from quotas q
  join latest_snapshot using (source, snapshot_at)
  qualify row_number() over (
    partition by q.queue, q.gpu_model
    order by case q.source when 'allocator' then 0 else 1 end, q.source
  ) = 1
)

select * from final
