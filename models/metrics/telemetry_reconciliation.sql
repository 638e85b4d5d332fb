with final as (
  select * from marts.fct_telemetry_reconciliation
)

select * from final
