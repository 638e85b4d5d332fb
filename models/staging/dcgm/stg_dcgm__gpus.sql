-- what each GPU (or MIG instance) in the telemetry says about itself; the highest value does not
-- care about re-delivered samples, so this reads the lake without deduplicating
with source as (
  select host, gpu, gpu_instance_id, uuid, model_name, gpu_instance_profile
  from {{ source('raw', 'dcgm_samples') }}
),

final as (
  select
    host,
    gpu,
    gpu_instance_id,
    max(uuid) as uuid,
    max(model_name) as model_name,
    max(gpu_instance_profile) as gpu_instance_profile
  from source
  group by host, gpu, gpu_instance_id
)

select * from final
