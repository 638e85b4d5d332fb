with final as (
  select * from marts.fct_enforcement_actions
)

select * from final
