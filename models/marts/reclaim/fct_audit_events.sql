-- Merged by record (macros/build_window.sql, in_window_audit_records): a build re-reads every stage
-- and delivery of the records with a raw row in the window's days, and those it made of those days.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_audit_records', window_key='source, audit_id') }}
with records as (
  select * from {{ ref('stg_audit__events') }}
  where {{ in_window_audit_records() }}
),

-- a Kubernetes request logs one record per stage: keep ResponseComplete, else its latest stage
one_per_request as (
  select *
  from records
  qualify row_number() over (
    partition by source, audit_id
    order by case stage when 'ResponseComplete' then 0 else 1 end, occurred_at desc, stage desc
  ) = 1
),

classified as (
  select
    *,
    lower(action) in ('create', 'update', 'patch', 'delete', 'deletecollection') as is_k8s_mutation,
    lower(coalesce(object_kind, '')) in ('roles', 'rolebindings', 'clusterroles', 'clusterrolebindings')
      as is_rbac_object
  from one_per_request
),

final as (
  select
    audit_id,
    occurred_at,
    cast(occurred_at as date) as day,
    source,
    case
      when action like 'permission.%' then 'permission_change'
      when source = 'k8s' and is_rbac_object and is_k8s_mutation then 'permission_change'
      when action like 'quota.%' then 'quota_change'
      when source = 'k8s' and lower(coalesce(object_kind, '')) in ('resourcequotas', 'clusterqueues', 'resourceflavors')
        and is_k8s_mutation then 'quota_change'
      when action like 'approval.%' then 'approval'
      when action like 'enforcement.%' then 'enforcement'
      when action like 'queue.%' then 'queue_change'
      when source = 'k8s' and is_k8s_mutation then 'other_change'
      when source = 'k8s' then 'read'
      else 'other'
    end as category,
    action,
    actor,
    actor_role,
    object_kind,
    object_namespace,
    object_name,
    decision,
    reason,
    stage,
    response_code,
    request_id,
    idempotency_key,
    api_version,
    coalesce(decision = 'deny', false) or coalesce(response_code >= 400, false) as is_denied,
    before_json,
    after_json,
    source_file,
    line_number
  from classified
)

select * from final
