with causes as (
  select * from {{ ref('fct_wait_causes') }}
),

grouped as (
  select
    day,
    cause,
    queue,
    tenant,
    gpu_model,
    count(distinct concat_ws(':', source, job_id, cast(attempt as varchar))) as pending_intervals,
    sum(waited_hours) as waited_hours,
    sum(waited_gpu_hours) as waited_gpu_hours
  from causes
  group by all
),

final as (
  select
    day,
    cause,
    queue,
    tenant,
    gpu_model,
    pending_intervals,
    waited_hours,
    waited_gpu_hours,
    100.0 * waited_gpu_hours / nullif(sum(waited_gpu_hours) over (partition by day, queue, tenant, gpu_model), 0)
      as cause_share_pct
  from grouped
)

select * from final
