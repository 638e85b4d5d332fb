-- filled by the capacity-recommendation issue (governance.capacity_recommendations); until then
-- the contract exists with no rows so that the metric view, dashboards and packs can bind to it
with final as (
  select
    cast(null as varchar) as recommendation_id,
    cast(null as timestamp) as recommended_at,
    cast(null as date) as period_month,
    cast(null as varchar) as gpu_model,
    cast(null as varchar) as tenant,
    cast(null as varchar) as kind,
    cast(null as varchar) as recommendation,
    cast(null as double) as quantity,
    cast(null as varchar) as wait_cause,
    cast(null as varchar) as evidence_json,
    cast(null as varchar) as policy_version
  where false
)

select * from final
