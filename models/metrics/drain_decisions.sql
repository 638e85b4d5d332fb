-- Every drain and undrain the gpu-health policy decided (marts.fct_governance_actions), one row per
-- step, whatever its mode: a shadow drain is what the policy would have done. The target is a GPU
-- ("node-07/3") or a whole node ("node-07"); the faults behind it come from the finding's evidence.
with actions as (
  select * from {{ ref('fct_governance_actions') }}
  where policy_kind = 'gpu_health' and action in ('drain', 'undrain')
),

final as (
  select
    idempotency_key,
    finding_id,
    policy,
    policy_version,
    mode,
    action,
    job_id as target,
    case when contains(job_id, '/') then 'gpu' else 'node' end as target_kind,
    split_part(job_id, '/', 1) as host,
    try_cast(nullif(split_part(job_id, '/', 2), '') as integer) as gpu,
    engine,
    decided_at,
    day,
    cast(date_trunc('month', decided_at) as date) as month,
    final_status,
    coalesce(final_status_reason, decision_status_reason) as status_reason,
    engine_outcome,
    outcome,
    answered_at,
    detected_at,
    window_start_at,
    try_cast(json_extract_string(evidence_json, '$.last_fault_at') as timestamp) as last_fault_at,
    try_cast(json_extract_string(evidence_json, '$.fault_minutes') as integer) as fault_minutes,
    cast(json_extract(evidence_json, '$.faulty_gpus') as varchar) as faulty_gpus,
    reason,
    case when action = 'drain' then 1 else 0 end as drains_decided,
    case when action = 'drain' and engine_outcome = 'applied' then 1 else 0 end as drains_applied
  from actions
)

select * from final
