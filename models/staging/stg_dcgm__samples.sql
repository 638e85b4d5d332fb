-- a sample can arrive twice (a scrape file and Prometheus history, or a re-ingested day):
-- one row per series and timestamp, the value from the latest ingest (the descriptive labels are
-- the same in every delivery of a series, so any one will do)
with source as (
  select * from raw.dcgm_samples
),

deduplicated as (
  select
    host,
    gpu,
    gpu_instance_id,
    metric,
    sampled_at,
    k8s_namespace,
    k8s_pod,
    k8s_container,
    hpc_job,
    arg_max(value, ingested_at) as value,
    any_value(uuid) as uuid,
    any_value(model_name) as model_name,
    any_value(gpu_instance_profile) as gpu_instance_profile,
    any_value(source) as source,
    count(*) as deliveries,
    max(ingested_at) as ingested_at
  from source
  group by host, gpu, gpu_instance_id, metric, sampled_at, k8s_namespace, k8s_pod, k8s_container, hpc_job
),

final as (
  select
    sampled_at,
    host,
    gpu,
    gpu_instance_id,
    gpu_instance_profile,
    uuid,
    model_name,
    metric,
    value,
    k8s_namespace,
    k8s_pod,
    k8s_container,
    hpc_job,
    source,
    deliveries,
    ingested_at
  from deduplicated
)

select * from final
