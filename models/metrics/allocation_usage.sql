with final as (
  select * from marts.fct_allocation_usage
)

select * from final
