with final as (
  select * from {{ ref('fct_audit_events') }}
)

select * from final
