-- the decision log (gpupool.governance/v1): one line per decision and one per answer.
-- The log is written at least once: a line may be written again (a retried flush) or a file
-- ingested twice. Keep the first time each key reached each record kind, status and outcome
-- (the contract's dedupe key), from its latest ingest.
with source as (
  select * from {{ source('raw', 'governance_actions') }}
),

latest_delivery as (
  select *
  from source
  qualify row_number() over (
    partition by idempotency_key, record, status, outcome
    order by occurred_at asc, ingested_at desc, partition_date desc, ingest_source desc, line_number asc
  ) = 1
),

typed as (
  select
    lower(record) as record_type,
    occurred_at as recorded_at,
    idempotency_key,
    finding_id,
    policy,
    policy_version,
    lower(policy_kind) as policy_kind,
    lower(mode) as mode,
    step_index,
    lower(action) as action,
    lower(coalesce(engine, 'allocator')) as engine,
    job_id,
    attempt,
    tenant,
    queue,
    lower(status) as status,
    status_reason,
    reason,
    evidence_json,
    detected_at,
    window_start_at,
    window_end_at,
    gpus_flagged,
    gpus_held,
    gpu_hours,
    recommendation,
    lower(outcome) as outcome,
    outcome_reason,
    delivery_attempts,
    api_version,
    source_file,
    line_number,
    ingested_at
  from latest_delivery
),

final as (
  select
    *,
    -- the key's latest line: an answer wins over a decision logged at the same instant
    row_number() over (
      partition by idempotency_key
      order by recorded_at desc, case record_type when 'answer' then 0 else 1 end, line_number desc
    ) = 1 as is_latest_for_key
  from typed
)

select * from final
