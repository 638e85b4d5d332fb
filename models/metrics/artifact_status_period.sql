-- Finished training jobs of the pool by what they left behind, over the whole loaded window (what `gpupool
-- demo` prints): metrics.artifact_status's months, tenants and templates summed, each status's share of them all.
with by_month as (
  select * from {{ ref('artifact_status') }}
),

by_status as (
  select
    artifact_status,
    sum(jobs) as jobs,
    sum(jobs_with_checkpoint) as jobs_with_checkpoint
  from by_month
  group by artifact_status
),

final as (
  select
    artifact_status,
    cast(jobs as bigint) as jobs,
    100.0 * jobs / sum(jobs) over () as jobs_share_pct,
    cast(jobs_with_checkpoint as bigint) as jobs_with_checkpoint
  from by_status
)

select * from final
