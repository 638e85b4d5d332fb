with final as (
  select * from {{ ref('fct_telemetry_reconciliation') }}
)

select * from final
