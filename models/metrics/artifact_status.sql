-- Finished training jobs by what they left behind (marts.fct_job_artifacts: registered | logged_only | none),
-- per month they finished in, tenant and template, with each status's share of the month's finished jobs of
-- the tenant and template.
with jobs as (
  select
    cast(date_trunc('month', finished_at) as date) as month,
    coalesce(tenant, 'unknown') as tenant,
    template,
    artifact_status,
    has_checkpoint
  from {{ ref('fct_job_artifacts') }}
),

by_status as (
  select
    month,
    tenant,
    template,
    artifact_status,
    count(*) as jobs,
    count(*) filter (where has_checkpoint) as jobs_with_checkpoint
  from jobs
  group by month, tenant, template, artifact_status
),

final as (
  select
    month,
    tenant,
    template,
    artifact_status,
    jobs,
    100.0 * jobs / sum(jobs) over (partition by month, tenant, template) as jobs_share_pct,
    jobs_with_checkpoint
  from by_status
)

select * from final
