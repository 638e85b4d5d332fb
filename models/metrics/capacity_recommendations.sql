-- a governance record written by the capacity_recommendations asset, read as it stands (no mart:
-- the advice is computed from the metric views, so a mart would need a second build)
with recommendations as (
  select * from {{ source('governance', 'capacity_recommendations') }}
),

final as (
  select
    recommendation_id,
    recommended_at,
    period_month,
    rank,
    kind,
    gpu_model,
    tenant,
    queue,
    target,
    recommendation,
    recommendation_zh,
    quantity,
    unit,
    wait_cause,
    confidence,
    confidence_score,
    impact_gpu_hours,
    evidence_json,
    whatif_json,
    rules_version
  from recommendations
)

select * from final
