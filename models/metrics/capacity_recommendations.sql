with final as (
  select * from marts.fct_capacity_recommendations
)

select * from final
