with final as (
  select * from marts.fct_audit_events
)

select * from final
