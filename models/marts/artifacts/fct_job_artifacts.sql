-- What each finished training job left behind, from its ok artifact events of any attempt and any time
-- (a model is often registered after the run ends):
--   registered   a model version was registered for it
--   logged_only  an artifact was logged, no model version
--   none         neither; checkpoints alone are not a final artifact (has_checkpoint says whether it wrote any)
-- Failed writes count for nothing.
--
-- merged by job (macros/build_window.sql): a build re-reads the jobs with an event in the window and those
-- with an artifact record in it
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_artifact_jobs', window_key='source, job_id') }}
with jobs as (
  select * from {{ ref('dim_jobs') }}
  where is_finished and template = 'training'
    and {{ in_window_artifact_jobs() }}
),

artifact_events as (
  select * from {{ ref('stg_scheduler__artifacts') }}
  where status = 'ok'
    and job_id in (select job_id from jobs)
),

matched as (
  select
    j.source,
    j.job_id,
    e.kind,
    e.occurred_at,
    e.model_name,
    e.model_version
  from jobs j
  join artifact_events e
    on e.job_id = j.job_id
    and (e.job_source is null or e.job_source = j.source)
),

per_job as (
  select
    source,
    job_id,
    count(*) filter (where kind = 'model_version') as model_versions,
    count(*) filter (where kind = 'artifact') as artifacts,
    count(*) filter (where kind = 'checkpoint') as checkpoints,
    arg_max(model_name, occurred_at) filter (where kind = 'model_version') as model_name,
    arg_max(model_version, occurred_at) filter (where kind = 'model_version') as model_version,
    max(occurred_at) filter (where kind = 'model_version') as registered_at,
    max(occurred_at) filter (where kind = 'artifact') as last_artifact_at
  from matched
  group by source, job_id
),

final as (
  select
    j.source,
    j.job_id,
    j.tenant,
    j.queue,
    j.user_name,
    j.template,
    j.gpu_model,
    j.finished_at,
    j.final_state,
    j.is_failed,
    case
      when p.model_versions > 0 then 'registered'
      when p.artifacts > 0 then 'logged_only'
      else 'none'
    end as artifact_status,
    coalesce(p.model_versions, 0) as model_versions,
    coalesce(p.artifacts, 0) as artifacts,
    coalesce(p.checkpoints, 0) as checkpoints,
    coalesce(p.checkpoints, 0) > 0 as has_checkpoint,
    p.model_name,
    p.model_version,
    p.registered_at,
    p.last_artifact_at
  from jobs j
  left join per_job p using (source, job_id)
)

select * from final
