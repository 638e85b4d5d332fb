with final as (
  select * from marts.dim_queues
)

select * from final
